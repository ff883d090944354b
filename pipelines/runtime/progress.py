"""Which bronze batches each pipeline stage has consumed, kept in ops.stage_progress."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import LANDED_FILES, STAGE_PROGRESS
from pipelines.runtime.io import append, insert_missing, read_table, retry_commit

# A stage consumes the batches its upstream stage has finished; landing (no upstream) commits them.
STAGE_UPSTREAM: Mapping[str, str | None] = {
    "land": None,
    "refine": "land",
    "publish_audit": "refine",
    "publish_openmetadata": "refine",
    "publish_lineage": "refine",
}


@dataclass(frozen=True)
class StageResult:
    """What one run of one stage did."""

    stage: str
    batch_ids: tuple[str, ...] = ()
    rows_in: int = 0
    rows_out: int = 0
    metrics: Mapping[str, float] = field(default_factory=dict)


def committed_batches(spark: SparkSession, settings: Settings) -> list[str]:
    """Return the ids of landed bronze batches, oldest first.

    A batch is committed once its rows in bronze.landed_files exist: landing writes them last, so rows
    of a landing that was killed half-way belong to no committed batch and are never processed.
    """
    rows = (
        read_table(spark, settings, LANDED_FILES)
        .groupBy("batch_id")
        .agg(F.min("landed_at").alias("landed_at"))
        .orderBy("landed_at", "batch_id")
        .collect()
    )
    return [r.batch_id for r in rows]


def finished_batches(spark: SparkSession, settings: Settings, stage: str) -> list[str]:
    """Return the batches `stage` has recorded as done, in the order it finished them."""
    _check_stage(stage)
    if STAGE_UPSTREAM[stage] is None:
        return committed_batches(spark, settings)
    return _finished_by(spark, settings, [stage])[stage]


def _finished_by(spark: SparkSession, settings: Settings, stages: list[str]) -> dict[str, list[str]]:
    """Each stage's recorded batches, in the order it finished them, from one read of ops.stage_progress."""
    rows = (
        read_table(spark, settings, STAGE_PROGRESS)
        .filter(F.col("stage").isin(stages))
        .orderBy("processed_at", "batch_id")
        .select("stage", "batch_id")
        .collect()
    )
    return {stage: [r.batch_id for r in rows if r.stage == stage] for stage in stages}


def pending_batches(spark: SparkSession, settings: Settings, stage: str) -> list[str]:
    """Return the batches finished upstream of `stage` and not yet by `stage`, oldest first.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        stage: refine, publish_audit or publish_openmetadata.
    """
    _check_stage(stage)
    upstream = STAGE_UPSTREAM[stage]
    if upstream is None:
        raise InputError(f"stage: {stage!r} has no upstream; it creates batches")
    if STAGE_UPSTREAM[upstream] is None:
        finished = {s: finished_batches(spark, settings, s) for s in (stage, upstream)}
    else:
        # Both stages' progress rows in one query: a micro-batch's publish asks this on every run.
        finished = _finished_by(spark, settings, [stage, upstream])
    done = set(finished[stage])
    return [b for b in finished[upstream] if b not in done]


def record_progress(
    spark: SparkSession,
    settings: Settings,
    stage: str,
    source_table: str,
    batch_id: str,
    *,
    rows_in: int,
    rows_out: int,
    run_id: str | None = None,
    source_version: int | None = None,
    pending: bool = False,
) -> None:
    """Record that `stage` consumed `batch_id`; recording the same batch again changes nothing.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        stage: the stage name (a key of STAGE_UPSTREAM).
        source_table: registry key of the table the batch was read from.
        batch_id: the bronze batch id.
        rows_in: rows read for the batch.
        rows_out: rows written for the batch.
        run_id: the pipeline run (MLflow run id) that did it.
        source_version: the Delta version of the source table that was read, when known.
        pending: the caller found the batch pending for `stage` in this run, under the run lock, so
            no row records it: the row is appended without looking for one (a read of the table).
    """
    _check_stage(stage)
    row_df = spark.createDataFrame(
        [(stage, source_table, batch_id, source_version, int(rows_in), int(rows_out), run_id)],
        "stage string, source_table string, batch_id string, source_version bigint, rows_in bigint, "
        "rows_out bigint, run_id string",
    ).withColumn("processed_at", F.current_timestamp())
    if pending:
        # Watch mode's OpenMetadata thread records its own stage's batches at the same time.
        retry_commit(lambda: append(row_df, settings, STAGE_PROGRESS))
        return
    insert_missing(
        spark,
        settings,
        STAGE_PROGRESS,
        row_df,
        "t.stage = s.stage AND t.batch_id = s.batch_id",
        view_name=f"progress_{stage}",
        candidates_df=read_table(spark, settings, STAGE_PROGRESS).filter(
            (F.col("stage") == stage) & (F.col("batch_id") == batch_id)
        ),
    )


def _check_stage(stage: str) -> None:
    if stage not in STAGE_UPSTREAM:
        raise InputError(f"stage: unknown stage {stage!r} (known: {', '.join(STAGE_UPSTREAM)})")
