"""`lakehouse bench silver --engine classic`: the silver transforms on JVM Spark local[2], with its own loader.

JVM Spark here has no Delta, so the project's landing cannot run there: the bench loads the generated
MCL/MCP files into Parquet in bronze.aspect_snapshots' columns itself (`read_mcl_files`), refines each
batch with `silver.refining.refine_batch` and carries the state between batches as Parquet (no MERGE).
The generated input's files and the derived event ids are read here for the embedded run too.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf.errors import InputError
from conf.tables import ASPECT_SNAPSHOTS, ASPECT_STATE, table_spec
from pipelines.bench.harness import bench_settings, measure, peak_rss_bytes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# The parts of a DataHub MCL / MCP line the bench loader reads.
_ENVELOPE = (
    "entityType STRING, entityUrn STRING, changeType STRING, aspectName STRING, "
    "aspect STRUCT<value: STRING>, systemMetadata STRUCT<lastObserved: BIGINT, runId: STRING, version: STRING>, "
    "created STRUCT<time: BIGINT, actor: STRING>"
)



def part_files(batch_dir: Path) -> list[Path]:
    """The generated JSON-lines files of one batch folder.

    Raises:
        InputError: for a folder without any.
    """
    files = sorted(p for p in batch_dir.iterdir() if p.name.endswith(".jsonl"))
    if not files:
        raise InputError(f"{batch_dir}: no generated JSON-lines files")
    return files



def read_mcl_files(spark: SparkSession, files: list[Path], batch_id: str, default_actor: str) -> DataFrame:
    """The classic engine's loader (plain Parquet, no Delta to land into): DataHub MCL/MCP JSON lines -> rows in
    bronze.aspect_snapshots' columns (one batch).

    Line numbers are file-order ordinals (monotonically increasing, not contiguous), which keeps the read
    parallel; the project's landing records exact line numbers.
    """
    from pyspark.sql import functions as F

    frames = []
    for path in files:
        lines_df = spark.read.text(str(path)).withColumn("line_number", F.monotonically_increasing_id() + 1)
        frames.append(lines_df.withColumn("source_file", F.lit(str(path))))
    lines_df = frames[0]
    for frame in frames[1:]:
        lines_df = lines_df.unionByName(frame)
    parsed = F.from_json(F.col("value"), _ENVELOPE)
    landed_at = F.current_timestamp()
    rows_df = lines_df.select("value", "source_file", "line_number", parsed.alias("r")).select(
        F.col("r.entityUrn").alias("entity_urn"),
        F.col("r.entityType").alias("entity_type"),
        F.col("r.aspectName").alias("aspect_name"),
        F.col("r.changeType").alias("change_type"),
        F.col("r.aspect.value").alias("aspect_json"),
        F.col("r.systemMetadata.version").cast("bigint").alias("version"),
        F.coalesce(F.col("r.created.time"), F.col("r.systemMetadata.lastObserved")).alias("created_time"),
        F.coalesce(F.col("r.created.actor"), F.lit(default_actor)).alias("created_actor"),
        F.to_json(F.col("r.systemMetadata")).alias("system_metadata"),
        F.col("r.systemMetadata.runId").alias("run_id"),
        F.lit("mcl").alias("source_kind"),
        F.sha2(F.col("value"), 256).alias("record_hash"),
        "source_file",
        "line_number",
        F.lit(batch_id).alias("batch_id"),
        landed_at.alias("landed_at"),
        F.to_date(landed_at).alias("land_date"),
    )
    return rows_df.select(*table_spec(ASPECT_SNAPSHOTS).column_names)



def event_ids(events_df: DataFrame) -> set[str]:
    """The event ids of change events (the comparison with the baseline reads them)."""
    return set(events_df.select("event_id").toArrow().column("event_id").to_pylist())



def _staged(spark: SparkSession, df: DataFrame, path: Path) -> DataFrame:
    """Write a step's rows to Parquet at `path` and read them back (the classic engine has no Delta scratch)."""
    df.write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))



def run_classic(
    folder: Path, batch_dirs: list[Path], collect_ids: bool = False, connect_url: str | None = None
) -> dict[str, Any]:
    """Load and refine the batches on JVM Spark; the figures in `run_silver_bench`'s form.

    Args:
        folder: the bench's scratch folder.
        batch_dirs: each batch's folder of MCL JSON files, in order.
        collect_ids: also return the set of derived event ids.
        connect_url: a JVM Spark Connect server already running; default: start local[2] for this run.

    Raises:
        ConfigError: when `connect_url` does not start with sc://.
    """
    from pyspark.sql import functions as F

    from pipelines.runtime.engine import open_session
    from pipelines.runtime.engine_servers import jvm_connect_server
    from silver.refining import refine_batch
    from silver.state import to_next_state, to_pre_batch_state

    base = bench_settings(folder / "home")
    out = folder / "classic"
    with contextlib.nullcontext(connect_url) if connect_url else jvm_connect_server("local[2]") as url:
        settings = bench_settings(folder / "home", "engine.kind=connect", f"engine.connect_url={url}")
        with open_session(settings, register_tables=False) as spark:
            with measure() as landing:
                for index, batch_dir in enumerate(batch_dirs):
                    rows_df = read_mcl_files(spark, part_files(batch_dir), f"bench-{index:05d}", base.ingest.default_actor)
                    rows_df.write.mode("overwrite").parquet(str(out / "bronze" / f"bench-{index:05d}"))
            state_spec = table_spec(ASPECT_STATE)
            spark.createDataFrame([], state_spec.columns).write.mode("overwrite").parquet(str(out / "state-0"))
            per_batch = []
            with measure() as total:
                for index, _ in enumerate(batch_dirs):
                    batch_id = f"bench-{index:05d}"
                    with measure() as one:
                        stage = out / "work" / batch_id
                        batch_df = spark.read.parquet(str(out / "bronze" / batch_id))
                        state_df = spark.read.parquet(str(out / f"state-{index}"))
                        # Each batch runs once here, so no state row needs reverting (no snapshots).
                        pre_state_df = to_pre_batch_state(state_df, batch_id, batch_df.filter(F.lit(False)))
                        refined = refine_batch(batch_df, pre_state_df, base.events.owner_category,
                                               stage=lambda df, step: _staged(spark, df, stage / step))  # fmt: skip
                        refined.events_df.write.mode("overwrite").parquet(str(out / "events" / batch_id))
                        to_next_state(state_df, refined.state_rows_df).write.mode("overwrite").parquet(str(out / f"state-{index + 1}"))
                        counts = spark.read.parquet(str(out / "events" / batch_id)).count(), refined.sequenced_df.count()
                    per_batch.append(
                        {"batch_id": batch_id, "versions": counts[1], "events": counts[0], "wall_s": one.wall_s, "cpu_s": one.cpu_s}
                    )
            derived_ids = event_ids(spark.read.parquet(str(out / "events" / "*"))) if collect_ids else None
    # A JVM this run started is a child process: its memory counts only once it has exited, as it has here.
    total.peak_rss_bytes = max(total.peak_rss_bytes, peak_rss_bytes())
    return {
        "landing": landing,
        "landing_mode": "bench loader (Parquet)",
        "refine": total,
        "per_batch": per_batch,
        "event_ids": derived_ids,
    }
