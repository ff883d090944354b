"""A landing batch's staged rows: which land and which go to quarantine, duplicates dropped, provenance added.

Pure DataFrame -> DataFrame transforms over the staged rows of `bronze.records` (STAGED_COLUMNS plus a
family's fields), numbered by `bronze.lines`.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from bronze.records import is_landable


def filter_landable(staged_df: DataFrame) -> DataFrame:
    """Keep the records that passed validation (not blank, no reason)."""
    return staged_df.filter(is_landable())


def filter_quarantined(staged_df: DataFrame) -> DataFrame:
    """Keep the records that failed validation."""
    return staged_df.filter(F.col("reason").isNotNull())


def to_duplicate_hashes(landable_df: DataFrame) -> DataFrame:
    """Return the record hashes that occur more than once among landable rows (column `record_hash`)."""
    return landable_df.groupBy("record_hash").count().filter(F.col("count") > 1).select("record_hash")


def _by_occurrence() -> WindowSpec:
    """The copies of each record hash in the order that makes one of them the first: by file, then line.

    Built per call: classic Spark needs a running session to build a window.
    """
    return Window.partitionBy("record_hash").orderBy("file_index", "line_number")


def to_repeated_lines(landable_df: DataFrame) -> DataFrame:
    """Return the (file_index, line_number, record_hash) of every landable row whose record hash an earlier row has.

    Earlier: by file, then line. Only the three key columns are read and sorted, so a batch of wide
    rows with a few repeats costs a narrow aggregation, not a sort of every row (`filter_out_lines`
    then drops them).
    """
    lines_df = landable_df.select("record_hash", "file_index", "line_number")
    return (
        lines_df.join(to_duplicate_hashes(lines_df), "record_hash", "left_semi")
        .withColumn("_occurrence", F.row_number().over(_by_occurrence()))
        .filter("_occurrence > 1")
        .select("file_index", "line_number", "record_hash")
    )


def filter_out_lines(landable_df: DataFrame, lines_df: DataFrame, *, shared_lines: bool = False) -> DataFrame:
    """Drop the rows at the (file_index, line_number, record_hash) of `lines_df` (an anti-join with a few rows).

    A row without a line number is kept: nothing names it.

    Args:
        landable_df: the batch's landable rows.
        lines_df: the rows to drop (`to_repeated_lines`, staged: a small table the wide rows are joined with).
        shared_lines: whether several records can share a line (the aspects of one MCE, from file-sink
            or mce files): then the hash tells them apart; otherwise the line alone names the row.
    """
    keys = ["file_index", "line_number", *(["record_hash"] if shared_lines else [])]
    return landable_df.join(F.broadcast(lines_df.select(*keys).distinct()), keys, "left_anti")


def drop_batch_duplicates(landable_df: DataFrame) -> DataFrame:
    """Keep the first occurrence (by file, then line) of each record hash within the batch.

    A sort of every row: for batches whose repeated rows are not all numbered (`filter_out_lines` cannot name them).
    """
    return (
        landable_df.withColumn("_occurrence", F.row_number().over(_by_occurrence()))
        .filter("_occurrence = 1")
        .drop("_occurrence")
    )


def drop_landed_duplicates(landable_df: DataFrame, landed_hashes_df: DataFrame) -> DataFrame:
    """Drop the rows whose record hash is already landed.

    Args:
        landable_df: this batch's landable rows.
        landed_hashes_df: the `record_hash` column of the bronze rows that could match.
    """
    return landable_df.join(landed_hashes_df.select("record_hash"), "record_hash", "left_anti")


def with_batch(df: DataFrame, batch_id: str, landed_at: datetime, time_column: str = "landed_at") -> DataFrame:
    """Add the batch provenance columns: `batch_id`, the landing time (UTC) and its `land_date`."""
    return df.withColumns(
        {
            "batch_id": F.lit(batch_id),
            time_column: F.lit(landed_at).cast("timestamp"),
            "land_date": F.lit(landed_at.date()),
        }
    )


def to_quarantine_rows(quarantined_df: DataFrame, batch_id: str, quarantined_at: datetime) -> DataFrame:
    """Shape quarantined records (staged rows, or rows with raw_text/source_file/line_number/source_kind/reason)
    as bronze.quarantine rows; `field` is the field the reason names."""
    shaped_df = quarantined_df.select(
        "raw_text",
        "source_file",
        "line_number",
        F.col("source_kind").alias("kind"),
        "reason",
        F.substring_index(F.col("reason"), ":", 1).alias("field"),
    )
    return with_batch(shaped_df, batch_id, quarantined_at, time_column="quarantined_at")
