"""Input lines as DataFrames, and their line numbers: a text read's rows put back in file order.

A line DataFrame has the columns of LINE_COLUMNS: `value` is one input line (one record), split at line
feeds only (a carriage return before one is dropped), as `pipelines.batch.landing.files` numbers lines in
Python. For a text read of one file, `mid` (monotonically_increasing_id) orders the lines WITHIN each read
partition, and `line_crc` and `line_bytes` (CRC-32 and length of the line's bytes as stored, carriage
return and byte order mark included) let `order_partitions` find where each partition starts in the file
(the embedded engine does not always number a file's partitions in file order) from a few bytes at the
partitions' bounds; `line_number` is set instead when the reader numbered the lines itself.
`bronze.records` parses these lines.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

LINE_COLUMNS = ("file_index", "source_file", "mid", "line_crc", "line_bytes", "line_number", "value")

_PARTITION_BITS = 33  # monotonically_increasing_id(): partition index above bit 33, row below


def to_lines(text_df: DataFrame, file_index: int, source_file: str) -> DataFrame:
    """Return the lines of ONE file read as text split at line feeds, tagged with the file, a row id and a CRC.

    The row id (`mid`) increases with the line within each read partition; `with_line_numbers` turns it
    into a line number once the partitions are put in file order (`order_partitions`).

    Args:
        text_df: `spark.read.option("lineSep", "\\n").text(path)` of a single file (column `value`).
        file_index: the file's position in the batch.
        source_file: the file's path as recorded in provenance columns.
    """
    stored = F.col("value").cast("binary")
    return text_df.select(
        F.lit(file_index).cast("int").alias("file_index"),
        F.lit(source_file).alias("source_file"),
        F.monotonically_increasing_id().alias("mid"),
        F.crc32(stored).alias("line_crc"),
        F.octet_length(stored).cast("bigint").alias("line_bytes"),
        F.lit(None).cast("bigint").alias("line_number"),
        _without_byte_order_mark(_without_carriage_return(F.col("value"))).alias("value"),
    )


def to_numbered_lines(text_df: DataFrame, file_index: int, source_file: str) -> DataFrame:
    """Return the lines of a file written as `<line number>\\t<record>` (converted input), tagged.

    Args:
        text_df: `spark.read.text` of the converted file.
        file_index: the original file's position in the batch.
        source_file: the original file's path.
    """
    return text_df.select(
        F.lit(file_index).cast("int").alias("file_index"),
        F.lit(source_file).alias("source_file"),
        *_numbered_line_columns("value"),
    )


def _numbered_line_columns(line: str) -> list[Column]:
    """mid, line_crc, line_number and value of the `<line number>\\t<record>` text in column `line`."""
    return [
        F.lit(None).cast("bigint").alias("mid"),
        F.lit(None).cast("bigint").alias("line_crc"),
        F.lit(None).cast("bigint").alias("line_bytes"),
        F.substring_index(F.col(line), "\t", 1).cast("bigint").alias("line_number"),
        _without_byte_order_mark(_after_first_tab(line)).alias("value"),
    ]


def _after_first_tab(column: str) -> Column:
    return F.expr(f"substr({column}, instr({column}, '\t') + 1)")


def _without_carriage_return(line: Column) -> Column:
    """The line without the carriage return of a CRLF line break (lines are split at the line feed)."""
    return F.when(line.endswith("\r"), line.substr(F.lit(1), F.length(line) - 1)).otherwise(line)


def _without_byte_order_mark(line: Column) -> Column:
    """The line without a leading U+FEFF: editors on Windows start UTF-8 files with it, outside the record."""
    return F.when(line.startswith("\ufeff"), F.substring(line, 2, 1 << 30)).otherwise(line)


def to_partition_summary(staged_df: DataFrame) -> DataFrame:
    """Summarize staged rows per (file_index, read partition): rows, bytes, the first and last line, counts.

    Converted (numbered) input has no read partitions: its rows form one group with a null partition.

    Returns:
        file_index, partition, rows, bytes (of the lines as stored, each with its line feed), first_crc,
        first_bytes, last_crc, last_bytes (CRC-32 and length of the first and last line), records_read
        (non-blank), records_quarantined.
    """
    return staged_df.groupBy("file_index", F.shiftright(F.col("mid"), _PARTITION_BITS).alias("partition")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.col("line_bytes") + 1).alias("bytes"),
        F.min_by("line_crc", "mid").alias("first_crc"),
        F.min_by("line_bytes", "mid").alias("first_bytes"),
        F.max_by("line_crc", "mid").alias("last_crc"),
        F.max_by("line_bytes", "mid").alias("last_bytes"),
        F.sum(F.when(~F.col("blank"), 1).otherwise(0)).cast("bigint").alias("records_read"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).cast("bigint").alias("records_quarantined"),
    )


@dataclass(frozen=True)
class ReadPartition:
    """One read partition of a text-read file, from its summary (`to_partition_summary`).

    Attributes:
        partition: the engine's number for it.
        rows: its lines.
        bytes: the bytes of its lines as stored, each with its line feed.
        first_crc: CRC-32 of its first line's bytes (without the line feed).
        first_bytes: that line's length in bytes.
        last_crc: CRC-32 of its last line's bytes.
        last_bytes: that line's length in bytes.
    """

    partition: int
    rows: int
    bytes: int
    first_crc: int
    first_bytes: int
    last_crc: int
    last_bytes: int


def order_partitions(
    partitions: Sequence[ReadPartition], read_at: Callable[[int, int], bytes], size: int
) -> list[int] | None:
    """Put the read partitions of one file in file order, checking each against the file's bytes at its bounds.

    The partitions of a text read are consecutive runs of lines; the engine may number them in another
    order. Starting at byte 0, the partition whose first line is the file's bytes there comes next (its
    last line, before its end, too), and the next one starts where its bytes end. Only the bytes of the
    lines at the partitions' bounds are read, not the file.

    Args:
        partitions: the non-empty partitions of one file.
        read_at: `read_at(offset, length)` gives up to `length` bytes of the file from `offset` (fewer at
            its end).
        size: the file's size in bytes.

    Returns:
        The partition numbers in file order, or None when the partitions do not tile the file's bytes
        (the caller then numbers the lines itself).
    """
    remaining = sorted(partitions, key=lambda p: p.partition)
    order: list[int] = []
    start = 0
    while remaining:
        head = read_at(start, max(p.first_bytes for p in remaining) + 1)
        candidates = [p for p in remaining if _is_line(head[: p.first_bytes + 1], p.first_bytes, p.first_crc)]
        matching = [p for p in candidates if _ends_with_its_last_line(p, start, read_at)]
        if len(matching) != 1:
            return None
        order.append(matching[0].partition)
        remaining.remove(matching[0])
        start += matching[0].bytes
    # Every line ends with a line feed, but the file's last line may end the file instead.
    return order if start in (size, size + 1) else None


def bound_reads(partitions: Sequence[ReadPartition]) -> list[tuple[int, int]]:
    """The (offset, length) reads `order_partitions` makes when the partitions' numbers are their file order.

    Engines usually number a file's read partitions in file order, so these reads can be made ahead, side
    by side; each head read is as long as the longest first line, so it serves any shorter one at its offset.
    """
    ordered = sorted(partitions, key=lambda p: p.partition)
    head = max((p.first_bytes for p in ordered), default=0) + 1
    reads: list[tuple[int, int]] = []
    start = 0
    for partition in ordered:
        reads.append((start, head))
        reads.append(_last_line_read(partition, start))
        start += partition.bytes
    return reads


def _ends_with_its_last_line(partition: ReadPartition, start: int, read_at: Callable[[int, int], bytes]) -> bool:
    return _is_line(read_at(*_last_line_read(partition, start)), partition.last_bytes, partition.last_crc)


def _last_line_read(partition: ReadPartition, start: int) -> tuple[int, int]:
    """(offset, length) of a partition's last line and the byte after it, for the partition starting at `start`."""
    return start + partition.bytes - 1 - partition.last_bytes, partition.last_bytes + 1


