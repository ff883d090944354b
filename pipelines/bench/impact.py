"""`lakehouse bench impact`: impact queries in the serving process and a micro-batch of lineage changes.

A home holding a generated lineage history (`datagen.lineage`, a year of it) run through the pipeline.
Queries: the server's read path (its edge index, built once per table version and timed apart, then
the window's change events and the walk) for random entities, depth and window as given. Publish: a
micro-batch of further lineage changes landed and refined, then `publish_lineage` timed on its own.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from pipelines.bench.harness import bench_settings, latency_summary, measure, write_result
from pipelines.cli.console import console

DAY_MS = 86_400_000


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
    from gold.impact import ChangeEvent, impact
    from pipelines.orchestration.jobs import run_job
    from pipelines.batch.publish_lineage import publish_lineage
    from pipelines.runtime.engine import open_session
    from pipelines.serving.impact import ChangeEventReader, LineageIndex
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
        _write(landing / "history.mcl.jsonl", first)
        with measure() as built:
            run_job(settings, paths=[landing / "history.mcl.jsonl"], deliver=False)
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
        owners = sorted({r["entityUrn"] for r in history})
        rng = random.Random(seed)
        timings, reached = [], 0
        for _ in range(queries):
            target = rng.choice(owners)
            until = rng.randrange(last - 300 * DAY_MS, last + 1)
            since = until - window_days * DAY_MS
            started = time.perf_counter()
            events = change_events.window(since, until, ChangeEventScope(None))
            changes_read = [ChangeEvent(e["event_id"], e["aspect_entity_urn"] or e["entity_urn"], e["event_time"],
                                        e["category"], e["operation"], e["actor"]) for e in events]  # fmt: skip
            rows = impact(target, lineage.current(), changes_read, direction=rng.choice(["upstream", "downstream"]),
                          depth=depth, start_ms=since, end_ms=until)  # fmt: skip
            timings.append(time.perf_counter() - started)
            reached += len(rows)
        return {
            "entities": entities,
            "records": len(history),
            "edges": _edge_count(settings),
            "build": built,
            "index_s": index_s,
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


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _edge_count(settings) -> int:
    from deltalake import DeltaTable

    from conf.tables import table_location

    return DeltaTable(str(table_location(settings, "gold.lineage_edges"))).to_pyarrow_dataset().count_rows()
