"""Look back in time: an entity's aspects as of a moment, its change history, and a replay check of a window.

As-of reads the bronze snapshot history, not Delta time travel of silver.aspect_state: the state table's
versions follow processing time (a late snapshot lands in a later table version, and a late one that
lost to a newer version is never in the state), while the question "what did the entity look like at
T" is answered by the snapshots created at or before T, ordered by their ordering key.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import ASPECT_SNAPSHOTS, ENTITY_CHANGE_EVENTS
from pipelines.runtime.home import home_of
from pipelines.runtime.io import read_table, write_scratch
from pipelines.runtime.progress import committed_batches, finished_batches
from pipelines.batch.refine import STAGE as REFINE_STAGE
from silver.patching import with_patches_applied
from silver.refining import refine_batch
from silver.sequencing import to_sequenced_batch
from silver.state import to_empty_state

EVENTS_TABLE = ENTITY_CHANGE_EVENTS
SNAPSHOTS_TABLE = ASPECT_SNAPSHOTS

# The columns that must agree between stored and recomputed events (lineage of the bronze copy aside).
COMPARED_COLUMNS = (
    "event_id",
    "entity_urn",
    "entity_type",
    "category",
    "operation",
    "modifier",
    "parameters_json",
    "actor",
    "event_time",
    "version",
    "aspect_name",
    "aspect_entity_urn",
    "aspect_entity_type",
    "change_set_id",
    "old_value",
    "new_value",
    "source_version",
    "source_order_key",
)


def committed_snapshots(spark: SparkSession, settings: Settings) -> DataFrame:
    """The bronze aspect snapshots of committed batches (rows of a landing that did not finish are left out)."""
    batches = committed_batches(spark, settings)
    return read_table(spark, settings, SNAPSHOTS_TABLE).filter(F.col("batch_id").isin(batches))


def aspects_as_of(spark: SparkSession, settings: Settings, urn: str, at_ms: int) -> list[dict[str, Any]]:
    """Every aspect of `urn` as it was at `at_ms`: the newest snapshot (by ordering key) created at or before it.

    PATCH records are applied in order to the aspect before them, so an aspect a patch wrote shows as the
    full aspect, never as the patch (one that cannot be applied changes nothing).

    Returns:
        One dict per aspect, sorted by name: aspect_name, version, change_type, created_time,
        created_actor, deleted (the newest record is a DELETE) and aspect (the parsed JSON, None if deleted).
    """
    if not urn.startswith("urn:li:"):
        raise InputError(f"urn: {urn!r} is not a DataHub urn (urn:li:<type>:<id>)")
    snapshots_df = committed_snapshots(spark, settings).filter(
        (F.col("entity_urn") == urn) & (F.col("created_time") <= F.lit(at_ms))
    )
    sequenced_df = with_patches_applied(to_sequenced_batch(snapshots_df, to_empty_state(snapshots_df)))
    rows = sequenced_df.filter(F.col("is_last")).orderBy("aspect_name").collect()
    return [
        {
            "aspect_name": r.aspect_name,
            "version": r.version,
            "change_type": r.change_type,
            "created_time": r.created_time,
            "created_actor": r.created_actor,
            "deleted": bool(r.is_delete),
            "aspect": None if r.is_delete or r.new_json is None else json.loads(r.new_json),
        }
        for r in rows
    ]


def entity_history(spark: SparkSession, settings: Settings, urn: str) -> list[dict[str, Any]]:
    """The change events of `urn` (and of its schema fields), oldest first."""
    if not urn.startswith("urn:li:"):
        raise InputError(f"urn: {urn!r} is not a DataHub urn (urn:li:<type>:<id>)")
    events_df = read_table(spark, settings, EVENTS_TABLE).filter(
        (F.col("entity_urn") == urn) | (F.col("aspect_entity_urn") == urn)
    )
    ordered_df = events_df.orderBy("event_time", "source_order_key", "category", "operation", "event_id")
    return [r.asDict(recursive=True) for r in ordered_df.collect()]


@dataclass(frozen=True)
class ReplayResult:
    """A window's events recomputed from bronze against those silver holds."""

    since_ms: int
    until_ms: int
    recomputed: int
    stored: int
    missing: list[dict[str, Any]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """True when silver holds exactly the recomputed events."""
        return not self.missing and not self.unexpected


def _comparable(events_df: DataFrame, since_ms: int, until_ms: int) -> DataFrame:
    window_df = events_df.filter((F.col("event_time") >= F.lit(since_ms)) & (F.col("event_time") < F.lit(until_ms)))
    # Maps cannot take part in set operations: compare the parameters as sorted JSON.
    return window_df.withColumn(
        "parameters_json", F.to_json(F.array_sort(F.map_entries(F.col("parameters"))))
    ).select(*COMPARED_COLUMNS)


def replay_window(
    spark: SparkSession, settings: Settings, since_ms: int, until_ms: int, *, limit: int = 50
) -> ReplayResult:
    """Recompute the events of [since_ms, until_ms) from bronze, from scratch in one batch, and compare.

    Every snapshot of the batches refine has finished is sequenced at once against an empty state (the versions before the
    window give the window's first versions their predecessors). The result equals what incremental
    refine stored unless snapshots arrived late across batches: refine skips a version older than the
    state it meets, a single batch does not.

    Args:
        limit: at most this many differing events are listed on each side.
    """
    if since_ms >= until_ms:
        raise InputError(f"--from: {since_ms} must be before --to {until_ms}")
    # The batches refine has finished: silver holds nothing yet of a batch landed and not refined.
    refined = finished_batches(spark, settings, REFINE_STAGE)
    snapshots_df = read_table(spark, settings, SNAPSHOTS_TABLE).filter(F.col("batch_id").isin(refined))
    storage = home_of(settings).storage
    folder = settings.home / "_scratch" / "replay" / uuid.uuid4().hex

    def stage(df: DataFrame, step: str) -> DataFrame:
        # The sequenced rows are computed once, by aspect name: every generator reads its own aspects'.
        if step in ("sequenced", "patched"):
            return write_scratch(df, folder / step, storage, partition_by="aspect_name")
        return df

    try:
        refined = refine_batch(
            snapshots_df, to_empty_state(snapshots_df), settings.events.owner_category,
            settings.engine.native_lag_ignore_nulls, stage,
        )  # fmt: skip
        # The comparison reads the events three times: computed once.
        window_df = _comparable(refined.events_df, since_ms, until_ms)
        recomputed_df = write_scratch(window_df, folder / "events", storage)
        stored_df = _comparable(read_table(spark, settings, EVENTS_TABLE), since_ms, until_ms)
        missing = _rows(recomputed_df.exceptAll(stored_df), limit)
        unexpected = _rows(stored_df.exceptAll(recomputed_df), limit)
        recomputed, stored = recomputed_df.count(), stored_df.count()
    finally:
        storage.remove_tree(folder)
    return ReplayResult(
        since_ms=since_ms,
        until_ms=until_ms,
        recomputed=recomputed,
        stored=stored,
        missing=missing,
        unexpected=unexpected,
    )


def _rows(df: DataFrame, limit: int) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.orderBy("event_time", "event_id").limit(limit).collect()]
