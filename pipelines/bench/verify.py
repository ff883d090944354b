"""`lakehouse bench verify`: time `verify` over N generated gold.audit_events rows linked into the chain.

Writes N synthetic audit rows in B batches to a scratch lakehouse, links every batch (as a publish
does), then runs the verification R times and writes the median and every run as one JSON result.
Target (docs/benchmarks.md): 10M audit rows verified within 120 s on 2 cores.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import AUDIT_EVENTS
from pipelines.bench.harness import bench_settings, measure, write_result
from pipelines.runtime.engine import open_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TARGET_ROWS = 10_000_000
TARGET_SECONDS = 120.0
EVENT_TYPES = ("LogInEvent", "EntityEvent", "CreateAccessTokenEvent", "UpdateAspectEvent")


def load_audit_rows(spark: SparkSession, settings: Settings, rows: int, batches: int) -> list[str]:
    """Append `rows` synthetic audit rows spread over `batches` batch ids; return the batch ids."""
    from pyspark.sql import functions as F

    from pipelines.runtime.io import append

    batch_ids = [f"bench-{i:04d}" for i in range(batches)]
    per_batch = -(-rows // batches)
    for index, batch_id in enumerate(batch_ids):
        start, end = index * per_batch, min(rows, (index + 1) * per_batch)
        if start >= end:
            break
        ts = F.lit(1_700_000_000_000) + F.col("id") * F.lit(997)
        rows_df = spark.range(start, end).select(
            F.sha2(F.concat(F.lit("e"), F.col("id").cast("string")), 256).alias("event_id"),
            F.element_at(F.array(*[F.lit(t) for t in EVENT_TYPES]), (F.col("id") % len(EVENT_TYPES) + 1).cast("int")).alias("event_type"),
            ts.alias("timestamp"),
            F.concat(F.lit("urn:li:corpuser:user"), (F.col("id") % 5000).cast("string")).alias("actor_urn"),
            F.lit("10.0.0.1").alias("source_ip"),
            F.lit("RESTLI").alias("event_source"),
            F.lit("bench-agent/1.0").alias("user_agent"),
            F.lit(None).cast("string").alias("telemetry_trace_id"),
            F.concat(F.lit("urn:li:dataset:(urn:li:dataPlatform:hive,db.t"), (F.col("id") % 20000).cast("string"), F.lit(",PROD)")).alias("entity_urn"),
            F.lit("dataset").alias("entity_type"),
            F.lit("globalTags").alias("aspect_name"),
            F.lit(None).cast("string").alias("login_source"),
            F.concat(F.lit('{"type":"EntityEvent","n":'), F.col("id").cast("string"), F.lit("}")).alias("raw_event"),
            F.lit("usage").alias("origin"),
            F.sha2(F.col("id").cast("string"), 256).alias("source_id"),
            F.lit(batch_id).alias("batch_id"),
            F.date_add(F.lit("2023-11-14").cast("date"), (F.col("id") % 30).cast("int")).alias("event_date"),
        )  # fmt: skip
        append(rows_df, settings, AUDIT_EVENTS)
    return batch_ids


def bench_verify(
    rows: int = typer.Option(100_000, "--rows", min=1, help="Audit rows to generate (target: 10,000,000)."),
    batches: int = typer.Option(10, "--batches", min=1, help="Batches the rows are spread over (one link each)."),
    runs: int = typer.Option(3, "--runs", min=1, help="Verification runs; the median is reported."),
    out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    keep: Path | None = typer.Option(None, "--keep", help="Build the lakehouse here and keep it (default: a temporary folder)."),
) -> None:
    """Measure `lakehouse verify` over generated audit rows and write the JSON result."""
    from pipelines.batch.audit_chain import link_batches
    from pipelines.batch.chain_verification import verify_chain

    if batches > rows:
        raise InputError(f"--batches: {batches} is more than --rows {rows}")
    home = keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    settings = bench_settings(home)
    try:
        with open_session(settings) as spark:
            with measure() as load:
                batch_ids = load_audit_rows(spark, settings, rows, batches)
            with measure() as link:
                link_batches(spark, settings, [AUDIT_EVENTS], batch_ids)
            timings = []
            for _ in range(runs):
                with measure() as run:
                    result = verify_chain(spark, settings)
                if not result.ok:
                    raise InputError(f"--rows: the generated chain did not verify ({result.broken})")
                timings.append(run)
        median_s = statistics.median(t.wall_s for t in timings)
        path = write_result(out, "verify", {
            "rows": rows,
            "batches": batches,
            "load": load,
            "link": link,
            "verify_runs": [t.__dict__ for t in timings],
            "verify_median_s": median_s,
            "rows_per_s": round(rows / median_s, 1) if median_s else None,
            "target": {"rows": TARGET_ROWS, "seconds": TARGET_SECONDS},
            "extrapolated_10m_s": round(median_s * TARGET_ROWS / rows, 1),
        })  # fmt: skip
        typer.echo(f"verify: {rows} rows in {median_s:.2f} s (median of {runs}); result {path}")
    finally:
        if keep is None:
            shutil.rmtree(home, ignore_errors=True)


def register(bench_app: typer.Typer) -> None:
    """Add `bench verify` to the bench group."""
    bench_app.command("verify")(bench_verify)
