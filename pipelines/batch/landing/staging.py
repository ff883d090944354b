"""Staging one planned file: parse and validate its records (bronze.records) and write them as Parquet
under the batch's scratch folder, counting what was read and quarantined.

JSON-lines files are read by the engine when it can number their lines exactly (its read partitions are
put in file order by checking their first and last lines against the file); otherwise, and for
file-sink arrays, a numbered copy written in Python is staged instead. The lines staged must be as many as
the file has, or the landing stops.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from bronze.formats import EMPTY, FILE_SINK, MCE, MCL, MCP, USAGE
from bronze.lines import (
    order_partitions,
    to_lines,
    to_numbered_lines,
    to_numbered_lines_of_files,
    to_partition_summary,
)
from bronze.records import parse_snapshot_lines, parse_usage_lines
from bronze.snapshots import expand_snapshot_line
from conf.errors import InputError, LakehouseError
from conf.locations import Location
from conf.settings import Settings
from pipelines.batch.landing.files import (
    FileDigest,
    LineScanner,
    NumberedCopy,
    convert_file_sink,
    is_gzip,
    number_lines,
    open_output_text,
    write_numbered_lines,
)
from pipelines.batch.landing.model import FAMILIES, LANDED, SNAPSHOTS_TABLE, UNDETECTED, USAGE_TABLE, FilePlan
from pipelines.runtime.storage import storage_for

log = logging.getLogger("lakehouse.landing")
# The engine reads a path as a glob pattern: with one of these in it, it may read another file, or none.
_GLOB_CHARACTERS = re.compile(r"[*?\[\]{}\\]")
# Files up to this size are staged together with the batch's other small files of their kind (one engine
# job for all of them), in groups of up to SMALL_FILES_BATCH_BYTES.
SMALL_FILE_BYTES = 4 << 20
SMALL_FILES_BATCH_BYTES = 64 << 20


def stage_file(spark: SparkSession, settings: Settings, plan: FilePlan, scratch: Location) -> None:
    """Parse, validate and stage one file; fill in its counts and the file order of its read partitions.

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
    numbered = scratch / "input" / f"{plan.index:05d}.txt"
    if plan.kind == FILE_SINK:
        copy, plan.rejected = convert_file_sink(plan.path, numbered, settings.ingest.max_record_bytes)
        _stage_copy(spark, settings, plan, scratch, numbered, copy)
        return
    if plan.kind == MCE:
        _stage_snapshot_lines(spark, settings, plan, scratch, numbered)
        return
    ordered = _stage_engine_read(spark, settings, plan, scratch)
    if ordered is None:
        # Number the lines here (undecodable bytes become U+FFFD; a damaged gzip gives the lines before
        # the damage) and stage the numbered copy, which has a safe name, instead.
        copy = number_lines(plan.path, numbered)
        check_line_count(plan.path, copy.lines, "lines read", None if copy.error else _file_lines(plan))
        _stage_copy(spark, settings, plan, scratch, numbered, copy)
        ordered = []
    plan.partitions = ordered


def _stage_snapshot_lines(spark: SparkSession, settings: Settings, plan: FilePlan, scratch: Path, numbered: Path) -> None:
    """Stage a JSON-lines file of MCEs: its lines numbered, each MCE written as one MCP line per aspect.

    Every aspect line keeps the line number of its MCE; an aspect that cannot land (an unknown class) is
    rejected with its reason, the snapshot's other aspects land.
    """
    lines_path = numbered.with_suffix(".lines")
    copy = number_lines(plan.path, lines_path)
    check_line_count(plan.path, copy.lines, "lines read", None if copy.error else _file_lines(plan))
    limit = settings.ingest.max_record_bytes
    written = 0
    with open(lines_path, encoding="utf-8") as source, open(numbered, "w", encoding="utf-8") as target:
        for numbered_line in source:
            number, _, text = numbered_line.rstrip("\n").partition("\t")
            for record, reason in expand_snapshot_line(text):
                if reason is None:
                    target.write(f"{number}\t{record}\n")
                    written += 1
                else:
                    plan.rejected.append((int(number), record[:limit], reason))
    lines_path.unlink()
    _stage_copy(spark, settings, plan, scratch, numbered, dataclasses.replace(copy, lines=written))


def _stage_engine_read(
    spark: SparkSession, settings: Settings, plan: FilePlan, scratch: Location
) -> list[tuple[int, int]] | None:
    """Stage a JSON-lines file as the engine reads it; return its read partitions in file order.

    Returns:
        (partition, rows) in file order, or None when the engine's read cannot be used and the caller
        must number the lines itself: a path the engine would take as a glob pattern, a file it cannot
        read (bytes that are not UTF-8, a gzip it cannot decompress), or a read that is not exactly the
        file's lines (another count, e.g. a lone carriage return splits a line; partitions, or a first
        and last line, that do not match the file).
    """
    source = str(plan.path)
    if _GLOB_CHARACTERS.search(source):
        return None
    try:
        summary = _stage_lines(settings, plan, scratch, to_lines(spark.read.text(source), plan.index, source))
    except Exception as exc:  # noqa: BLE001 - the Python pass reads what can be read and says why the rest cannot
        # Logged, so that a failure unrelated to the file (which the Python pass then meets again) is
        # seen with its first cause.
        log.warning("%s: the engine could not read it (%s); numbering its lines in Python", source, exc)
        return None
    if sum(int(r.rows) for r in summary) != _file_lines(plan):
        return None
    return _file_order(plan.path, summary, plan.digest_future.result())


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


