"""The Delta side of a landing batch: append its landable rows (without duplicates) and its quarantined
records, then its ledger rows LAST, which commits the batch; and delete the rows of batches that never
committed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.batches import (
    drop_batch_duplicates,
    drop_landed_duplicates,
    filter_landable,
    filter_out_lines,
    filter_quarantined,
    to_duplicate_hashes,
    to_quarantine_rows,
    to_repeated_lines,
    with_batch,
)
from bronze.formats import FILE_SINK, MCE
from bronze.lines import OFFSET_COLUMNS, line_offsets, with_line_numbers
from conf.errors import LakehouseError
from conf.locations import Location
from conf.settings import Settings
from conf.tables import table_name
from pipelines.batch.landing.model import (
    DATA_TABLES,
    FAMILIES,
    LANDED,
    LEDGER_TABLE,
    QUARANTINE_TABLE,
    SNAPSHOTS_TABLE,
    STAGE,
    USAGE_TABLE,
    FilePlan,
    FileResult,
)
from pipelines.batch.landing.staging import has_staged_files
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import append, read_table, retry_commit, sql_string
from pipelines.runtime.progress import committed_batches
from pipelines.runtime.storage import StoredFile, storage_for

# The time column the anti-join against landed rows is restricted by: a duplicate has the same time,
# so only rows (and, with Delta file statistics, only files) in the batch's time range are read.
_TIME_COLUMN = {SNAPSHOTS_TABLE: "created_time", USAGE_TABLE: "timestamp"}


def write_batch(
    spark: SparkSession,
    settings: Settings,
    plans: list[FilePlan],
    batch_id: str,
    landed_at: datetime,
    scratch: Location,
    before_commit: Callable[[], None] | None = None,
) -> list[FileResult]:
    """Write the staged batch: landable rows, quarantined records, then the ledger rows that commit it.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        plans: every file's plan, staged.
        batch_id: the batch id the rows are written with.
        landed_at: the landing time the rows are written with.
        scratch: the batch's scratch folder (its partition offsets and repeated lines are staged there).
        before_commit: writes of the batch's own bookkeeping (a DATA_TABLES table, e.g. the Kafka
            offsets), run after the data and before the ledger rows.

    Returns:
        One result per plan, in order.

    Raises:
        LakehouseError: when a file landed more valid records than it has (the tables changed meanwhile).
    """
    landing = [p for p in plans if p.status == LANDED]
    for plan in landing:
        plan.sha256()
    if not landing:
        return [_result(p, 0) for p in plans]
    offsets_df = _staged_offsets(spark, scratch, line_offsets({p.index: p.partitions for p in landing if p.partitions}))
    quarantined: list[DataFrame] = []
    for table_key, _ in FAMILIES:
        family = [p for p in landing if p.family == table_key and p.staged is not None and has_staged_files(p.staged)]
        if not family:
            continue
        # Small files staged together share one folder.
        folders = sorted({str(p.staged) for p in family})
        staged_df = with_line_numbers(spark.read.schema(family[0].schema).parquet(*folders), offsets_df)
        if any(p.records_read > p.records_quarantined for p in family):
            shared_lines = any(p.kind in (FILE_SINK, MCE) for p in family)
            repeats = scratch / "repeats" / table_key
            _append_landable(spark, settings, table_key, filter_landable(staged_df), batch_id, landed_at, shared_lines, repeats)
        if any(p.records_quarantined > len(p.rejected) for p in family):
            quarantined.append(to_quarantine_rows(filter_quarantined(staged_df), batch_id, landed_at))
    rejected = [(r[1], p.source, r[0], p.kind, r[2]) for p in landing for r in p.rejected]
    if rejected:
        rejected_df = spark.createDataFrame(
            rejected, "raw_text string, source_file string, line_number bigint, source_kind string, reason string"
        )
        quarantined.append(to_quarantine_rows(rejected_df, batch_id, landed_at))
    if quarantined:
        all_quarantined_df = quarantined[0]
        for more_df in quarantined[1:]:
            all_quarantined_df = all_quarantined_df.unionByName(more_df)
        append(all_quarantined_df, settings, QUARANTINE_TABLE)
    landed = _landed_counts(spark, settings, batch_id)
    results = []
    for plan in plans:
        result = _result(plan, landed.get(plan.source, 0))
        if result.duplicates_skipped < 0:
            raise LakehouseError(
                f"{plan.source}: landed {result.records_landed} of {plan.records_read - plan.records_quarantined} "
                f"valid records in batch {batch_id}; the bronze tables changed during the landing"
            )
        results.append(result)
    if before_commit is not None:
        before_commit()
    crash_point("land.after_data")
    _append_ledger(spark, settings, [r for r in results if r.status == LANDED], batch_id, landed_at)
    return results


def _append_landable(
    spark: SparkSession,
    settings: Settings,
    table_key: str,
    landable_df: DataFrame,
    batch_id: str,
    landed_at: datetime,
    shared_lines: bool,
    repeats: Location,
) -> None:
    """Append the landable rows that are not duplicates (of each other, or of landed rows).

    `shared_lines`: some of the rows come from files whose records can share a line (file-sink, mce).
    `repeats`: a scratch folder the batch's repeated lines are staged in.
    """
    # Most batches have no repeated record, so look first. Then the repeats' narrow key columns are
    # staged by the engine and the wide rows anti-joined with them: a window over the wide rows sorted
    # all of them (4-5 s of a 1M-record landing), and listing them in the query grew the plan with them.
    if to_duplicate_hashes(landable_df).limit(1).count():
        to_repeated_lines(landable_df).write.mode("overwrite").parquet(str(repeats))
        repeated_df = spark.read.parquet(str(repeats))
        if repeated_df.filter(F.col("line_number").isNull()).limit(1).count():
            landable_df = drop_batch_duplicates(landable_df)  # should a line not be numbered, the sort drops its copies
        else:
            landable_df = filter_out_lines(landable_df, repeated_df, shared_lines=shared_lines)
    time_column = _TIME_COLUMN[table_key]
    low, high = landable_df.agg(F.min(time_column), F.max(time_column)).first()
    landed_hashes_df = read_table(spark, settings, table_key).filter(F.col(time_column).between(low, high))
    new_df = drop_landed_duplicates(landable_df, landed_hashes_df)
    append(with_batch(new_df, batch_id, landed_at), settings, table_key)


def _staged_offsets(spark: SparkSession, scratch: Location, offsets: list[tuple[int, int, int]]) -> DataFrame | None:
    """The partition offsets written to the scratch folder as Parquet and read back; None when there are none.

    Written from here, not sent in a plan: the engine reads the file, so the plans of a batch of many
    files stay the size of a batch of one.
    """
    if not offsets:
        return None
    table = pa.Table.from_pylist(
        [dict(zip(("file_index", "partition", "lines_before"), row)) for row in offsets],
        schema=pa.schema([("file_index", pa.int32()), ("partition", pa.int64()), ("lines_before", pa.int64())]),
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    location = scratch / "offsets" / "offsets.parquet"
    storage_for(location).write_bytes(location, sink.getvalue().to_pybytes())
    return spark.read.schema(OFFSET_COLUMNS).parquet(str(location.parent))


def _landed_counts(spark: SparkSession, settings: Settings, batch_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table_key, _ in FAMILIES:
        rows = (
            read_table(spark, settings, table_key)
            .filter(F.col("batch_id") == batch_id)
            .groupBy("source_file")
            .count()
            .collect()
        )
        for row in rows:
            counts[row.source_file] = counts.get(row.source_file, 0) + int(row["count"])
    return counts


def _append_ledger(
    spark: SparkSession, settings: Settings, results: list[FileResult], batch_id: str, landed_at: datetime
) -> None:
    rows = [
        (
            r.path,
            r.content_hash,
            r.kind,
            r.records_read,
            r.records_landed,
            r.records_quarantined,
            r.duplicates_skipped,
        )
        for r in results
    ]
    ledger_df = spark.createDataFrame(
        rows,
        "source_file string, content_hash string, kind string, records_read bigint, records_landed bigint, "
        "records_quarantined bigint, duplicates_skipped bigint",
    )
    append(with_batch(ledger_df, batch_id, landed_at), settings, LEDGER_TABLE)


def _result(plan: FilePlan, landed: int) -> FileResult:
    if plan.status != LANDED:
        return FileResult(path=plan.source, kind=plan.kind, status=plan.status, note=plan.note)
    return FileResult(
        path=plan.source,
        kind=plan.kind,
        status=LANDED,
        content_hash=plan.content_hash,
        records_read=plan.records_read,
        records_landed=landed,
        records_quarantined=plan.records_quarantined,
        duplicates_skipped=plan.records_read - plan.records_quarantined - landed,
    )


def _markers_folder(settings: Settings) -> Location:
    return settings.home / "_scratch" / "land_uncommitted"


def mark_landing_begun(settings: Settings, batch_id: str) -> Location:
    """Create the file that marks a landing of `batch_id` as begun and not yet committed; return its path.

    `land_plans` creates it before the batch writes anything and removes it once the ledger rows are
    written; one left behind means a landing stopped half-way.
    """
    marker = _markers_folder(settings) / batch_id
    home_of(settings).write(marker, b"")
    return marker


def discard_uncommitted_batches(spark: SparkSession, settings: Settings) -> list[str]:
    """Delete the rows of batches that wrote data but no ledger rows (a landing that did not finish).

    Only when a landing marker is left (`mark_landing_begun`) are the tables looked at: a landing that ran
    to its commit leaves none, so a steady stream of landings costs no query here.

    Must run under the run lock: a landing in progress elsewhere looks exactly like a dead one.

    Returns:
        The batch ids whose rows were deleted, sorted.
    """
    storage = home_of(settings).storage
    markers = [f.location for f in storage.list_files(_markers_folder(settings))]
    if not markers:
        return []
    committed = set(committed_batches(spark, settings))
    discarded: set[str] = set()
    for key in DATA_TABLES:
        present = [r.batch_id for r in read_table(spark, settings, key).select("batch_id").distinct().collect()]
        stale = sorted(b for b in present if b is not None and b not in committed)
        if stale:
            listed = ", ".join(sql_string(b) for b in stale)
            statement = f"DELETE FROM {table_name(settings, key)} WHERE batch_id IN ({listed})"
            retry_commit(lambda statement=statement: spark.sql(statement).collect())
            discarded.update(stale)
    leftovers = settings.home / "_scratch" / STAGE
    for batch in _child_names(storage.list_files(leftovers), leftovers):
        if batch not in committed:
            storage.remove_tree(leftovers / batch)
    for marker in markers:
        storage.delete(marker)
    return sorted(discarded)


def _child_names(files: list[StoredFile], folder: Location) -> set[str]:
    """The names of the folders (and files) directly in `folder` that hold `files`."""
    return {str(f.location)[len(str(folder)) :].strip("/").split("/")[0] for f in files}
