"""The refine stage: bronze aspect snapshots -> silver change events, aspect state and skipped snapshots.

Committed bronze batches are processed one at a time, oldest first, and each batch costs what the
batch costs: its bronze rows are read by batch id, paired with the state rows of the keys it touches,
and only its own events are written.

Crash safety. One batch is written in this order, each write idempotent:
  1. stage: sequence the batch against the state *before the batch* (`silver.state.to_pre_batch_state`
     turns rows this batch already wrote back into their prev_* values, and their JSON into that of
     the bronze snapshots those name), pair, derive the events;
     everything is written to Parquet under `<home>/_scratch/refine/<batch>` (recomputed on a re-run);
  2. MERGE events on event_id (insert only, pruned to the batch's event dates and its own files);
  3. MERGE skipped snapshots on (batch_id, source_file, line_number, record_hash) (insert only);
  4. for a batch with PATCH records: MERGE the aspects the applied ones produced into silver.patched_aspects
     and the ones that could not be applied into bronze.quarantine (insert only);
  5. write state rows (`pipelines.runtime.state_store.write_state`): insert new keys, update a key only
     from another batch with a newer order key, and set the hard-deleted flag on the other keys of
     entities the batch deleted or re-created; a small batch of updates goes to the state's log;
  6. record progress (last).
A run killed anywhere and started again recomputes the same staged data and ends with the same tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.batches import to_quarantine_rows
from conf.errors import InputError
from conf.locations import Location
from conf.settings import Settings
from conf.tables import ASPECT_SNAPSHOTS, ENTITY_CHANGE_EVENTS, PATCHED_ASPECTS, QUARANTINE, SKIPPED_SNAPSHOTS
from pipelines.runtime.state_store import STATE_TABLE, STATE_WRITES, has_logged_rows, read_state, write_state
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.lock import running_step
from pipelines.runtime.io import insert_missing, read_table, sql_string, write_scratch
from pipelines.runtime.progress import (
    StageResult,
    finished_batches,
    pending_batches,
    record_progress,
)
from pipelines.runtime.storage import Storage
from silver.patching import to_patched_aspects, to_rejected_patches
from silver.refining import refine_batch as refine_silver_batch
from silver.state import filter_replaced_by, to_pre_batch_state, with_entity_flag_rows

STAGE = "refine"
SOURCE_TABLE = ASPECT_SNAPSHOTS
EVENTS_TABLE = ENTITY_CHANGE_EVENTS
SKIPPED_TABLE = SKIPPED_SNAPSHOTS
PATCHED_TABLE = PATCHED_ASPECTS
QUARANTINE_TABLE = QUARANTINE

@dataclass(frozen=True)
class StagedBatch:
    """One batch computed and written to Parquet, ready to be merged into the silver tables.

    `parts` holds the staged parts read back, by name (events, skipped, state, ...). `state_rows` counts
    the rows the state write applies: the batch's new state rows and its flag rows;
    `state_write` receives how they were written (`pipelines.runtime.state_store.write_state`).
    `seconds` holds the wall time of each staged part and, once refine_batch has run them, of each
    write step (STEP_NAMES); `cpu_seconds` the CPU time of this process (the embedded engine's threads
    included) over the same steps.
    """

    batch_id: str
    folder: Location
    rows_in: int
    events: int
    skipped: int
    state_rows: int
    event_dates: tuple[str, str] | None
    parts: dict[str, DataFrame] = field(default_factory=dict, compare=False, repr=False)
    seconds: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    cpu_seconds: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    state_write: list[str] = field(default_factory=list, compare=False, repr=False)


def scratch_folder(settings: Settings, batch_id: str) -> Location:
    """The folder holding one batch's staged Parquet files."""
    return settings.home / "_scratch" / STAGE / batch_id


def read_batch(spark: SparkSession, settings: Settings, batch_ids: list[str]) -> DataFrame:
    """The bronze aspect snapshots of the given batches."""
    return read_table(spark, settings, SOURCE_TABLE).filter(F.col("batch_id").isin(batch_ids))


