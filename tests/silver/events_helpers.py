"""Run the silver pure transforms on hand-made snapshot histories and collect the exported ECE documents."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from gold.ece_documents import ece_document
from silver.events import to_change_events
from silver.sequencing import to_pairs, to_sequenced_batch
from silver.state import to_empty_state
from tests.silver.bronze_rows import bronze_df, to_bronze_rows


def change_event_rows(
    spark: SparkSession,
    records: Sequence[Mapping[str, Any]],
    owner_category: str = "OWNER",
    aspect_names: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """The silver change event rows of `records` landed as one batch and refined from an empty state.

    `aspect_names` is passed on to `to_change_events` (None: every generator runs).
    """
    batch_df = bronze_df(spark, to_bronze_rows(records, "b000"))
    pairs_df = to_pairs(to_sequenced_batch(batch_df, to_empty_state(batch_df)))
    # A small input: collect the pairs once so every generator reads them without recomputing the windows.
    pairs_df = spark.createDataFrame(pairs_df.collect(), pairs_df.schema)
    return [r.asDict(recursive=True) for r in to_change_events(pairs_df, owner_category, aspect_names=aspect_names).collect()]


def documents(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The exported ECE V1 JSON object of each event row."""
    return [ece_document(r) for r in rows]
