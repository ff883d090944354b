"""Staging planned files: parse and validate their records (bronze.records) and write them as Parquet
under the batch's scratch folder, counting what was read and quarantined.

JSON-lines files are read as text by the engine, several of one kind in one job (`stage_text_reads`).
Their lines are numbered from the row id within each read partition once the partitions are in file
order: a gzip file is one partition; the partitions of a plain file are put in file order, and checked
to cover its bytes exactly, from the bytes at their bounds alone (`bronze.lines.order_partitions`).
What the engine cannot read as text (bytes that are not UTF-8, a damaged gzip: the lines before the
damage land; a path it would take as a glob pattern) is numbered in Python, and file-sink arrays and MCE
lines are converted by the engine's workers (`pipelines.batch.landing.conversion`); that numbered copy is
staged instead, and the lines staged must then be as many as the copy has, or the landing stops.
"""

from __future__ import annotations

import functools
import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from bronze.formats import EMPTY, MCL, MCP, USAGE
from bronze.lines import ReadPartition, bound_reads, order_partitions, to_lines, to_numbered_lines, to_partition_summary
from bronze.records import parse_snapshot_lines, parse_usage_lines
from conf.errors import InputError, LakehouseError
from conf.locations import Location, ObjectLocation
from conf.settings import Settings
from pipelines.batch.landing.engine_files import GLOB_CHARACTERS
from pipelines.batch.landing.files import NumberedCopy, is_gzip, number_lines, prefetched, read_at
from pipelines.batch.landing.model import FAMILIES, LANDED, SNAPSHOTS_TABLE, UNDETECTED, USAGE_TABLE, FilePlan
from pipelines.runtime.storage import storage_for

log = logging.getLogger("lakehouse.landing")
# JSON-lines files of one kind are read as text together, in jobs of up to this many bytes and files (a
# longer union of reads makes a plan deep enough to crash the engine's planner: 300 did, 100 did not).
TEXT_READS_BATCH_BYTES = 1 << 30
TEXT_READS_BATCH_FILES = 64
# Ranged reads of partition bounds made at once on object storage (each is one request).
BOUND_READ_THREADS = 16


def stage_file(spark: SparkSession, settings: Settings, plan: FilePlan, scratch: Location) -> None:
    """Parse, validate and stage one file that `stage_text_reads` did not stage, in Python; fill in its counts.

    A file-sink or MCE file is staged from the copy `convert_in_engine` made of it (run on the batch first).

    Raises:
        InputError: for a file named explicitly of which not one line can be read.
        LakehouseError: when the lines staged are not the file's lines (see `check_line_count`).
    """
    if plan.kind == EMPTY:
        return
    plan.family = _family_of(plan.kind)
    if plan.numbered is not None:
        _stage_copy(spark, settings, plan, scratch, plan.path, plan.numbered)
        return
    if plan.converted is not None:
        _stage_copy(spark, settings, plan, scratch, *plan.converted)
        return
    # A JSON-lines file the engine's text read could not number (`stage_text_reads`): its lines are
    # numbered here (undecodable bytes become U+FFFD; a damaged gzip gives the lines before the damage)
    # and the numbered copy, which has a safe name, is staged instead.
    numbered = scratch / "input" / f"{plan.index:05d}.txt"
    _stage_copy(spark, settings, plan, scratch, numbered, number_lines(plan.path, numbered))


def _stage_copy(
    spark: SparkSession, settings: Settings, plan: FilePlan, scratch: Location, numbered: Location, copy: NumberedCopy
) -> None:
    """Stage the numbered copy of a file, quarantining where reading the file stopped early.

    Raises:
        InputError: for a file named explicitly of which nothing can be read.
        LakehouseError: when the rows staged are not the lines of the copy.
    """
    if copy.error is not None:
        if not (copy.lines or copy.lines_read or copy.cut_text or plan.rejected):
            # Nothing of the file can be read: reported as detection reports a corrupt gzip.
            message = f"{plan.path}: cannot be read ({copy.error})"
            if plan.explicit:
                raise InputError(message)
            plan.status, plan.note = UNDETECTED, message
            return
        limit = settings.ingest.max_record_bytes
        reason = f"record: file truncated or corrupt after line {copy.lines_read} ({copy.error})"
        plan.rejected.append((copy.cut_line or copy.lines_read + 1, copy.cut_text[:limit], reason))
    # Only a line feed ends a line of the copy: the engine would also end one at a lone carriage return.
    text_df = spark.read.option("lineSep", "\n").text(str(numbered))
    summary = _stage_lines(settings, plan, scratch, to_numbered_lines(text_df, plan.index, plan.source))
    check_line_count(plan.path, sum(int(r.rows) for r in summary), "lines staged", copy.lines)