def _file_lines(plan: FilePlan) -> int | None:
    """How many lines the plan's file has (decompressed); None when that is unknown (a damaged gzip)."""
    if plan.lines_future is not None:
        return plan.lines_future.result()
    return plan.digest_future.result().lines


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
    # The engine's default writer, not `write_scratch`: with snappy and small row groups a 1M-record
    # landing took 1 s longer (18.2 -> 20.0 s, medians of 3 alternating runs).
    staged_df.write.mode("overwrite").parquet(str(staged))
    # Read back as nullable: the parts of one family differ there (text reads have a non-null row id).
    schema = StructType([StructField(f.name, f.dataType, nullable=True) for f in staged_df.schema.fields])
    summary = []
    if has_staged_files(staged):
        read_df = lines_df.sparkSession.read.schema(schema).parquet(str(staged))
        summary = to_partition_summary(read_df).collect()
    for plan in plans:
        own = [r for r in summary if int(r.file_index) == plan.index]
        plan.staged, plan.schema = staged, schema
        plan.records_read = sum(int(r.records_read) for r in own) + len(plan.rejected)
        plan.records_quarantined = sum(int(r.records_quarantined) for r in own) + len(plan.rejected)
    return summary


def stage_small_files(spark: SparkSession, settings: Settings, plans: list[FilePlan], scratch: Location) -> None:
    """Stage the batch's small JSON-lines files of each family and kind together, with one engine job.

    A micro-batch of watch mode holds a few small files; staging each on its own costs an engine job per
    file. Their lines are numbered in Python into one copy (`<file index>\\t<line>\\t<record>`) instead,
    which is staged once; each plan's counts come from its own rows. Plans staged here have `staged` set;
    the others (large, gzip, file-sink, already numbered, or alone of their kind) are left to `stage_file`.

    Raises:
        LakehouseError: when the lines staged for a file are not the lines it has (nothing is committed).
    """
    groups: dict[str, list[FilePlan]] = {}
    for plan in plans:
        if _is_small_lines_file(plan):
            groups.setdefault(plan.kind, []).append(plan)
    for kind, group in groups.items():
        for chunk in _chunks(group, SMALL_FILES_BATCH_BYTES):
            if len(chunk) > 1:
                _stage_together(spark, settings, chunk, scratch, f"small-{kind}-{chunk[0].index:05d}")


def _is_small_lines_file(plan: FilePlan) -> bool:
    return (
        plan.status == LANDED
        and plan.kind in (MCL, MCP, USAGE)
        and plan.numbered is None
        and not is_gzip(plan.path)
        and _size(plan) <= SMALL_FILE_BYTES
    )


def _chunks(plans: list[FilePlan], max_bytes: int) -> list[list[FilePlan]]:
    chunks: list[list[FilePlan]] = [[]]
    size = 0
    for plan in plans:
        plan_size = _size(plan)
        if chunks[-1] and size + plan_size > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(plan)
        size += plan_size
    return chunks


def _stage_together(spark: SparkSession, settings: Settings, plans: list[FilePlan], scratch: Location, name: str) -> None:
    copy_path = scratch / "input" / f"{name}.txt"
    lines: dict[int, int] = {}
    with open_output_text(copy_path) as target:
        for plan in plans:
            plan.family = _family_of(plan.kind)
            copy = write_numbered_lines(plan.path, target, prefix=f"{plan.index}\t")
            if copy.error is not None:
                # A plain file that fails to read is an I/O error, not bad input: the batch stops.
                raise LakehouseError(f"{plan.path}: cannot be read to its end ({copy.error}); the batch is not committed")
            check_line_count(plan.path, copy.lines, "lines read", _file_lines(plan))
            lines[plan.index] = copy.lines
    text_df = spark.read.option("lineSep", "\n").text(str(copy_path))
    lines_df = to_numbered_lines_of_files(text_df, {plan.index: plan.source for plan in plans})
    summary = _stage_plans_lines(settings, plans, scratch / dict(FAMILIES)[plans[0].family] / name, lines_df)
    for plan in plans:
        staged_lines = sum(int(r.rows) for r in summary if int(r.file_index) == plan.index)
        check_line_count(plan.path, staged_lines, "lines staged", lines[plan.index])


def _file_order(path: Location, summary: list, digest: FileDigest) -> list[tuple[int, int]] | None:
    """The read partitions of a text-read file as (partition, rows) in file order; None if unverifiable."""
    parts = [(int(r.partition), int(r.rows), r.first_crc, r.last_crc) for r in summary if r.partition is not None]
    if len(parts) <= 1 and not digest.newlines:
        # A gzip file is read as one partition, front to back; checking its last line means decompressing it.
        return [(p[0], p[1]) for p in parts]
    with LineScanner(path, digest) as scanner:
        order = order_partitions(parts, scanner.crc_at)
    if order is None:
        return None
    rows = {p[0]: p[1] for p in parts}
    return [(partition, rows[partition]) for partition in order]


def has_staged_files(folder: Location) -> bool:
    """Whether a staging folder holds any Parquet file (writing no rows may write no file)."""
    return storage_for(folder).has_files(folder, ".parquet")


def _size(plan: FilePlan) -> int:
    """The size in bytes of a plan's file."""
    stored = storage_for(plan.path).stat(plan.path)
    return stored.size if stored else 0
