"""The publish_lineage stage: refined batches -> gold.lineage_edges (lineage edges with their validity).

Incremental by entity. The entities whose lineage aspects, `status` or key aspect a pending batch
wrote, and the owners of edges whose other end such a batch deleted or restored, have their edges
derived again from their whole aspect history in bronze (the batches refine finished) and the ends'
lifecycle, and appended as those owners' newest rows in one commit (readers fold each owner to its
newest publish: `gold.lineage.to_current_edges`). So a late version lands where it belongs, and a
re-run after a crash derives the same rows again:
  1. stage: the owners, their versions, their edges' ends' lifecycle versions and the owners' edges,
     written to Parquet under `<home>/_scratch/publish_lineage`;
  2. append the owners' rows and a marker row per owner under the table's next version as
     published_seq (a bulk publish then folds the table; `lakehouse maintain --optimize` folds it too);
  3. record progress for each batch (last).
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.locations import Location
from conf.settings import Settings
from gold.lineage import (
    LINEAGE_ASPECTS, STATUS_ASPECT, entity_of, is_lineage_input, to_current_edges, to_lineage_edges,
    to_publish_markers, to_version_edges,
)  # fmt: skip
from gold.impact import PUBLISHED_SEQ
from pipelines.batch.refine import STAGE as REFINE_STAGE
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import (
    any_stored, append, read_table, replace_where, retry_commit, write_scratch,
)  # fmt: skip
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import StageResult, finished_batches, pending_batches, record_progress
from silver.aspects import is_key_aspect
from silver.patching import with_patches_applied
from silver.sequencing import ACCEPTED, to_sequenced_batch
from silver.state import to_empty_state

STAGE = "publish_lineage"
SOURCE_TABLE = "bronze.aspect_snapshots"
TARGET_TABLE = "gold.lineage_edges"


def _accepted_versions(rows_df: DataFrame, settings: Settings) -> DataFrame:
    """Bronze rows of whole histories sequenced as refine sequences them, PATCH records applied, accepted only."""
    sequenced_df = with_patches_applied(
        to_sequenced_batch(rows_df, to_empty_state(rows_df), settings.engine.native_lag_ignore_nulls)
    )
    return sequenced_df.filter(F.col("disposition") == ACCEPTED).drop("prev_json")


def lineage_owners(inputs_df: DataFrame, batch_ids: list[str]) -> DataFrame:
    """The entities whose edges `batch_ids` may have changed: `owner_urn`, distinct.

    Those that wrote a lineage input in the batches, and the owners of edges whose other end was
    soft-deleted, restored, or hard-deleted or created again there: found among the lineage aspects
    naming that entity (a schema field's urn holds its dataset's). Every row of the table came from
    such an aspect version of its owner, or names the owner itself (a writer then), so the table
    need not be scanned too: it took as long as the aspects (about 0.9 s at 100k entities). A few
    such entities (a micro-batch) are named in one pattern, so the aspects are scanned once; more
    are joined.

    Args:
        inputs_df: the lineage inputs of every batch refine finished (bronze rows).
        batch_ids: the batches being published.
    """
    batch_df = inputs_df.filter(F.col("batch_id").isin(batch_ids))
    key = is_key_aspect(F.col("aspect_name"), F.col("entity_type"))
    key_writers_df = batch_df.filter(key).select("entity_urn").distinct()
    key_writers = [row.entity_urn for row in key_writers_df.limit(MAX_NAMED_ENTITIES + 1).collect()]
    lifecycle_df = batch_df.filter(F.col("aspect_name") == STATUS_ASPECT).select("entity_urn")
    if key_writers:
        # A key aspect written again after a hard delete: those deletes looked up among a micro-batch's
        # few writers by name, not among every key aspect's history (0.1-0.4 s at 100k entities).
        hard_deleted_df = inputs_df.filter(key & F.col("aspect_json").isNull()).select("entity_urn")
        if len(key_writers) <= MAX_NAMED_ENTITIES:
            hard_deleted_df = hard_deleted_df.filter(F.col("entity_urn").isin(*key_writers))
        lifecycle_df = lifecycle_df.unionByName(key_writers_df.join(hard_deleted_df, "entity_urn", "left_semi"))
    lifecycle_df = lifecycle_df.distinct().withColumnRenamed("entity_urn", "_changed")
    writers_df = batch_df.select(F.col("entity_urn").alias("owner_urn"))
    changed = [row._changed for row in lifecycle_df.limit(MAX_NAMED_ENTITIES + 1).collect()]
    if not changed:
        return writers_df.distinct()
    lineage_df = inputs_df.filter(F.col("aspect_name").isin(*LINEAGE_ASPECTS))
    if len(changed) <= MAX_NAMED_ENTITIES:
        by_aspects_df = lineage_df.filter(F.col("aspect_json").rlike(_any_of_literally(changed)))
    else:
        by_aspects_df = lineage_df.join(F.broadcast(lifecycle_df), F.instr(F.col("aspect_json"), F.col("_changed")) > 0, "left_semi")
    owners_by_aspects_df = by_aspects_df.select(F.col("entity_urn").alias("owner_urn"))
    return writers_df.unionByName(owners_by_aspects_df).distinct()


# The most deleted or restored entities a publish names in one pattern (beyond, it joins them): a
# micro-batch's few then cost one scan of the aspects, and the plan stays bounded.
MAX_NAMED_ENTITIES = 64


def _any_of_literally(texts: list[str]) -> str:
    """A regular expression matching any of `texts` as written (its metacharacters escaped alike for every engine)."""
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text) for text in texts)


def lineage_versions(settings: Settings, inputs_df: DataFrame, owners_df: DataFrame) -> DataFrame:
    """Every accepted version of the owners' lineage inputs over their history.

    Args:
        settings: the lakehouse settings.
        inputs_df: the lineage inputs of every batch refine finished (bronze rows).
        owners_df: `owner_urn` of the entities wanted.

    Returns:
        Sequenced versions (`silver.sequencing.to_sequenced_batch` columns but prev_json, PATCH records applied).
    """
    owners = owners_df.withColumnRenamed("owner_urn", "entity_urn")
    return _accepted_versions(inputs_df.join(owners, "entity_urn", "left_semi"), settings)


def edge_ends(versions_df: DataFrame, edges_df: DataFrame) -> DataFrame:
    """The entities (`entity_urn`) at the far end of the owners' edges, owners left out (a schema field by its dataset).

    Args:
        versions_df: the owners' versions (`lineage_versions`).
        edges_df: the edges of each of those versions (`gold.lineage.to_version_edges`).
    """
    return (
        edges_df.select(entity_of(F.col("upstream_urn")).alias("entity_urn"))
        .unionByName(edges_df.select(entity_of(F.col("downstream_urn")).alias("entity_urn")))
        .distinct()
        .join(versions_df.select("entity_urn").distinct(), "entity_urn", "left_anti")
    )


def end_lifecycle_versions(settings: Settings, inputs_df: DataFrame, ends_df: DataFrame) -> DataFrame:
    """The accepted `status` and key aspect versions of the entities `ends_df` names, over their history.

    Args:
        settings: the lakehouse settings.
        inputs_df: the lineage inputs of every batch refine finished (bronze rows).
        ends_df: `entity_urn` of the entities at the far end of the owners' edges (`edge_ends`).
    """
    lifecycle_df = inputs_df.filter(
        (F.col("aspect_name") == STATUS_ASPECT) | is_key_aspect(F.col("aspect_name"), F.col("entity_type"))
    )
    return _accepted_versions(lifecycle_df.join(ends_df, "entity_urn", "left_semi"), settings)


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
    refined = finished_batches(spark, settings, REFINE_STAGE)
    inputs_df = (
        read_table(spark, settings, SOURCE_TABLE)
        .filter(F.col("batch_id").isin(refined))
        .filter(is_lineage_input("aspect_name", "entity_type"))
    )
    folder = settings.home / "_scratch" / STAGE
    storage = home_of(settings).storage
    owners_df = write_scratch(lineage_owners(inputs_df, batch_ids), folder / "owners", storage)
    versions_df = write_scratch(lineage_versions(settings, inputs_df, owners_df), folder / "versions", storage)
    # Staged apart: planned as one with the versions read back, the engine took seconds over a few rows.
    # Parsed once: the ends and the edges' spans both start from each version's edges.
    version_edges_df = write_scratch(to_version_edges(versions_df), folder / "version_edges", storage)
    end_urns_df = edge_ends(versions_df, version_edges_df)
    ends_df = write_scratch(end_lifecycle_versions(settings, inputs_df, end_urns_df), folder / "ends", storage)
    edges_df = to_lineage_edges(versions_df.unionByName(ends_df), version_edges_df).withColumn("batch_id", F.lit(batch_ids[-1]))
    staged_df = write_scratch(edges_df, folder / "edges", storage)
    entities, edges = owners_df.count(), staged_df.count()
    if entities:
        append_owner_edges(spark, settings, staged_df, owners_df, entities > MAX_APPENDED_OWNERS, batch_ids[-1], folder)
    crash_point("publish_lineage.merged")
    for batch_id in batch_ids:
        record_progress(
            spark, settings, STAGE, SOURCE_TABLE, batch_id, rows_in=0, rows_out=0, run_id=run_id, pending=True
        )
    storage.remove_tree(folder)
    return StageResult(STAGE, tuple(batch_ids), entities, edges, {"entities": float(entities), "edges": float(edges)})


# The most owners a publish appends rows for without folding the table afterwards: beyond, the
# publish rewrites the table anyway in size, and folding keeps the superseded rows from piling up.
MAX_APPENDED_OWNERS = 1_000


def append_owner_edges(
    spark: SparkSession,
    settings: Settings,
    edges_df: DataFrame,
    owners_df: DataFrame,
    bulk: bool,
    batch_id: str,
    scratch: Location,
) -> None:
    """Make the owners' edges in the table exactly `edges_df`: appended under a new `published_seq`.

    The owners' rows go in with one marker row each (edge_kind null) so that readers (`to_current_edges`)
    keep, per owner, only its newest publish's rows, even for an owner left with no edge. An append
    writes only the new rows: replacing them in place rewrote the whole data files holding any of
    them (two of about 47 MB at 100k entities). The sequence is the table's next version: higher than
    every earlier publish's, and a re-run after a crash appends the same rows under a higher one.
    More owners than `MAX_APPENDED_OWNERS` (a bulk publish) need no marker when none of them had a row
    yet, and fold the table afterwards when some had.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        edges_df: the owners' edge spans, with the table's columns but published_seq.
        owners_df: `owner_urn` of every owner derived (those with no edge left included).
        bulk: more owners than `MAX_APPENDED_OWNERS`.
        batch_id: the batch the markers name (the last one published).
        scratch: a scratch folder for a fold.
    """
    if bulk and not any_stored(owners_df, read_table(spark, settings, TARGET_TABLE), ["owner_urn"]):
        # No row of these owners yet (a first publish, new entities): nothing to supersede, no marker.
        rows_df = edges_df
    else:
        rows_df = edges_df.unionByName(to_publish_markers(owners_df).withColumn("batch_id", F.lit(batch_id)))
    seq = maintenance_for(settings, spark).version(TARGET_TABLE) + 1
    retry_commit(lambda: append(rows_df.withColumn(PUBLISHED_SEQ, F.lit(seq).cast("bigint")), settings, TARGET_TABLE))
    if bulk:
        compact_lineage_edges(spark, settings, scratch)


def compact_lineage_edges(spark: SparkSession, settings: Settings, scratch: Location) -> int:
    """Fold gold.lineage_edges: each owner's superseded rows and the publish markers removed, in one overwrite.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        scratch: a scratch folder for the folded rows (staged: the overwrite reads its own table).

    Returns:
        The rows removed.
    """
    stored_df = read_table(spark, settings, TARGET_TABLE)
    markers = stored_df.filter(F.col("edge_kind").isNull()).limit(1).count()
    if not markers:
        return 0
    before = stored_df.count()
    storage = home_of(settings).storage
    folded_df = write_scratch(to_current_edges(stored_df), scratch / "folded", storage)
    kept = folded_df.count()
    retry_commit(lambda: replace_where(folded_df, settings, TARGET_TABLE, "true"))
    storage.remove_tree(scratch / "folded")
    return before - kept
