"""`lakehouse bench watch`: freshness from a file's rename in landing to its rows in HTTP search.

Starts `lakehouse run --watch` and `lakehouse serve` as separate processes on one home, drops small
files (written as `.tmp`, then renamed) at a steady rate and polls the search API for each file's rows.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from conf.tables import ASPECT_STATE, AUDIT_EVENTS
from pipelines.bench.harness import bench_settings, latency_summary, percentile, write_result
from pipelines.bench.processes import (
    LAKEHOUSE, child_env, drop_file, free_port, mcl_lines, rss_bytes, search_actor, start_serve, start_watch, stop,
    wait_for, watch_log_records,
)  # fmt: skip

BENCH_ACTOR = "urn:li:corpuser:watch-bench"


def build_home(home: Path, entities: int, seed: int, versions: int = 0) -> None:
    """Fill a new home with a generated history (bronze -> silver -> gold), the state a watcher starts on.

    Args:
        home: the new home.
        entities: entities of the generated history (with usage events), when `versions` is 0.
        seed: the generator seed.
        versions: when set, about this many aspect versions instead (`generate_aspect_versions`: 2M
            versions give about 1M silver (entity, aspect) keys).
    """
    from datagen.history import generate_aspect_versions, generate_history

    inputs = home.parent / f"{home.name}-inputs"
    if versions:
        generate_aspect_versions(inputs, versions=versions, seed=seed, overwrite=True)
    else:
        generate_history(inputs, entities=entities, seed=seed)
    subprocess.run(
        [LAKEHOUSE, "--home", str(home), "--set", "mlflow.enabled=false", "run", "--no-progress", "--path", str(inputs)],
        check=True, env=child_env(), stdout=subprocess.DEVNULL,
    )  # fmt: skip


def settle_home(home: Path) -> None:
    """Finish whatever the home has landed or refined and not yet published, then compact what micro-batches write.

    The watcher starts idle, on tables as the nightly `maintain --optimize` leaves them: without it, a
    run would start wherever the last one left the compaction cycle (a publish reads one more small
    file per earlier micro-batch), and runs could not be compared.
    """
    from pipelines.orchestration.watch_compaction import COMPACTED_TABLES

    base = [LAKEHOUSE, "--home", str(home), "--set", "mlflow.enabled=false"]
    subprocess.run([*base, "run", "--no-progress"], check=True, env=child_env(), stdout=subprocess.DEVNULL)
    tables = [option for table in COMPACTED_TABLES for option in ("-t", table)]
    subprocess.run([*base, "maintain", "--optimize", *tables], check=True, env=child_env(), stdout=subprocess.DEVNULL)


def top_up_audit_rows(home: Path, audit_rows: int, seed: int) -> int:
    """Add generated usage events (the last 30 days) to gold.audit_events until it holds `audit_rows`; return the count added.

    The rows are loaded and compacted the way `lakehouse bench search` builds its table.
    """
    from pipelines.bench.search import build_table

    settings = bench_settings(home)
    missing = audit_rows - state_rows(settings)[AUDIT_EVENTS]
    if missing <= 0:
        return 0
    actors = [f"urn:li:corpuser:watch-bench-user{i:04d}" for i in range(1000)]
    build_table(settings, events=missing, days=30, actor_urns=actors, seed=seed, now_ms=int(time.time() * 1000))
    return missing


def run_watch_bench(
    home: Path,
    files: int,
    records: int,
    interval: float,
    entities: int,
    seed: int,
    timeout: float = 60.0,
    versions: int = 0,
    audit_rows: int = 0,
    watch_settings: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Drop `files` files of `records` records every `interval` seconds and time each until searchable.

    The home is built first when it is empty (`build_home`; `versions` for a large silver state),
    settled (`settle_home`) and topped up to `audit_rows` gold audit rows (`top_up_audit_rows`).
    `watch_settings` (`KEY=VALUE`) are passed to the watcher with `--set`.

    Returns:
        Freshness p50/p95/max (seconds), per-micro-batch step seconds, RSS of the watcher and the server.
    """
    from pipelines.serving.tokens import create_token

    if not (home / "bronze").exists():
        build_home(home, entities, seed, versions)
    settle_home(home)
    if audit_rows:
        top_up_audit_rows(home, audit_rows, seed)
    settings = bench_settings(home)
    token, _ = create_token(settings, "urn:li:corpuser:bench", ["audit-read"])
    landing = settings.landing_paths[0]
    logs = Path(tempfile.mkdtemp(prefix="watch-bench-"))
    port = free_port()
    watcher = start_watch(home, logs / "watch.log", None, *watch_settings)
    server = None
    rss: dict[str, list[dict[str, int]]] = {"watch": [], "serve": []}
    try:
        server = start_serve(home, port, logs / "serve.log")
        wait_for(lambda: watch_log_records(logs / "watch.log", "started"), 120, "the watcher to start")
        run_tag = time.strftime("%H%M%S")

        def drop(actor: str, index: int) -> float:
            lines = mcl_lines(actor, records, int(time.time() * 1000), f"b{run_tag}_{index}")
            return drop_file(landing, f"bench-{run_tag}-{index:05d}.mcl.jsonl", lines)

        def sample() -> None:
            for name, process in (("watch", watcher), ("serve", server)):
                rss[name].append(rss_bytes(process.pid))

        found = time_until_searchable(
            port, token, f"{BENCH_ACTOR}-{run_tag}", files, interval, drop, timeout, logs / "watch.log", sample
        )
    finally:
        codes = {"watch": stop(watcher), "serve": stop(server) if server else None}
    freshness = list(found.values())
    refine_seconds = [b["seconds"]["refine"] for b in watch_log_records(logs / "watch.log", "micro_batch") if b["files"]]
    batches = [b for b in watch_log_records(logs / "watch.log", "micro_batch") if b["files"]]
    return {
        "home": str(home),
        "files": files,
        "records_per_file": records,
        "interval_s": interval,
        "watch_settings": list(watch_settings),
        "freshness_s": latency_summary(freshness),
        "state_rows": state_rows(settings),
        "refine_s": {
            "p50": round(percentile(refine_seconds, 50), 3),
            "max": round(max(refine_seconds), 3),
            "last_over_first": round(refine_seconds[-1] / refine_seconds[0], 2),
        },
        "micro_batches": [
            {"files": b["files"], "records": b["records"], "seconds": b["seconds"], "total_s": b["total_seconds"]}
            for b in batches
        ],
        "compactions": [
            {"table": c["table"], "seconds": c["seconds"]} for c in watch_log_records(logs / "watch.log", "compacted")
        ],
        "rss_bytes": {
            name: {"max": max((r.get("rss_bytes", 0) for r in samples), default=0),
                   "peak": max((r.get("peak_rss_bytes", 0) for r in samples), default=0)}
            for name, samples in rss.items()
        },  # fmt: skip
        "exit_codes": codes,
        "logs": str(logs),
    }


