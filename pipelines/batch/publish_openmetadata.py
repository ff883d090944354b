"""The publish_openmetadata stage: refined batches -> gold.openmetadata_change_events (one ChangeEvent per change set).

Crash safety. The pending batches are projected together, in the order refine finished them (which
numbers versions exactly as projecting them one by one would), against the ChangeEvents published by
*other* batches, so a re-run after a crash continues from the same versions as the first run did:
  1. stage: project the batches' silver events and write them to Parquet under
     `<home>/_scratch/publish_openmetadata` (recomputed on a re-run);
  2. MERGE on id (insert only, pruned to the events' dates): rows already there stay as they are;
  3. record progress for each batch (last).
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.locations import Location
from conf.settings import Settings
from conf.tables import ENTITY_CHANGE_EVENTS, OPENMETADATA_CHANGE_EVENTS
from gold.openmetadata import to_openmetadata_events
from pipelines.batch.audit_chain import link_batches
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import insert_missing, read_table, write_scratch
from pipelines.runtime.progress import StageResult, pending_batches, record_progress

STAGE = "publish_openmetadata"
SOURCE_TABLE = ENTITY_CHANGE_EVENTS
TARGET_TABLE = OPENMETADATA_CHANGE_EVENTS


def scratch_folder(settings: Settings) -> Location:
    """The folder holding the staged ChangeEvents of the running publish (one run at a time holds the lock)."""
    return settings.home / "_scratch" / STAGE


def publish_openmetadata(spark: SparkSession, settings: Settings, run_id: str | None = None) -> StageResult:
    """Publish the OpenMetadata ChangeEvents of every batch refine finished and this stage has not.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        run_id: the pipeline run recorded with each batch's progress.

    Returns:
        The batches published, silver events read and ChangeEvents derived (rows already in the table
        from a crashed run count as derived, so a re-run reports what an uninterrupted run reports).
    """
    batch_ids = pending_batches(spark, settings, STAGE)
    if not batch_ids:
        return StageResult(STAGE, (), 0, 0, {"change_events": 0.0, "days": 0.0})
    events_df = read_table(spark, settings, SOURCE_TABLE).filter(F.col("batch_id").isin(batch_ids))
    published_df = read_table(spark, settings, TARGET_TABLE).filter(
        F.col("batch_id").isNull() | ~F.col("batch_id").isin(batch_ids)
    )
    folder = scratch_folder(settings)
    storage = home_of(settings).storage
    staged_df = write_scratch(to_openmetadata_events(events_df, published_df, batch_ids), folder, storage)

    rows_in = {r.batch_id: int(r.n) for r in events_df.groupBy("batch_id").agg(F.count(F.lit(1)).alias("n")).collect()}
    derived = staged_df.groupBy("batch_id").agg(F.count(F.lit(1)).alias("n"), F.collect_set("event_date").alias("days"))
    rows_out, days = {}, set()
    for row in derived.collect():
        rows_out[row.batch_id] = int(row.n)
        days.update(d for d in row.days if d is not None)
    if days:
        merge_change_events(spark, settings, staged_df, sorted(days))
    crash_point("publish_openmetadata.merged")
    # Linked before progress: a re-run after a crash links what is missing and nothing twice.
    link_batches(spark, settings, [SOURCE_TABLE, TARGET_TABLE], batch_ids)
    for batch_id in batch_ids:
        record_progress(
            spark,
            settings,
            STAGE,
            SOURCE_TABLE,
            batch_id,
            rows_in=rows_in.get(batch_id, 0),
            rows_out=rows_out.get(batch_id, 0),
            run_id=run_id,
            pending=True,
        )
    storage.remove_tree(folder)
    return StageResult(
        STAGE,
        tuple(batch_ids),
        sum(rows_in.values()),
        sum(rows_out.values()),
        {"change_events": float(sum(rows_out.values())), "days": float(len(days))},
    )


def merge_change_events(
    spark: SparkSession, settings: Settings, change_events_df: DataFrame, days: list[date]
) -> None:
    """Insert the ChangeEvents the table does not hold yet (keyed on id), reading only the partitions of `days`.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        change_events_df: rows with the table's columns whose event_date is one of `days`.
        days: the event dates of `change_events_df` (the MERGE's partition filter).
    """
    day_list = ", ".join(f"DATE'{day.isoformat()}'" for day in days)
    insert_missing(
        spark,
        settings,
        TARGET_TABLE,
        change_events_df,
        f"t.event_date IN ({day_list}) AND t.event_date = s.event_date AND t.id = s.id",
        view_name="publish_openmetadata_source",
        # Usually none: then the ChangeEvents are appended.
        candidates_df=read_table(spark, settings, TARGET_TABLE)
        .filter(F.col("event_date").isin([F.lit(day.isoformat()).cast("date") for day in days]))
        .join(change_events_df.select("event_date", "id"), ["event_date", "id"], "left_semi"),
    )
