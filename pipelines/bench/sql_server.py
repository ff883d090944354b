"""`lakehouse bench sql-server`: the PostgreSQL replica's initial copy, micro-batch sync and BI query latency.

A home is built with `--events` audit events over `--days` days (`bench search`'s generator and
bulk load), a managed PostgreSQL is started on a free loopback port and the replica prepared (database,
roles, the initial copy with its indexes: the figure to compare with the 2-minute target at 10M rows).
Then, `--micro-batches` times, 100 new audit events are committed to gold as one Delta version and the
replica synced as publish does; the time from the commit until bi_reader sees the rows is the
micro-batch figure, with the sync's time per phase (reading the Delta log, planning, reading the new
file, COPY, commit). Last, `--clients` threads run the BI aggregation (events per actor per day over 30
days) as bi_reader, `--queries` each, and its latency percentiles are kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

from conf.tables import AUDIT_EVENTS, table_location
from pipelines.bench.harness import Measurement, bench_settings, latency_summary, measure, write_result

MICRO_BATCH_ROWS = 100
# Events per actor per day over the last 30 days: what a BI dashboard's first chart asks.
BI_QUERY = (
    "SELECT actor_urn, event_date, count(*) AS events FROM gold.audit_events "
    "WHERE event_date > current_date - 30 GROUP BY actor_urn, event_date ORDER BY event_date, actor_urn"
)
TARGETS = {"initial_copy_s_at_10m": 120.0, "micro_batch_visible_s": 2.0}


def append_micro_batch(location: Path, rows: int, tag: str) -> tuple[int, str]:
    """Commit `rows` new audit events (copies of existing ones with new ids, actor and time) as one Delta version.

    Returns:
        The new version and the actor the rows carry.
    """
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = DeltaTable(str(location))
    sample = table.to_pyarrow_dataset().head(rows)
    actor = f"urn:li:corpuser:bench-sync-{tag}"
    now_ms = int(time.time() * 1000)
    values = {
        "actor_urn": pa.array([actor] * sample.num_rows),
        "timestamp": pa.array([now_ms - i for i in range(sample.num_rows)], pa.int64()),
        "event_id": pa.array([hashlib.sha256(f"{tag}|{i}".encode()).hexdigest() for i in range(sample.num_rows)]),
        "event_date": pa.array([datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).date()] * sample.num_rows),
    }
    for name, array in values.items():
        index = sample.schema.get_field_index(name)
        sample = sample.set_column(index, sample.schema.field(index), array.cast(sample.schema.field(index).type))
    write_deltalake(str(location), sample, mode="append")
    return DeltaTable(str(location)).version(), actor


def measure_micro_batches(settings, reader_conninfo: str, batches: int) -> dict[str, Any]:
    """Commit `batches` micro-batches one after another; time each from commit to visible for bi_reader.

    Each is synced by the function publish calls (`sync_replica`); the sync's phases are kept: those of
    gold.audit_events, and each phase summed over every replicated table (the others have nothing new).
    """
    import psycopg

    from pipelines.bi.sync import sync_replica

    seconds, sync_seconds, outside = [], [], []
    audit_phases: list[dict[str, float]] = []
    all_phases: list[dict[str, float]] = []
    location = table_location(settings, AUDIT_EVENTS)
    with psycopg.connect(reader_conninfo, autocommit=True) as reader:
        for batch in range(batches):
            _, actor = append_micro_batch(location, MICRO_BATCH_ROWS, f"{time.time_ns()}-{batch}")
            committed = time.monotonic()
            results = sync_replica(settings)
            synced = time.monotonic() - committed
            count = reader.execute("SELECT count(*) FROM gold.audit_events WHERE actor_urn = %s", (actor,)).fetchone()[0]
            if count != MICRO_BATCH_ROWS:
                raise RuntimeError(f"bench: micro-batch {batch}: bi_reader sees {count} of {MICRO_BATCH_ROWS} rows")
            seconds.append(time.monotonic() - committed)
            sync_seconds.append(synced)
            outside.append(synced - sum(r.seconds for r in results))
            audit_phases.append(next(r.phases for r in results if r.table_key == AUDIT_EVENTS))
            summed: dict[str, float] = {}
            for result in results:
                for name, value in result.phases.items():
                    summed[name] = summed.get(name, 0.0) + value
            all_phases.append(summed)
    return {
        "batches": batches,
        "rows_each": MICRO_BATCH_ROWS,
        "visible_s": {"median": round(statistics.median(seconds), 3), "max": round(max(seconds), 3),
                      "runs": [round(s, 3) for s in seconds]},  # fmt: skip
        "sync_s_median": round(statistics.median(sync_seconds), 3),
        # Connecting, the sync lock, checking the replica's tables and reading its versions.
        "outside_tables_s_median": round(statistics.median(outside), 4),
        "audit_events_phases_s_median": _median_phases(audit_phases),
        "all_tables_phases_s_median": _median_phases(all_phases),
    }


def _median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({name for run in runs for name in run})
    return {name: round(statistics.median(run.get(name, 0.0) for run in runs), 4) for name in names}


def measure_bi_query(reader_conninfo: str, clients: int, queries: int) -> dict[str, Any]:
    """Run the BI aggregation from `clients` threads, `queries` each, as bi_reader; return latency percentiles."""
    import psycopg

    latencies: list[float] = []
    rows: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client() -> None:
        try:
            with psycopg.connect(reader_conninfo, autocommit=True) as conn:
                for _ in range(queries):
                    started = time.perf_counter()
                    result = conn.execute(BI_QUERY).fetchall()
                    elapsed = time.perf_counter() - started
                    with lock:
                        latencies.append(elapsed)
                        rows.append(len(result))
        except BaseException as exc:  # noqa: BLE001 - reported after the threads are joined
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    wall = time.monotonic() - started
    return {"clients": clients, "queries": len(latencies), "result_rows": max(rows), "latency_s": latency_summary(latencies),
            "queries_per_s": round(len(latencies) / wall, 2)}  # fmt: skip


def run_sql_server_bench(work_dir: Path, *, events: int, days: int, actors: int, micro_batches: int, clients: int,
                         queries: int, seed: int, keep: bool) -> dict[str, Any]:  # fmt: skip
    """Build the home, start the managed server, and measure; return the figures."""
    import psycopg.conninfo

    from pipelines.bench.search import build_table
    from pipelines.bi.cluster import DATABASE, open_logins, start_server, stop_server
    from pipelines.bi.replica import READER_ROLE
    from pipelines.bi.server import prepare_replica
    from pipelines.runtime.engine_servers import free_loopback_port

    root = Path(tempfile.mkdtemp(prefix="sql-server-bench-", dir=work_dir))
    root.chmod(0o711)  # the server's unprivileged user must reach the cluster under the home
    port = free_loopback_port()
    settings = bench_settings(root / "home", "bi.sync_interval_seconds=0", f"bi.port={port}")
    settings.home.mkdir()
    settings.home.chmod(0o711)
    payload: dict[str, Any] = {"events": events, "days": days, "actors": actors}
    try:
        now_ms = int(time.time() * 1000)
        built = build_table(settings, events=events, days=days, seed=seed, now_ms=now_ms,
                            actor_urns=[f"urn:li:corpuser:user{i}" for i in range(actors)])  # fmt: skip
        payload["build"] = {k: dataclasses.asdict(v) if isinstance(v, Measurement) else v for k, v in built.items()}
        password = secrets.token_urlsafe(16)
        load_before = os.getloadavg()[0]
        with measure() as started:
            server = start_server(settings, "127.0.0.1", port, None)
        payload["server_start"] = started
        try:
            with measure() as copied:
                results = prepare_replica(settings, password)
            open_logins(settings, None)  # as sql-server does once the first sync has ended
            payload["initial_copy"] = {**dataclasses.asdict(copied), "rows": sum(r.rows for r in results),
                                       "tables": {r.table_key: {"mode": r.mode, "rows": r.rows, "seconds": r.seconds, "phases": r.phases}
                                                  for r in results}}  # fmt: skip
            reader = psycopg.conninfo.make_conninfo(host="127.0.0.1", port=port, dbname=DATABASE, user=READER_ROLE,
                                                    password=password)  # fmt: skip
            payload["micro_batch"] = measure_micro_batches(settings, reader, micro_batches)
            payload["bi_query"] = {"sql": BI_QUERY, **measure_bi_query(reader, clients, queries)}
            payload["load_average_1m"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
        finally:
            stop_server(settings, server)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    payload["targets"] = TARGETS
    return payload


def register(bench_app: typer.Typer) -> None:
    """Add `bench sql-server` to the bench group."""

    @bench_app.command("sql-server")
    def bench_sql_server_command(
        events: int = typer.Option(1_000_000, "--events", min=1000, help="Audit events in the gold home."),
        days: int = typer.Option(30, "--days", min=1, help="Days the events span (up to now)."),
        actors: int = typer.Option(200, "--actors", min=1, help="Distinct actors."),
        micro_batches: int = typer.Option(5, "--micro-batches", min=1, help="100-event micro-batches synced."),
        clients: int = typer.Option(4, "--clients", min=1, help="Concurrent BI clients."),
        queries: int = typer.Option(25, "--queries", min=1, help="Aggregation queries per client."),
        seed: int = typer.Option(7, "--seed", help="Generator seed."),
        work_dir: Path = typer.Option(Path("/tmp"), "--work-dir", help="Where the throwaway home is made (searchable by the server's user)."),
        keep: bool = typer.Option(False, "--keep", help="Keep the home afterwards."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure the BI replica: initial copy of a gold home, sync of a 100-event micro-batch, BI query p95."""
        payload = run_sql_server_bench(work_dir, events=events, days=days, actors=actors, micro_batches=micro_batches,
                                       clients=clients, queries=queries, seed=seed, keep=keep)  # fmt: skip
        path = write_result(out, "sql-server", payload)
        copy, batch, query = payload["initial_copy"], payload["micro_batch"], payload["bi_query"]
        typer.echo(f"initial copy: {copy['rows']} rows in {copy['wall_s']} s")
        typer.echo(f"micro-batch of {MICRO_BATCH_ROWS}: visible after median {batch['visible_s']['median']} s, max {batch['visible_s']['max']} s")
        typer.echo(f"micro-batch sync phases, gold.audit_events (median s): {batch['audit_events_phases_s_median']}")
        typer.echo(f"BI aggregation, {clients} clients: p95 {query['latency_s']['p95']} s, p50 {query['latency_s']['p50']} s")
        typer.echo(f"-> {path}")
