"""DEPRECATION events from `deprecation`: MODIFY only when the deprecated flag flips."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.aspects import blank_to_null
from silver.events.common import filter_aspects, to_events, with_parsed

ASPECTS = ("deprecation",)


def to_deprecation_events(pairs_df: DataFrame) -> DataFrame:
    """Return DEPRECATION MODIFY events: modifier and status DEPRECATED or ACTIVE, plus note and decommissionTime
    of the new aspect when they are set. A rewrite that keeps the flag emits nothing.
    """
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "deprecation")
    was = F.coalesce(F.col("prev.deprecated"), F.lit(False))
    now = F.coalesce(F.col("new.deprecated"), F.lit(False))
    flips_df = parsed_df.filter(was != now).withColumn(
        "status", F.when(now, F.lit("DEPRECATED")).otherwise(F.lit("ACTIVE"))
    )
    return to_events(
        flips_df,
        category="DEPRECATION",
        operation="MODIFY",
        modifier=F.col("status"),
        parameters={
            "status": F.col("status"),
            "note": blank_to_null(F.col("new.note")),
            "decommissionTime": F.col("new.decommissionTime"),
        },
        old_value=F.to_json("prev"),
        new_value=F.to_json("new"),
    )