def _is_line(stored: bytes, length: int, crc: int) -> bool:
    """Whether `stored` is a line of `length` bytes with this CRC, followed by a line feed or the file's end."""
    return len(stored) >= length and zlib.crc32(stored[:length]) == crc and stored[length:] in (b"\n", b"")


# The columns of a batch's partition offsets (what `line_offsets` lists and `with_line_numbers` joins).
OFFSET_COLUMNS = "file_index int, partition bigint, lines_before bigint"


def line_offsets(ordered: Mapping[int, Sequence[tuple[int, int]]]) -> list[tuple[int, int, int]]:
    """Return, per file and read partition, how many lines of the file come before that partition.

    Args:
        ordered: file_index -> [(partition, rows), ...] in FILE order (see `order_partitions`).

    Returns:
        (file_index, partition, lines before it) rows, of OFFSET_COLUMNS.
    """
    offsets: list[tuple[int, int, int]] = []
    for file_index, parts in ordered.items():
        seen = 0
        for partition, rows in parts:
            offsets.append((int(file_index), int(partition), seen))
            seen += int(rows)
    return offsets


def with_line_numbers(staged_df: DataFrame, offsets_df: DataFrame | None) -> DataFrame:
    """Fill `line_number` of text-read rows from their row id and the partition offsets (1-based).

    The offsets come as a table joined to the rows, not as literals: a plan that carried one literal per
    file and partition grew with the batch (docs/scaling.md: plans that do not grow with the data).
    Rows that already carry a line number (converted input) keep it.

    Args:
        staged_df: staged rows with `file_index`, `mid` and `line_number`.
        offsets_df: rows of OFFSET_COLUMNS (`line_offsets`); None when no row was read as text.
    """
    if offsets_df is None:
        return staged_df.withColumn("line_number", F.col("line_number"))
    partition = F.shiftright(F.col("mid"), _PARTITION_BITS)
    keyed_df = staged_df.withColumn("_partition", F.when(F.col("line_number").isNull(), partition))
    joined_df = keyed_df.join(
        F.broadcast(offsets_df.select(
            F.col("file_index").alias("_offset_file"), F.col("partition").alias("_offset_partition"), "lines_before"
        )),  # fmt: skip
        (F.col("file_index") == F.col("_offset_file")) & (F.col("_partition") == F.col("_offset_partition")),
        "left",
    )
    within = F.col("mid") - F.shiftleft(F.col("_partition"), _PARTITION_BITS)
    computed = (F.col("lines_before") + within + F.lit(1)).cast("bigint")
    numbered = F.when(F.col("line_number").isNull(), computed).otherwise(F.col("line_number"))
    return joined_df.withColumn("line_number", numbered).select(*staged_df.columns)
