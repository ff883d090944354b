"""The published stream a subscription follows: its batches in order, its cursor, dead letters, and the events
selected for it in delivery order.

Order of delivery. Events become deliverable once their batch is published for the subscription
(`Subscription.gate_stage`: publish_audit has recorded it, or publish_openmetadata for a subscription
that reads ChangeEvents); batches are delivered in the order refine finished them, and a subscription
only takes the batches refine finished after its `start_after` (by default the newest batch refined
when it was added). Inside a batch the selected events are in a fixed order, so "the first N selected
events of batch B" names the same events on every run: that is what a cursor row records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from conf.tables import (
    AUDIT_EVENTS,
    ENTITY_CHANGE_EVENTS,
    OPENMETADATA_CHANGE_EVENTS,
    STAGE_PROGRESS,
    SUBSCRIPTION_CURSORS,
    SUBSCRIPTION_DEAD_LETTERS,
    table_spec,
)
from gold.openmetadata import to_change_event_json
from gold.scopes import newest_domain_query
from gold.subscriptions import filter_change_events, filter_openmetadata_events
from pipelines.privacy.display import json_texts_with_identities, with_identities
from pipelines.runtime.io import append, insert_missing, read_table, retry_commit
from pipelines.subscriptions.store import AUDIT_GATE, OPENMETADATA_GATE, Subscription, as_utc

# The order of the events inside one batch: per entity it is the order of its versions.
ECE_ORDER = ("event_time", "source_order_key", "event_id")
OPENMETADATA_ORDER = ("timestamp", "entity_id", "entity_sequence", "id")


@dataclass(frozen=True)
class StreamBatch:
    """One refined batch: its id, when refine finished it, and when each publish gate stage did (absent: not yet)."""

    batch_id: str
    refined_at: datetime
    published_at: Mapping[str, datetime]

    def published_for(self, subscription: Subscription) -> datetime | None:
        """When the batch became deliverable to `subscription` (its gate stage recorded it); None: not yet."""
        return self.published_at.get(subscription.gate_stage)


@dataclass(frozen=True)
class Cursor:
    """How far a subscription has got: batches done, and events done of the batches begun."""

    complete: frozenset[str]
    offsets: Mapping[str, int]
    delivered: int


@dataclass(frozen=True)
class DeliveryItem:
    """One event ready to send: its stable id, its entity, and its serialized form in the payload format."""

    event_id: str
    entity_urn: str | None
    text: str


def published_stream(spark: SparkSession, settings: Settings) -> list[StreamBatch]:
    """Every refined batch with the times its publish gate stages recorded it, in the order refine finished them."""
    progress_df = read_table(spark, settings, STAGE_PROGRESS)
    refined_df = progress_df.filter(F.col("stage") == "refine").select("batch_id", F.col("processed_at").alias("refined_at"))
    gates = (AUDIT_GATE, OPENMETADATA_GATE)
    published_df = (
        progress_df.filter(F.col("stage").isin(*gates))
        .groupBy("batch_id")
        .agg(*[F.max(F.when(F.col("stage") == gate, F.col("processed_at"))).alias(gate) for gate in gates])
    )
    rows = refined_df.join(published_df, "batch_id").orderBy("refined_at", "batch_id").collect()
    return [
        StreamBatch(r.batch_id, as_utc(r.refined_at), {gate: as_utc(r[gate]) for gate in gates if r[gate] is not None})
        for r in rows
    ]


def read_cursor(spark: SparkSession, settings: Settings, subscription_id: str) -> Cursor:
    """A subscription's delivery progress, from its acknowledged cursor rows."""
    rows = (
        read_table(spark, settings, SUBSCRIPTION_CURSORS)
        .filter(F.col("subscription_id") == subscription_id)
        .groupBy("batch_id")
        .agg(
            F.max("batch_offset").alias("offset"),
            F.max(F.col("batch_complete").cast("int")).alias("complete"),
            F.sum("events_delivered").alias("delivered"),
        )
        .collect()
    )
    return Cursor(
        complete=frozenset(r.batch_id for r in rows if r.complete),
        offsets={r.batch_id: int(r.offset) for r in rows if not r.complete},
        delivered=sum(int(r.delivered or 0) for r in rows),
    )


def pending_batches(stream: Sequence[StreamBatch], subscription: Subscription, cursor: Cursor) -> list[StreamBatch]:
    """The batches published for a subscription (`Subscription.gate_stage`) that it has still to finish, oldest first."""
    start = subscription.start_after
    return [
        b
        for b in stream
        if (start is None or b.refined_at > start)
        and b.batch_id not in cursor.complete
        and b.published_for(subscription) is not None
    ]


def commit_cursor(
    spark: SparkSession,
    settings: Settings,
    subscription_id: str,
    batch_id: str,
    offset: int,
    *,
    complete: bool,
    delivered: int,
) -> None:
    """Record that the first `offset` selected events of a batch are done (after the receiver's 2xx)."""
    row_df = spark.createDataFrame(
        [(subscription_id, batch_id, int(offset), bool(complete), int(delivered), datetime.now(timezone.utc))],
        table_spec(SUBSCRIPTION_CURSORS).columns,
    )
    retry_commit(lambda: append(row_df, settings, SUBSCRIPTION_CURSORS))


