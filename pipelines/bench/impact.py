"""`lakehouse bench impact`: impact queries in the serving process and a micro-batch of lineage changes.

A home holding a generated lineage history (`datagen.lineage`, a year of it) run through the pipeline.
Queries: the server's read path (its edge index, built once per table version and timed apart, then
the window's change events, their files read once beforehand as a server holds them after a while,
and the walk) for random entities, depth and window as given. Publish: a micro-batch of further
lineage changes landed and refined, then `publish_lineage` timed on its own. A `--work` folder keeps
the built home and reuses it.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from conf.values import DAY_MS
from pipelines.bench.harness import bench_settings, latency_summary, measure, write_result
from pipelines.cli.console import console


def register(bench_app: typer.Typer) -> None:
    """Add `bench impact` to the bench group."""

    @bench_app.command("impact")
    def bench_impact_command(
        entities: int = typer.Option(100_000, "--entities", min=20, help="Entities with lineage (datasets, jobs, charts, dashboards)."),
        max_upstreams: int = typer.Option(19, "--max-upstreams", min=1, help="Most inputs an entity starts with (about 10 on average at 19: 1M edges for 100k entities)."),
        changes: int = typer.Option(50_000, "--changes", min=0, help="Lineage edits over the year after the first lineage."),
        queries: int = typer.Option(200, "--queries", min=1, help="Impact queries timed."),
        depth: int = typer.Option(5, "--depth", min=0, max=10, help="Depth of each query."),
        window_days: int = typer.Option(30, "--window-days", min=1, help="Window of each query, in days."),
        batch_changes: int = typer.Option(100, "--batch-changes", min=1, help="Lineage changes in the timed micro-batch."),
        seed: int = typer.Option(57, "--seed", help="Generator seed."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
        work: Path | None = typer.Option(None, "--work", help="Scratch lakehouse (default: a temporary one, removed after)."),
    ) -> None:
        """Time impact queries in the serving process and the publish of a micro-batch of lineage changes."""
        result = run_impact_bench(entities=entities, max_upstreams=max_upstreams, changes=changes, queries=queries,
                                  depth=depth, window_days=window_days, batch_changes=batch_changes, seed=seed,
                                  work=work)  # fmt: skip
        path = write_result(out, "impact", result)
        console.print(
            f"{result['edges']} edge spans over {entities} entities: query p95 {result['query_s']['p95']} s "
            f"(index {result['index_s']} s), micro-batch of {batch_changes} changes published in "
            f"{result['publish'].wall_s} s -> {path}"
        )


def run_impact_bench(
    *,
    entities: int,
    max_upstreams: int,
    changes: int,
    queries: int,
    depth: int,
    window_days: int,
    batch_changes: int,
    seed: int,
    work: Path | None = None,
) -> dict[str, Any]:
    """Build the home, time the queries and the micro-batch publish; return the figures."""
    from datagen.lineage import lineage_history
    from pipelines.orchestration.jobs import run_job
    from pipelines.batch.publish_lineage import publish_lineage
    from pipelines.runtime.engine import open_session
    from pipelines.serving.impact import ChangeEventReader, LineageIndex, reached_changes
    from pipelines.serving.scoped_reads import ChangeEventScope

    scratch = Path(tempfile.mkdtemp(prefix="bench-impact-")) if work is None else work
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        settings = bench_settings(scratch / "home")
        records = entities + changes + batch_changes
        counts = {"datasets": entities * 7 // 10, "jobs": entities // 10, "charts": entities * 3 // 20,
                  "dashboards": entities - entities * 7 // 10 - entities // 10 - entities * 3 // 20}  # fmt: skip
        options = dict(seed=seed, changes=changes + batch_changes, max_upstreams=max_upstreams,
                       gap_ms=max(2, 2 * 365 * DAY_MS // records), **counts)  # fmt: skip
        history = lineage_history(**options)
        first, batch = history[: len(history) - batch_changes], history[len(history) - batch_changes :]
        landing = scratch / "landing"
        landing.mkdir(exist_ok=True)
        history_file = landing / "history.mcl.jsonl"
        built = _built_home(
            scratch, settings, options, lambda: run_job(settings, paths=[_write(history_file, first)], deliver=False)
        )
        _write(landing / "batch.mcl.jsonl", batch)
        with open_session(settings) as spark:
            run_job(settings, ("land", "refine"), paths=[landing / "batch.mcl.jsonl"], spark=spark, deliver=False)
            with measure() as published:
                result = publish_lineage(spark, settings)
        lineage, change_events = LineageIndex(settings), ChangeEventReader(settings)
        started = time.perf_counter()
        lineage.current()
        index_s = round(time.perf_counter() - started, 3)
        last = history[-1]["created"]["time"]
        # The server keeps the change events' files in memory once read: its state after a while serving.
        started = time.perf_counter()
        change_events.window(history[0]["created"]["time"], last + 1, ChangeEventScope(None))
        events_s = round(time.perf_counter() - started, 3)
        owners = sorted({r["entityUrn"] for r in history})
        rng = random.Random(seed)
        timings, reached = [], 0
        for _ in range(queries):
            target = rng.choice(owners)
            until = rng.randrange(last - 300 * DAY_MS, last + 1)
            since = until - window_days * DAY_MS
            started = time.perf_counter()
            rows, _ = reached_changes(lineage.current(), change_events.window(since, until, ChangeEventScope(None)),
                                      target, direction=rng.choice(["upstream", "downstream"]), depth=depth,
                                      since=since, until=until)  # fmt: skip
            timings.append(time.perf_counter() - started)
            reached += len(rows)
        return {
            "entities": entities,
            "records": len(history),
            "edges": _edge_count(settings),
            "build": built,
            "index_s": index_s,
            "events_read_s": events_s,
            "queries": queries,
            "depth": depth,
            "window_days": window_days,
            "events_reached_per_query": round(reached / queries, 1),
            "query_s": latency_summary(timings),
            "batch_changes": batch_changes,
            "publish": published,
            "publish_entities": result.rows_in,
        }
    finally:
        if work is None:
            shutil.rmtree(scratch, ignore_errors=True)


def _built_home(scratch: Path, settings, options: dict[str, Any], build) -> dict[str, Any]:
    """The home holding the history before the micro-batch: built by `build`, or restored from a kept copy.

    A `--work` folder keeps a copy of the built home (`built/`) with the generator options that made
    it; a later run with the same options restores it instead of building again (about 11 minutes at
    the defaults), so the queries and the publish can be measured again on their own.

    Returns:
        The build's measurement (wall_s, cpu_s, peak_rss_bytes) as first measured.
    """
    import json

    kept, marker, home = scratch / "built", scratch / "built.json", settings.home
    if marker.exists() and json.loads(marker.read_text())["options"] == options:
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(kept, home)
        return json.loads(marker.read_text())["build"]
    marker.unlink(missing_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(kept, ignore_errors=True)
    with measure() as built:
        build()
    shutil.copytree(home, kept)
    figures = {"wall_s": built.wall_s, "cpu_s": built.cpu_s, "peak_rss_bytes": built.peak_rss_bytes}
    marker.write_text(json.dumps({"options": options, "build": figures}))
    return figures


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _edge_count(settings) -> int:
    from deltalake import DeltaTable

    from conf.tables import table_location

    return DeltaTable(str(table_location(settings, "gold.lineage_edges"))).to_pyarrow_dataset().count_rows()