def _family_of(kind: str) -> str:
    """The bronze table a file of this kind lands in."""
    return USAGE_TABLE if kind == USAGE else SNAPSHOTS_TABLE


def check_line_count(path: Location, got: int, what: str, expected: int | None) -> None:
    """Fail unless `got` lines of a file are `expected` (when known): no line may be lost or made up.

    Raises:
        LakehouseError: naming the file and both counts (the batch is not committed).
    """
    if expected is not None and got != expected:
        raise LakehouseError(
            f"{path}: {got} {what} but the file has {expected} lines; the batch is not committed, so that "
            "no record is lost silently"
        )


def _stage_lines(settings: Settings, plan: FilePlan, scratch: Location, lines_df: DataFrame) -> list:
    """Validate `lines_df`, write it to the plan's staging folder, count it; return its partition summary."""
    return _stage_plans_lines(settings, [plan], scratch / dict(FAMILIES)[plan.family] / f"{plan.index:05d}", lines_df)


def _stage_plans_lines(settings: Settings, plans: list[FilePlan], staged: Location, lines_df: DataFrame) -> list:
    """Validate the lines of `plans` (one family and kind), write them to `staged`, count them per plan.

    Returns:
        The partition summary of every plan's rows (`to_partition_summary`).
    """
    limit = settings.ingest.max_record_bytes
    family, kind = plans[0].family, plans[0].kind
    if family == USAGE_TABLE:
        staged_df = parse_usage_lines(lines_df, max_record_bytes=limit)
    else:
        staged_df = parse_snapshot_lines(lines_df, kind, default_actor=settings.ingest.default_actor, max_record_bytes=limit)
    if settings.privacy.pseudonymise:
        from pipelines.privacy.landing import pseudonymise_staged

        staged_df = pseudonymise_staged(settings, family, staged_df)
    # The engine's default writer, not `write_scratch`: with snappy and small row groups a 1M-record
    # landing took 1 s longer (18.2 -> 20.0 s, medians of 3 alternating runs).
    staged_df.write.mode("overwrite").parquet(str(staged))
    # Read back as nullable: the parts of one family differ there (text reads have a non-null row id).
    schema = StructType([StructField(f.name, f.dataType, nullable=True) for f in staged_df.schema.fields])
    summary = []
    if has_staged_files(staged):
        read_df = lines_df.sparkSession.read.schema(schema).parquet(str(staged))
        summary = to_partition_summary(read_df).collect()
        if settings.privacy.pseudonymise:
            from pipelines.privacy.landing import record_found_identities

            record_found_identities(settings, read_df)
    for plan in plans:
        own = [r for r in summary if int(r.file_index) == plan.index]
        plan.staged, plan.schema = staged, schema
        plan.records_read = sum(int(r.records_read) for r in own) + len(plan.rejected)
        plan.records_quarantined = sum(int(r.records_quarantined) for r in own) + len(plan.rejected)
    return summary


def stage_text_reads(spark: SparkSession, settings: Settings, plans: list[FilePlan], scratch: Location) -> None:
    """Stage the batch's JSON-lines files as the engine reads them as text, a job per kind and chunk of files.

    A micro-batch of watch mode holds a few small files: one job stages all of them; each plan's counts
    come from its own rows. A job that fails (a file whose bytes are not UTF-8, a damaged gzip) or gives
    a file whose read partitions cannot be put in file order is run again file by file; a file that fails
    alone is left to `stage_file`, which numbers its lines in Python. Plans staged here have `staged` and
    `partitions` set; the others (file-sink, MCE, already numbered, or unreadable by the engine) are left
    to `stage_file`.
    """
    groups: dict[str, list[FilePlan]] = {}
    for plan in plans:
        if _is_text_read_file(plan):
            groups.setdefault(plan.kind, []).append(plan)
    for group in groups.values():
        for chunk in _chunks(group, TEXT_READS_BATCH_BYTES, TEXT_READS_BATCH_FILES):
            if not _stage_text_read(spark, settings, chunk, scratch) and len(chunk) > 1:
                for plan in chunk:
                    _stage_text_read(spark, settings, [plan], scratch)