def record_dead_letters(
    spark: SparkSession,
    settings: Settings,
    subscription: Subscription,
    batch_id: str,
    items: Sequence[DeliveryItem],
    *,
    status: int,
    error: str,
) -> None:
    """Keep events a receiver refused for good; recording the same events again adds nothing."""
    now = datetime.now(timezone.utc)
    rows = [
        (subscription.subscription_id, subscription.name, i.event_id, i.entity_urn, batch_id, int(status), error, i.text, now)
        for i in items
    ]
    insert_missing(
        spark,
        settings,
        SUBSCRIPTION_DEAD_LETTERS,
        spark.createDataFrame(rows, table_spec(SUBSCRIPTION_DEAD_LETTERS).columns),
        "t.subscription_id = s.subscription_id AND t.event_id = s.event_id",
        view_name=f"dead_letters_{subscription.subscription_id.replace('-', '')}",
    )


def dead_letter_counts(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Dead-lettered events per subscription id."""
    rows = read_table(spark, settings, SUBSCRIPTION_DEAD_LETTERS).groupBy("subscription_id").count().collect()
    return {r.subscription_id: int(r["count"]) for r in rows}


@contextlib.contextmanager
def selected_events(
    spark: SparkSession, settings: Settings, subscription: Subscription, batch_ids: Sequence[str]
) -> Iterator[DataFrame]:
    """The events of `batch_ids` a subscription selects, in delivery order (ChangeEvents for openmetadata).

    A domain-scoped subscription reads its entities' domains by `gold.scopes.newest_domain_query`, as
    every scoped read does, from a view of their audit rows dropped when the block ends: read the rows
    inside it.
    """
    events_df = read_table(spark, settings, ENTITY_CHANGE_EVENTS).filter(F.col("batch_id").isin(list(batch_ids)))
    change_events_df = read_table(spark, settings, OPENMETADATA_CHANGE_EVENTS).filter(F.col("batch_id").isin(list(batch_ids)))
    view = f"audit_rows_{subscription.subscription_id.replace('-', '')}" if subscription.filters.scope.domains else None
    if view is not None:
        # The domain of the entity whose aspect each change event wrote.
        entities_df = events_df.select(F.col("aspect_entity_urn").alias("entity_urn")).filter(F.col("entity_urn").isNotNull())
        audit_df = read_table(spark, settings, AUDIT_EVENTS).join(entities_df.distinct(), "entity_urn", "left_semi")
        audit_df.createOrReplaceTempView(view)
        domains_df = spark.sql(newest_domain_query(view).sql(dialect="spark"))
        events_df = events_df.join(
            domains_df.select(F.col("entity_urn").alias("aspect_entity_urn"), "domain"), on="aspect_entity_urn", how="left"
        )
    try:
        if subscription.format == "openmetadata":
            yield filter_openmetadata_events(change_events_df, events_df, subscription.filters).orderBy(*OPENMETADATA_ORDER)
        else:
            yield filter_change_events(events_df, change_events_df, subscription.filters).orderBy(*ECE_ORDER)
    finally:
        if view is not None:
            spark.catalog.dropTempView(view)


def pending_counts(
    spark: SparkSession, settings: Settings, subscription: Subscription, batches: Sequence[StreamBatch], cursor: Cursor
) -> dict[str, int]:
    """Events still to deliver per pending batch (those with none left out)."""
    if not batches:
        return {}
    with selected_events(spark, settings, subscription, [b.batch_id for b in batches]) as selected_df:
        rows = selected_df.groupBy("batch_id").count().collect()
    counts = {r.batch_id: int(r["count"]) - cursor.offsets.get(r.batch_id, 0) for r in rows}
    return {batch_id: n for batch_id, n in counts.items() if n > 0}


def load_items(
    spark: SparkSession, settings: Settings, subscription: Subscription, batch_id: str, link_base_url: str | None
) -> list[DeliveryItem]:
    """The events of one batch a subscription selects, in delivery order, serialized in its format."""
    from gold.subscriptions import to_ece_item, to_summary_line
    from gold.ece_documents import ece_document

    columns = [
        "event_id", "entity_urn", "entity_type", "category", "operation", "modifier", "parameters", "version",
        "actor", "event_time", "batch_id",
    ]
    with selected_events(spark, settings, subscription, [batch_id]) as ordered_df:
        if subscription.format == "openmetadata":
            # Delivered by the operator's process with the home's key store: people are sent as who they are.
            values = json_texts_with_identities(settings, [r.value for r in to_change_event_json(ordered_df).collect()])
            keys = ordered_df.select("id", "source_entity_urn").collect()
            return [DeliveryItem(k.id, k.source_entity_urn, v) for k, v in zip(keys, values, strict=True)]
        rows = with_identities(settings, [r.asDict() for r in ordered_df.select(*columns).collect()], annotate=False)
    if subscription.format == "slack":
        return [DeliveryItem(r["event_id"], r["entity_urn"], to_summary_line(r, link_base_url)) for r in rows]
    return [DeliveryItem(r["event_id"], r["entity_urn"], to_ece_item(r["event_id"], ece_document(r), r["batch_id"])) for r in rows]