def replaced_snapshots(
    spark: SparkSession, settings: Settings, state_df: DataFrame, batch_id: str
) -> tuple[DataFrame, DataFrame | None]:
    """The bronze snapshots of the state rows that `batch_id` replaced: none unless a run died after its state MERGE.

    Their batches are looked up first, so a first run reads no bronze rows for them.

    Returns:
        Those batches' bronze snapshots, and their silver.patched_aspects rows (None when there are no
        such batches).
    """
    replaced_df = filter_replaced_by(state_df, batch_id).select("prev_batch_id").distinct()
    batch_ids = sorted(row["prev_batch_id"] for row in replaced_df.collect())
    patched_df = read_table(spark, settings, PATCHED_TABLE).filter(F.col("batch_id").isin(batch_ids)) if batch_ids else None
    return read_batch(spark, settings, batch_ids), patched_df


@contextmanager
def _timed(name: str, seconds: dict[str, float], cpu_seconds: dict[str, float]) -> Iterator[None]:
    """Record the block's wall time in `seconds` and this process's CPU time in `cpu_seconds`, under `name`."""
    started, started_cpu = time.perf_counter(), time.process_time()
    with running_step(STAGE, name):  # what `lakehouse status` shows while it runs
        yield
    seconds[name] = round(time.perf_counter() - started, 3)
    cpu_seconds[name] = round(time.process_time() - started_cpu, 3)


def _stage(
    df: DataFrame,
    path: Location,
    storage: Storage,
    parts: dict[str, DataFrame],
    seconds: dict[str, float],
    cpu_seconds: dict[str, float],
    partition_by: str | None = None,
) -> DataFrame:
    """Write `df` to Parquet and return it read back (`write_scratch`).

    The read-back DataFrame goes into `parts` and the write's wall and CPU time into `seconds` and
    `cpu_seconds`, under the part's name.
    """
    with _timed(path.name, seconds, cpu_seconds):
        parts[path.name] = write_scratch(df, path, storage, partition_by)
    return parts[path.name]


def stage_batch(spark: SparkSession, settings: Settings, batch_id: str) -> StagedBatch:
    """Compute one batch against the state before it and write every result to the batch's scratch folder.

    When the state's log holds rows of the batch's entities, those entities' current state rows are
    written first (`batch_state`: the log applied once, for the three steps that read the state). Then
    the sequenced rows, partitioned by aspect name, so the window work is done once and each event
    generator reads only its own aspects' files; when the batch has accepted PATCH records, the sequenced
    rows with the patches applied (`patched`: full aspects, for the pairs and the state); then the schema
    aspects' fields, parsed once for the three generators that read them; then the events and the state
    rows.
    """
    folder = scratch_folder(settings, batch_id)
    parts: dict[str, DataFrame] = {}
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, float] = {}
    # What every _stage call takes after its DataFrame and folder.
    staging = (home_of(settings).storage, parts, seconds, cpu_seconds)
    batch_df = read_batch(spark, settings, [batch_id])
    entities_df = batch_df.select("entity_urn")
    if has_logged_rows(spark, settings, entities_df):
        # Applying the log is joins and aggregations: done once, for the three steps that read the state.
        state_df = _stage(read_state(spark, settings, entities_df), folder / "batch_state", *staging)
    else:
        # Those steps join the state with the batch's keys, and the engine reads only their rows.
        state_df = read_table(spark, settings, STATE_TABLE)
    pre_state_df = to_pre_batch_state(state_df, batch_id, *replaced_snapshots(spark, settings, state_df, batch_id))

    def stage(df: DataFrame, step: str) -> DataFrame:
        # Sequenced rows by aspect name: each event generator reads only its own aspects' files.
        return _stage(df, folder / step, *staging, partition_by="aspect_name" if step in ("sequenced", "patched") else None)

    refined = refine_silver_batch(
        batch_df, pre_state_df, settings.events.owner_category, settings.engine.native_lag_ignore_nulls, stage
    )
    sequenced_df, events_df, skipped_df = refined.sequenced_df, refined.events_df, refined.skipped_df
    state_df = _stage(
        with_entity_flag_rows(refined.state_rows_df, pre_state_df, refined.status_df), folder / "state", *staging
    )

    # One query for every count: a round trip to the engine each would cost more than the counting.
    summary = (
        events_df.agg(F.count(F.lit(1)).alias("n"), F.min("event_date").alias("lo"), F.max("event_date").alias("hi"))
        .crossJoin(sequenced_df.agg(F.count(F.lit(1)).alias("rows_in")))
        .crossJoin(skipped_df.agg(F.count(F.lit(1)).alias("skipped")))
        .crossJoin(state_df.agg(F.count(F.lit(1)).alias("state_rows")))
        .collect()[0]
    )
    return StagedBatch(
        batch_id=batch_id,
        folder=folder,
        rows_in=int(summary["rows_in"]),
        events=int(summary["n"]),
        skipped=int(summary["skipped"]),
        state_rows=int(summary["state_rows"]),
        event_dates=(str(summary["lo"]), str(summary["hi"])) if summary["n"] else None,
        parts=parts,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
    )


