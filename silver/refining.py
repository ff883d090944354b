"""One batch refined: the silver steps in their one order, from bronze rows and the state before the batch.

`refine_batch` is the composition every caller runs (the refine stage, replay, the silver benchmark, the
tests): sequence the batch against the state, apply its PATCH records, pair each accepted version with
the one before, derive the change events, and the skipped snapshots, entity status and state rows. How
each result is kept (staged to files, cached, left lazy) is the caller's `stage`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.events import to_change_events
from silver.events.common import with_schema_fields
from silver.patching import is_patch, with_patches_applied
from silver.sequencing import ACCEPTED, to_pairs, to_sequenced_batch, to_skipped_snapshots
from silver.state import to_entity_status, to_state_rows

# The steps a caller may keep, by the name `stage` receives.
STAGED_STEPS = ("sequenced", "patched", "schema_fields", "events", "skipped", "entity_status")


@dataclass(frozen=True)
class RefinedBatch:
    """The silver results of one batch (each as `stage` returned it, where it was staged).

    Attributes:
        sequenced_df: the batch's versions sequenced against the state, PATCH records applied.
        pairs_df: each accepted version with the one before it.
        events_df: the Entity Change Events of the batch.
        skipped_df: the versions refine skipped, with the reason.
        status_df: the entities whose hard-deleted status the batch set or cleared.
        state_rows_df: the batch's state rows (`to_state_rows`, stamped `updated_at`).
        patched: whether the batch held accepted PATCH records.
    """

    sequenced_df: DataFrame
    pairs_df: DataFrame
    events_df: DataFrame
    skipped_df: DataFrame
    status_df: DataFrame
    state_rows_df: DataFrame
    patched: bool


def _as_is(df: DataFrame, _step: str) -> DataFrame:
    return df


def refine_batch(
    batch_df: DataFrame,
    pre_state_df: DataFrame,
    owner_category: str,
    native_lag: bool = True,
    stage: Callable[[DataFrame, str], DataFrame] = _as_is,
) -> RefinedBatch:
    """Refine one batch of bronze aspect rows against the state before it.

    One query reads which aspects the batch's accepted versions hold and whether any is a PATCH: only
    those aspects' event generators run, and the patches are applied only when there are some.

    Args:
        batch_df: the batch's bronze.aspect_snapshots rows.
        pre_state_df: silver.aspect_state before the batch (`to_pre_batch_state`, or `to_empty_state`).
        owner_category: the ECE category of ownership changes (`events.owner_category`).
        native_lag: whether the engine's lag ignores nulls natively (`engine.native_lag_ignore_nulls`).
        stage: called with each step's result and its name (STAGED_STEPS); what it returns is used from
            then on (e.g. the result written to files and read back).

    Returns:
        The batch's results.
    """
    sequenced_df = stage(to_sequenced_batch(batch_df, pre_state_df, native_lag), "sequenced")
    aspects = (
        sequenced_df.filter(F.col("disposition") == ACCEPTED)
        .groupBy("aspect_name")
        .agg(F.max(F.when(is_patch(F.col("change_type")), 1).otherwise(0)).alias("patches"))
        .collect()
    )
    aspect_names = [r.aspect_name for r in aspects]
    patched = any(r.patches for r in aspects)
    if patched:
        sequenced_df = stage(with_patches_applied(sequenced_df), "patched")
    pairs_df = to_pairs(sequenced_df)
    schema_pairs_df = stage(with_schema_fields(pairs_df), "schema_fields")
    events_df = stage(to_change_events(pairs_df, owner_category, schema_pairs_df, aspect_names), "events")
    skipped_df = stage(to_skipped_snapshots(sequenced_df), "skipped")
    status_df = stage(to_entity_status(sequenced_df, pre_state_df), "entity_status")
    state_rows_df = to_state_rows(sequenced_df, status_df).withColumn("updated_at", F.current_timestamp())
    return RefinedBatch(sequenced_df, pairs_df, events_df, skipped_df, status_df, state_rows_df, patched)
