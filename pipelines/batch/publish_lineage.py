"""The publish_lineage stage: refined batches -> gold.lineage_edges (lineage edges with their validity).

Incremental by entity. The entities whose lineage aspects, `status` or key aspect a pending batch
wrote have their edges derived again from their whole aspect history in bronze (the batches refine
finished), and that entity's rows in the table are replaced by them in one MERGE. So a late version
lands where it belongs, and a re-run after a crash derives the same rows and changes nothing more:
  1. stage: the touched entities' edges, written to Parquet under `<home>/_scratch/publish_lineage`;
  2. MERGE on edge_id: new spans inserted, changed ones updated, the entities' stale spans deleted
     (an append when none of the entities has a row yet);
  3. record progress for each batch (last).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from gold.lineage import EDGE_COLUMNS, is_lineage_input, to_lineage_edges
from pipelines.batch.refine import STAGE as REFINE_STAGE
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import any_stored, append, insert_row, merge, read_table, retry_commit, write_scratch
from pipelines.runtime.progress import StageResult, finished_batches, pending_batches, record_progress
from silver.patching import with_patches_applied
from silver.state import ACCEPTED, to_empty_state, to_sequenced_batch

STAGE = "publish_lineage"
SOURCE_TABLE = "bronze.aspect_snapshots"
TARGET_TABLE = "gold.lineage_edges"


def lineage_versions(spark: SparkSession, settings: Settings, batch_ids: list[str]) -> DataFrame:
    """Every accepted version of the lineage inputs of the entities `batch_ids` wrote one of, over their history.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        batch_ids: the batches whose entities are wanted; their history comes from every batch refine finished.

    Returns:
        Sequenced versions (`silver.state.to_sequenced_batch` columns, PATCH records applied).
    """
    refined = finished_batches(spark, settings, REFINE_STAGE)
    inputs_df = (
        read_table(spark, settings, SOURCE_TABLE)
        .filter(F.col("batch_id").isin(refined))
        .filter(is_lineage_input("aspect_name", "entity_type"))
    )
    touched_df = inputs_df.filter(F.col("batch_id").isin(batch_ids)).select("entity_urn").distinct()
    history_df = inputs_df.join(touched_df, "entity_urn", "left_semi")
    sequenced_df = with_patches_applied(
        to_sequenced_batch(history_df, to_empty_state(history_df), settings.engine.native_lag_ignore_nulls)
    )
    return sequenced_df.filter(F.col("disposition") == ACCEPTED)


def publish_lineage(spark: SparkSession, settings: Settings, run_id: str | None = None) -> StageResult:
    """Publish the lineage edges of the entities every batch refine finished (and this stage has not) wrote.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        run_id: the pipeline run recorded with each batch's progress.

    Returns:
        The batches published, the entities whose edges were derived (rows_in) and their edge spans (rows_out).
    """
    batch_ids = pending_batches(spark, settings, STAGE)
    if not batch_ids:
        return StageResult(STAGE, (), 0, 0, {"entities": 0.0, "edges": 0.0})
    versions_df = lineage_versions(spark, settings, batch_ids)
    folder = settings.home / "_scratch" / STAGE
    storage = home_of(settings).storage
    staged_versions_df = write_scratch(versions_df.drop("prev_json"), folder / "versions", storage)
    owners_df = staged_versions_df.select(F.col("entity_urn").alias("owner_urn")).distinct()
    edges_df = to_lineage_edges(staged_versions_df).withColumn("batch_id", F.lit(batch_ids[-1]))
    staged_df = write_scratch(edges_df, folder / "edges", storage)
    entities, edges = owners_df.count(), staged_df.count()
    if entities:
        replace_owner_edges(spark, settings, staged_df, owners_df)
    crash_point("publish_lineage.merged")
    for batch_id in batch_ids:
        record_progress(
            spark, settings, STAGE, SOURCE_TABLE, batch_id, rows_in=0, rows_out=0, run_id=run_id, pending=True
        )
    storage.remove_tree(folder)
    return StageResult(STAGE, tuple(batch_ids), entities, edges, {"entities": float(entities), "edges": float(edges)})


def replace_owner_edges(spark: SparkSession, settings: Settings, edges_df: DataFrame, owners_df: DataFrame) -> None:
    """Make the table's rows of the owners in `owners_df` exactly `edges_df`.

    One MERGE on edge_id, or an append when none of the owners has a row yet (a re-run after a crash
    then finds them and MERGEs the same rows).

    Args:
        spark: the session.
        settings: the lakehouse settings.
        edges_df: the owners' edge spans, with the table's columns.
        owners_df: `owner_urn` of every owner whose rows are replaced (those with no edge left included).
    """
    columns = [*EDGE_COLUMNS, "batch_id"]
    stored_df = read_table(spark, settings, TARGET_TABLE)
    if not any_stored(owners_df, stored_df, ["owner_urn"]):
        # No row of these owners yet (a first publish, new entities): nothing to update or delete.
        retry_commit(lambda: append(edges_df, settings, TARGET_TABLE))
        return
    stale_df = (
        stored_df.join(owners_df, "owner_urn", "left_semi")
        .join(edges_df.select("edge_id"), "edge_id", "left_anti")
        .select(*columns)
    )
    source_df = edges_df.select(*columns, F.lit(False).alias("stale")).unionByName(
        stale_df.withColumn("stale", F.lit(True))
    )
    target = home_of(settings).table_name(TARGET_TABLE)
    updates = ", ".join(f"{c} = s.{c}" for c in columns if c != "edge_id")
    merge(
        spark,
        source_df,
        lambda source: f"MERGE INTO {target} AS t USING {source} AS s ON t.edge_id = s.edge_id "
        f"WHEN MATCHED AND s.stale THEN DELETE WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT s.stale THEN {insert_row(TARGET_TABLE)}",
        view_name="publish_lineage_source",
    )