def merge_events(spark: SparkSession, settings: Settings, staged: StagedBatch) -> None:
    """Insert the batch's events that the table does not hold yet (keyed on event_id)."""
    if not staged.events:
        return
    low, high = staged.event_dates
    insert_missing(
        spark,
        settings,
        EVENTS_TABLE,
        staged.parts["events"],
        # An event id names the version that produced the event, and only one batch accepts a version
        # (its copies in later batches are duplicates), so the only rows that can match are this
        # batch's own, from a run that died after this step. The literals let the engine read those
        # alone: the batch's date partitions, and in them the files this batch wrote.
        f"t.event_id = s.event_id AND t.event_date = s.event_date AND t.batch_id = s.batch_id "
        f"AND t.event_date BETWEEN DATE'{low}' AND DATE'{high}' AND t.batch_id = {sql_string(staged.batch_id)}",
        view_name="refine_events",
        # On a first run there are none, and the events are appended.
        candidates_df=_own_rows(spark, settings, EVENTS_TABLE, staged.batch_id).filter(
            F.col("event_date").between(F.lit(low).cast("date"), F.lit(high).cast("date"))
        ),
    )


def merge_skipped(spark: SparkSession, settings: Settings, staged: StagedBatch) -> None:
    """Insert the batch's late and duplicate snapshots not recorded yet."""
    if not staged.skipped:
        return
    insert_missing(
        spark,
        settings,
        SKIPPED_TABLE,
        staged.parts["skipped"].withColumn("recorded_at", F.current_timestamp()),
        # The aspects of one MCE share its line: the record hash tells them apart.
        f"t.batch_id = s.batch_id AND t.source_file = s.source_file AND t.line_number = s.line_number "
        f"AND t.record_hash = s.record_hash AND t.batch_id = {sql_string(staged.batch_id)}",
        view_name="refine_skipped",
        candidates_df=_own_rows(spark, settings, SKIPPED_TABLE, staged.batch_id),
    )


def merge_patches(spark: SparkSession, settings: Settings, staged: StagedBatch) -> None:
    """Record what the batch's PATCH records did: the aspects the applied ones produced, and quarantine the rest.

    A PATCH that cannot be applied landed in bronze (bronze keeps what arrived); its quarantine row, in
    the batch of its bronze record, says why it changed nothing. Both writes are insert-only, so a re-run
    adds nothing. A batch without PATCH records writes nothing.
    """
    patched_df = staged.parts.get("patched")
    if patched_df is None:
        return
    insert_missing(
        spark,
        settings,
        PATCHED_TABLE,
        to_patched_aspects(patched_df).withColumn("recorded_at", F.current_timestamp()),
        f"t.batch_id = s.batch_id AND t.record_hash = s.record_hash AND t.entity_urn = s.entity_urn "
        f"AND t.aspect_name = s.aspect_name AND t.batch_id = {sql_string(staged.batch_id)}",
        view_name="refine_patched",
        candidates_df=_own_rows(spark, settings, PATCHED_TABLE, staged.batch_id),
    )
    kinds_df = read_batch(spark, settings, [staged.batch_id]).select("record_hash", "source_file", "line_number", "source_kind")
    rejected_df = to_rejected_patches(patched_df).join(kinds_df, on=["record_hash", "source_file", "line_number"], how="left")
    quarantine_df = to_quarantine_rows(rejected_df, staged.batch_id, datetime.now(timezone.utc))
    insert_missing(
        spark,
        settings,
        QUARANTINE_TABLE,
        quarantine_df,
        f"t.batch_id = s.batch_id AND t.source_file = s.source_file AND t.line_number = s.line_number "
        f"AND t.reason = s.reason AND t.batch_id = {sql_string(staged.batch_id)}",
        view_name="refine_quarantine",
        candidates_df=read_table(spark, settings, QUARANTINE_TABLE)
        .filter(F.col("batch_id") == F.lit(staged.batch_id))
        .select("batch_id"),
    )


def _own_rows(spark: SparkSession, settings: Settings, table_key: str, batch_id: str) -> DataFrame:
    """A table's rows written by `batch_id`: only a run of the batch that died after writing them leaves any."""
    return read_table(spark, settings, table_key).filter(F.col("batch_id") == F.lit(batch_id)).select("batch_id")


