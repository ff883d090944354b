"""Input lines as DataFrames, and their line numbers: a text read's rows put back in file order.

A line DataFrame has the columns of LINE_COLUMNS: `value` is one input line (one record); for a text
read of one file, `mid` (monotonically_increasing_id) orders the lines WITHIN each read partition and
`line_crc` (CRC-32 of the line) lets `order_partitions` check which partition comes first in the file
(the embedded engine does not always number a file's partitions in file order); `line_number` is set
instead when the reader numbered the lines itself. `bronze.records` parses these lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

LINE_COLUMNS = ("file_index", "source_file", "mid", "line_crc", "line_number", "value")

_PARTITION_BITS = 33  # monotonically_increasing_id(): partition index above bit 33, row below
_FILE_KEY_FACTOR = 1 << 31


def to_lines(text_df: DataFrame, file_index: int, source_file: str) -> DataFrame:
    """Return the lines of ONE file read with `spark.read.text`, tagged with the file, a row id and a CRC.

    The row id (`mid`) increases with the line within each read partition; `with_line_numbers` turns it
    into a line number once the partitions are put in file order (`order_partitions`).

    Args:
        text_df: `spark.read.text(path)` of a single file (column `value`).
        file_index: the file's position in the batch.
        source_file: the file's path as recorded in provenance columns.
    """
    return text_df.select(
        F.lit(file_index).cast("int").alias("file_index"),
        F.lit(source_file).alias("source_file"),
        F.monotonically_increasing_id().alias("mid"),
        F.crc32(F.col("value").cast("binary")).alias("line_crc"),
        F.lit(None).cast("bigint").alias("line_number"),
        _without_byte_order_mark(F.col("value")).alias("value"),
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


def to_numbered_lines_of_files(text_df: DataFrame, sources: Mapping[int, str]) -> DataFrame:
    """Return the lines of several files written into one copy as `<file index>\\t<line number>\\t<record>`, tagged.

    Args:
        text_df: `spark.read.text` of the copy.
        sources: file index -> the original file's path, for every file in the copy.
    """
    index = F.substring_index(F.col("value"), "\t", 1).cast("int")
    return text_df.select(index.alias("file_index"), _after_first_tab("value").alias("numbered")).select(
        "file_index",
        _looked_up(F.col("file_index"), sorted(sources.items())).alias("source_file"),
        *_numbered_line_columns("numbered"),
    )


def _numbered_line_columns(line: str) -> list[Column]:
    """mid, line_crc, line_number and value of the `<line number>\\t<record>` text in column `line`."""
    return [
        F.lit(None).cast("bigint").alias("mid"),
        F.lit(None).cast("bigint").alias("line_crc"),
        F.substring_index(F.col(line), "\t", 1).cast("bigint").alias("line_number"),
        _without_byte_order_mark(_after_first_tab(line)).alias("value"),
    ]


def _after_first_tab(column: str) -> Column:
    return F.expr(f"substr({column}, instr({column}, '\t') + 1)")


def _without_byte_order_mark(line: Column) -> Column:
    """The line without a leading U+FEFF: editors on Windows start UTF-8 files with it, outside the record."""
    return F.when(line.startswith("\ufeff"), F.substring(line, 2, 1 << 30)).otherwise(line)


def to_partition_summary(staged_df: DataFrame) -> DataFrame:
    """Summarize staged rows per (file_index, read partition): rows, CRCs of the first and last line, counts.

    Converted (numbered) input has no read partitions: its rows form one group with a null partition.

    Returns:
        file_index, partition, rows, first_crc, last_crc, records_read (non-blank), records_quarantined.
    """
    return staged_df.groupBy("file_index", F.shiftright(F.col("mid"), _PARTITION_BITS).alias("partition")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.min_by("line_crc", "mid").alias("first_crc"),
        F.max_by("line_crc", "mid").alias("last_crc"),
        F.sum(F.when(~F.col("blank"), 1).otherwise(0)).cast("bigint").alias("records_read"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).cast("bigint").alias("records_quarantined"),
    )


def order_partitions(
    partitions: Sequence[tuple[int, int, int, int]], crc_at: Callable[[int], int | None]
) -> list[int] | None:
    """Put the read partitions of one file in file order, checking each against the file's own lines.

    The partitions of a text read are consecutive runs of lines; the engine may number them in another
    order. Starting at line 1, the partition whose first line has the CRC of the file's line there comes
    next, and its last line must match too. Ties (the same first line) are broken by the last line.

    Args:
        partitions: (partition, rows, first_crc, last_crc) for each non-empty partition.
        crc_at: the CRC-32 of the file's line n (1-based), None past the end; called with line numbers
            that never decrease.

    Returns:
        The partition ids in file order, or None when the partitions do not tile the file's lines
        (the caller then numbers the lines itself).
    """
    remaining = sorted(partitions, key=lambda p: p[1])
    order: list[int] = []
    start = 1
    while remaining:
        first = crc_at(start)
        candidates = [p for p in remaining if p[2] == first]
        # Check last lines in increasing line order, as crc_at only moves forward.
        matching = [p for p in candidates if crc_at(start + p[1] - 1) == p[3]]
        if first is None or len(matching) != 1:
            return None
        chosen = matching[0]
        order.append(chosen[0])
        remaining.remove(chosen)
        start += chosen[1]
    # The file must end where the last partition does.
    return order if crc_at(start) is None else None


def line_offsets(ordered: Mapping[int, Sequence[tuple[int, int]]]) -> dict[int, int]:
    """Return, per (file, read partition) key, how many lines of the file come before that partition.

    Args:
        ordered: file_index -> [(partition, rows), ...] in FILE order (see `order_partitions`).

    Returns:
        `file_index * 2**31 + partition` -> lines before it (what `with_line_numbers` looks up).
    """
    offsets: dict[int, int] = {}
    for file_index, parts in ordered.items():
        seen = 0
        for partition, rows in parts:
            offsets[int(file_index) * _FILE_KEY_FACTOR + int(partition)] = seen
            seen += int(rows)
    return offsets


def with_line_numbers(staged_df: DataFrame, offsets: Mapping[int, int]) -> DataFrame:
    """Fill `line_number` of text-read rows from their row id and the partition offsets (1-based).

    Rows that already carry a line number (converted input) keep it.
    """
    if not offsets:
        return staged_df.withColumn("line_number", F.col("line_number"))
    partition = F.shiftright(F.col("mid"), _PARTITION_BITS)
    key = F.col("file_index").cast("bigint") * F.lit(_FILE_KEY_FACTOR) + partition
    within = F.col("mid") - F.shiftleft(partition, _PARTITION_BITS)
    computed = _looked_up(key, sorted(offsets.items())) + within + F.lit(1)
    return staged_df.withColumn(
        "line_number", F.when(F.col("line_number").isNull(), computed.cast("bigint")).otherwise(F.col("line_number"))
    )


def _looked_up(key: Column, pairs: Sequence[tuple[int, int | str]]) -> Column:
    """The value paired with `key` in `pairs` (sorted by key), as a balanced tree of comparisons.

    A literal map's lookup cost 0.9 s per 1M rows; this costs log2(len(pairs)) comparisons per row.
    """
    if len(pairs) == 1:
        return F.when(key == F.lit(pairs[0][0]), F.lit(pairs[0][1]))
    middle = len(pairs) // 2
    return F.when(key < F.lit(pairs[middle][0]), _looked_up(key, pairs[:middle])).otherwise(
        _looked_up(key, pairs[middle:])
    )