def time_until_searchable(
    port: int,
    token: str,
    actor_prefix: str,
    count: int,
    interval: float,
    send: Callable[[str, int], float],
    timeout: float,
    log: Path,
    on_poll: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Send `count` batches of records, one every `interval` s, and time each until search returns its rows.

    Args:
        port, token: the search API on loopback and a bearer token.
        actor_prefix: batch i's records are made by actor `<actor_prefix>-<i>` (what search looks for).
        send: `send(actor, i)` delivers batch i (drops a file, produces messages) and returns the time
            (epoch s) its freshness counts from.
        timeout: the longest a batch may take.
        log: the watcher's log, named in the timeout's error.
        on_poll: called on each polling round (e.g. to sample memory).

    Returns:
        Seconds from sending to searchable, by actor.

    Raises:
        RuntimeError: when a batch is not searchable within `timeout`.
    """
    sent: dict[str, float] = {}
    found: dict[str, float] = {}
    next_at = time.time()
    while len(found) < count:
        if len(sent) < count and time.time() >= next_at:
            actor = f"{actor_prefix}-{len(sent)}"
            sent[actor] = send(actor, len(sent))
            next_at += interval
        for actor, at in sent.items():
            if actor in found:
                continue
            if not search_actor(port, token, actor, size=1):
                # Batches are picked up oldest first, so the younger ones are not searchable yet either
                # (were one, it would only be timed later, never earlier): one search per round instead
                # of one per waiting batch keeps the probe from taking the CPU it measures.
                break
            found[actor] = time.time() - at
        if on_poll:
            on_poll()
        waiting = [at for actor, at in sent.items() if actor not in found]
        if waiting and time.time() - min(waiting) > timeout:
            raise RuntimeError(f"a batch was not searchable within {timeout} s; watcher log: {log}")
        time.sleep(0.1)
    return found


def state_rows(settings) -> dict[str, int]:
    """Rows of the state a micro-batch works against: silver (entity, aspect) keys and gold audit rows."""
    from deltalake import DeltaTable, QueryBuilder

    from conf.tables import table_location

    counts = {}
    for key in (ASPECT_STATE, AUDIT_EVENTS):
        # The query engine honours deletion vectors, which the plain Arrow reader refuses.
        query = QueryBuilder().register("t", DeltaTable(str(table_location(settings, key))))
        counts[key] = int(query.execute("select count(*) as n from t").read_all().column("n")[0].as_py())
    return counts


def register(bench_app: typer.Typer) -> None:
    """Add `bench watch` to the bench group."""

    @bench_app.command("watch")
    def bench_watch_command(
        home: Path | None = typer.Option(None, "--home", help="Reuse this home (built first when it is empty)."),
        files: int = typer.Option(20, "--files", min=1, help="Files to drop."),
        records: int = typer.Option(50, "--records", min=1, help="Records per file."),
        interval: float = typer.Option(1.0, "--interval", min=0.05, help="Seconds between two files."),
        entities: int = typer.Option(200, "--entities", min=11, help="Entities of the generated home (when built)."),
        versions: int = typer.Option(
            0, "--versions", min=0, help="Build the home from about this many aspect versions instead (2000000: ~1M state keys)."
        ),
        audit_rows: int = typer.Option(
            0, "--audit-rows", min=0, help="Top gold.audit_events up to this many rows with generated usage events."
        ),
        seed: int = typer.Option(7, "--seed", help="Generator seed."),
        watch_set: list[str] = typer.Option(
            [], "--watch-set", help="A setting of the watcher, KEY=VALUE (repeatable), e.g. watch.compact_every_batches=10."
        ),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure watch-mode freshness (rename -> searchable over HTTP), micro-batch steps and RSS."""
        work = home or Path(tempfile.mkdtemp(prefix="watch-bench-home-")) / "home"
        result = run_watch_bench(
            work.resolve(), files, records, interval, entities, seed, versions=versions, audit_rows=audit_rows,
            watch_settings=tuple(watch_set),
        )
        path = write_result(out, "watch", result)
        fresh = result["freshness_s"]
        typer.echo(f"freshness p50 {fresh['p50']} s, p95 {fresh['p95']} s, max {fresh['max']} s -> {path}")