def merge_state(spark: SparkSession, settings: Settings, staged: StagedBatch) -> None:
    """Write the batch's state rows (`pipelines.runtime.state_store.write_state`): appended, logged or MERGEd.

    How they were written is kept in `staged.state_write`.
    """
    if not staged.state_rows:
        return
    staged.state_write.append(
        write_state(spark, settings, staged.parts["state"], staged.batch_id, staged.state_rows)
    )


# The writes of one batch, in order; a crash point follows each (`pipelines.runtime.faults`).
BATCH_STEPS = (
    ("events_merged", merge_events),
    ("skipped_merged", merge_skipped),
    ("patches_merged", merge_patches),
    ("state_merged", merge_state),
)

# What a batch's time is reported by: its staged parts in the order stage_batch writes them, then BATCH_STEPS.
STEP_NAMES = (
    "batch_state",
    "sequenced",
    "patched",
    "schema_fields",
    "events",
    "skipped",
    "entity_status",
    "state",
    *(name for name, _ in BATCH_STEPS),
)


def refine_batch(
    spark: SparkSession, settings: Settings, batch_id: str, run_id: str | None = None
) -> StagedBatch | None:
    """Refine one committed bronze batch: stage it, run BATCH_STEPS, record progress, drop the staged files.

    Returns:
        What the batch produced, or None when refine has already recorded the batch (nothing is written).
    """
    if batch_id in finished_batches(spark, settings, STAGE):
        return None
    return _refine_pending_batch(spark, settings, batch_id, run_id)


def _refine_pending_batch(spark: SparkSession, settings: Settings, batch_id: str, run_id: str | None) -> StagedBatch:
    """Refine a batch this run found pending (under the run lock, so no other run records it meanwhile)."""
    staged = stage_batch(spark, settings, batch_id)
    crash_point("refine.staged")
    for name, step in BATCH_STEPS:
        with _timed(name, staged.seconds, staged.cpu_seconds):
            step(spark, settings, staged)
        crash_point(f"refine.{name}")
    record_progress(
        spark,
        settings,
        STAGE,
        SOURCE_TABLE,
        batch_id,
        rows_in=staged.rows_in,
        rows_out=staged.events,
        run_id=run_id,
        pending=True,
    )
    home_of(settings).storage.remove_tree(staged.folder)
    return staged


def refine(
    spark: SparkSession, settings: Settings, run_id: str | None = None, max_batches: int | None = None
) -> StageResult:
    """Refine every committed bronze batch that refine has not processed yet, oldest first.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings (`events.owner_category` names owner events).
        run_id: the pipeline run recorded with each batch's progress.
        max_batches: process at most this many batches (the oldest pending ones).

    Returns:
        The batches processed, bronze rows read, events written, and per-run metrics: events, skipped
        and state rows, `state_<how>` the batches whose state rows were written each way
        (`pipelines.runtime.state_store.write_state`), `seconds.<step>`, the wall time of each staged
        part and write step summed over the batches (where a batch's time goes; STEP_NAMES), and
        `cpu_seconds.<step>`, the process's CPU time over the same steps.

    Raises:
        InputError: when max_batches is not a positive number.
    """
    if max_batches is not None and max_batches < 1:
        raise InputError(f"max_batches: {max_batches!r} must be at least 1")
    pending = pending_batches(spark, settings, STAGE)
    if max_batches is not None:
        pending = pending[:max_batches]
    staged = [_refine_pending_batch(spark, settings, b, run_id) for b in pending]
    return StageResult(
        stage=STAGE,
        batch_ids=tuple(s.batch_id for s in staged),
        rows_in=sum(s.rows_in for s in staged),
        rows_out=sum(s.events for s in staged),
        metrics={
            "events": float(sum(s.events for s in staged)),
            "skipped": float(sum(s.skipped for s in staged)),
            "state_rows": float(sum(s.state_rows for s in staged)),
            **{f"state_{how}": float(sum(s.state_write.count(how) for s in staged)) for how in STATE_WRITES},
            **{f"seconds.{name}": round(sum(s.seconds.get(name, 0.0) for s in staged), 3) for name in STEP_NAMES},
            **{f"cpu_seconds.{name}": round(sum(s.cpu_seconds.get(name, 0.0) for s in staged), 3) for name in STEP_NAMES},
        },
    )
