"""The impact of changes across lineage, read from gold.lineage_edges and silver.entity_change_events."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from gold.impact import COLUMN_KIND, ChangeEvent, Edge, ImpactRow, impact
from gold.lineage import to_current_edges
from pipelines.runtime.io import read_table


def impact_of(
    spark: SparkSession, settings: Settings, urn: str, *, direction: str, depth: int, start_ms: int, end_ms: int
) -> list[ImpactRow]:
    """The change events of [start_ms, end_ms) on entities connected to `urn` at their time (`gold.impact.impact`).

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        urn: the entity asked about.
        direction: upstream or downstream.
        depth: the most hops.
        start_ms: window start, included.
        end_ms: window end, excluded.

    Raises:
        InputError: naming a urn, direction, depth or window that is not valid.
    """
    if not urn.startswith("urn:li:"):
        raise InputError(f"urn: {urn!r} is not a DataHub urn (urn:li:<type>:<id>)")
    edges_df = to_current_edges(read_table(spark, settings, "gold.lineage_edges")).filter(
        (F.col("edge_kind") != COLUMN_KIND)
        & (F.col("valid_from_time") < F.lit(end_ms))
        & (F.col("valid_to_time").isNull() | (F.col("valid_to_time") > F.lit(start_ms)))
    )
    edges = [
        Edge(r.upstream_urn, r.downstream_urn, r.valid_from_time, r.valid_to_time)
        for r in edges_df.select("upstream_urn", "downstream_urn", "valid_from_time", "valid_to_time").collect()
    ]
    events_df = read_table(spark, settings, "silver.entity_change_events").filter(
        (F.col("event_time") >= F.lit(start_ms)) & (F.col("event_time") < F.lit(end_ms))
    )
    # An event belongs to the entity whose aspect was written (a schema field's to its dataset).
    owner = F.coalesce(F.col("aspect_entity_urn"), F.col("entity_urn")).alias("entity_urn")
    events = [
        ChangeEvent(r.event_id, r.entity_urn, r.event_time, r.category, r.operation, r.actor)
        for r in events_df.select("event_id", owner, "event_time", "category", "operation", "actor").collect()
    ]
    return impact(urn, edges, events, direction=direction, depth=depth, start_ms=start_ms, end_ms=end_ms)