def _is_text_read_file(plan: FilePlan) -> bool:
    return (
        plan.status == LANDED
        and plan.kind in (MCL, MCP, USAGE)
        and plan.numbered is None
        and plan.size > 0
        and not GLOB_CHARACTERS.search(str(plan.path))
    )


def _chunks(plans: list[FilePlan], max_bytes: int, max_files: int) -> list[list[FilePlan]]:
    """Consecutive plans in chunks of up to `max_bytes` (a larger file alone) and `max_files` files."""
    chunks: list[list[FilePlan]] = [[]]
    size = 0
    for plan in plans:
        if chunks[-1] and (size + plan.size > max_bytes or len(chunks[-1]) == max_files):
            chunks.append([])
            size = 0
        chunks[-1].append(plan)
        size += plan.size
    return chunks


def _stage_text_read(spark: SparkSession, settings: Settings, plans: list[FilePlan], scratch: Location) -> bool:
    """Stage files read as text by the engine in one job and order their partitions; False when one cannot be.

    On False nothing of the job stays staged.
    """
    family = _family_of(plans[0].kind)
    staged = scratch / dict(FAMILIES)[family] / f"text-{plans[0].index:05d}-{len(plans)}"
    # Lines end at line feeds only, as the file's lines are counted and numbered everywhere else.
    reads = [to_lines(spark.read.option("lineSep", "\n").text(str(p.path)), p.index, p.source) for p in plans]
    lines_df = functools.reduce(DataFrame.unionByName, reads)
    for plan in plans:
        plan.family = family
    try:
        summary = _stage_plans_lines(settings, plans, staged, lines_df)
    except Exception as exc:  # noqa: BLE001 - each file is read again alone; the Python pass says why one cannot be
        # Logged, so that a failure unrelated to the files (which the Python pass then meets again) is
        # seen with its first cause.
        log.warning("%s: the engine could not read it (%s)", ", ".join(p.source for p in plans), exc)
        storage_for(staged).remove_tree(staged)
        return False
    orders = {plan.index: _file_order(plan, [r for r in summary if int(r.file_index) == plan.index]) for plan in plans}
    if unordered := [plan.source for plan in plans if orders[plan.index] is None]:
        log.warning("%s: the engine's read partitions do not cover the file's lines exactly", ", ".join(unordered))
        storage_for(staged).remove_tree(staged)
        for plan in plans:
            plan.staged = None
        return False
    for plan in plans:
        plan.partitions = orders[plan.index]
    return True


def _file_order(plan: FilePlan, summary: list) -> list[tuple[int, int]] | None:
    """The read partitions of a text-read file as (partition, rows) in file order; None if unverifiable."""
    parts = [
        ReadPartition(int(r.partition), int(r.rows), int(r.bytes), r.first_crc, r.first_bytes, r.last_crc, r.last_bytes)
        for r in summary
    ]
    if is_gzip(plan.path):
        # Not splittable: the engine decompresses it front to back, in one partition.
        return [(p.partition, p.rows) for p in parts] if len(parts) == 1 else None
    read = read_at(plan.path, plan.size)
    if isinstance(plan.path, ObjectLocation):  # a request per read: made ahead, side by side
        read = prefetched(read, bound_reads(parts), BOUND_READ_THREADS)
    order = order_partitions(parts, read, plan.size)
    if order is None:
        return None
    rows = {p.partition: p.rows for p in parts}
    return [(partition, rows[partition]) for partition in order]


def has_staged_files(folder: Location) -> bool:
    """Whether a staging folder holds any Parquet file (writing no rows may write no file)."""
    return storage_for(folder).has_files(folder, ".parquet")
