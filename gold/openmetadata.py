"""OpenMetadata ChangeEvents projected from silver Entity Change Events: one event per entity change set.

The rules are the ones documented in docs/openmetadata.md: entity types and names are in
`gold.openmetadata_entities`, the changeDescription in `gold.openmetadata_changes`, and the versions,
the events and the eventFilter here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from conf.errors import RequestError
from gold.openmetadata_changes import to_change_sets
from gold.openmetadata_entities import (
    CREATED,
    DELETED,
    EVENT_TYPES,
    OPENMETADATA_ENTITY_TYPES,
    to_entity_json,
    with_openmetadata_entity,
)

EVENT_FILTER_KEYS = ("eventType", "entities")

# Versions are kept as integer tenths while computed so that 0.1 steps never drift.
_FIRST_VERSION_TENTHS = 1
_MINOR_STEP_TENTHS = 1
_MAJOR_STEP_TENTHS = 10
VERSION_TYPE = "decimal(10,1)"


def to_last_versions(published_df: DataFrame) -> DataFrame:
    """Return the last published version of each entity.

    Args:
        published_df: rows of gold.openmetadata_change_events published before the events being
            projected (a re-run of a batch must leave that batch's own rows out, so that it continues
            from the same version as the first run did).

    Returns:
        entity_id, last_sequence, last_version (DECIMAL(10,1)), last_event_type (whether the entity was
        hard-deleted last decides whether its next creation restarts at 0.1).
    """
    return (
        published_df.groupBy("entity_id")
        .agg(F.max(F.struct("entity_sequence", "current_version", "event_type")).alias("last"))
        .select(
            "entity_id",
            F.col("last.entity_sequence").alias("last_sequence"),
            F.col("last.current_version").alias("last_version"),
            F.col("last.event_type").alias("last_event_type"),
        )
    )


def _to_version(tenths: Column) -> Column:
    return (tenths.cast("decimal(12,1)") / F.lit(10)).cast(VERSION_TYPE)


def with_versions(
    change_sets_df: DataFrame, last_versions_df: DataFrame, batch_order: Sequence[str] = ()
) -> DataFrame:
    """Add entity_sequence, previous_version and current_version, continuing each entity's history.

    Change sets of an entity are ordered by batch (in `batch_order`), then (timestamp,
    source_order_key), a creation first among equals, then change_set_id: projecting several batches
    at once numbers versions exactly as projecting them one after the other does. An entity starts at
    0.1; a creation with no history before it (none in this run, none published) or right after a hard
    delete is 0.1 -> 0.1; a hard delete keeps the version (the entity is gone); a change set that
    removes a column or changes a column's type adds 1.0 (1.1 -> 2.1); any other, including a creation
    that arrives after other change sets of its entity, adds 0.1.

    Args:
        change_sets_df: the output of `to_change_sets`.
        last_versions_df: the output of `to_last_versions` (entity_id, last_sequence, last_version,
            last_event_type).
        batch_order: the batch ids in processing order; empty: one batch (or order by time alone).
    """
    is_created = F.col("event_type") == CREATED
    batch_rank = (
        F.array_position(F.array(*(F.lit(b) for b in batch_order)), F.col("batch_id")) if batch_order else F.lit(0)
    )
    order = [
        batch_rank,
        F.col("timestamp"),
        F.col("source_order_key"),
        F.when(is_created, F.lit(0)).otherwise(F.lit(1)),
        F.col("change_set_id"),
    ]
    by_entity = Window.partitionBy("entity_id").orderBy(*order)
    running = by_entity.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # The change set before this one: earlier in this run, else the last published one (null: none).
    previous_type = F.coalesce(F.lag("event_type").over(by_entity), F.col("last_event_type"))
    # Only a creation with nothing before it, or after a hard delete, starts a history at 0.1: a
    # creation that arrives after other change sets (a flow's key after its jobs' changes) continues.
    is_restart = is_created & (previous_type.isNull() | (previous_type == DELETED))
    restart = F.col("restart")
    step = (
        F.when(restart | (F.col("event_type") == DELETED), F.lit(0))
        .when(F.col("major_change"), F.lit(_MAJOR_STEP_TENTHS))
        .otherwise(F.lit(_MINOR_STEP_TENTHS))
    )
    last_tenths = (F.col("last_version") * F.lit(10)).cast("bigint")
    # Steps are never negative, so the running sum at the latest restart is a running max: one window
    # numbers the whole history, a restart starting it again at 0.1.
    restarted_at = F.max(F.when(restart, F.col("steps"))).over(running)
    current = F.when(
        F.col("segment") == 0, F.coalesce(last_tenths, F.lit(_FIRST_VERSION_TENTHS)) + F.col("steps")
    ).otherwise(F.lit(_FIRST_VERSION_TENTHS) + F.col("steps") - restarted_at)
    return (
        change_sets_df.join(last_versions_df, "entity_id", "left")
        .withColumn("restart", is_restart)
        .withColumn("step", step)
        .withColumn("steps", F.sum("step").over(running))
        .withColumn("segment", F.sum(restart.cast("int")).over(running))
        .withColumn("current_tenths", current)
        .withColumn("entity_sequence", F.coalesce(F.col("last_sequence"), F.lit(0)) + F.row_number().over(by_entity))
        .withColumn("current_version", _to_version(F.col("current_tenths")))
        .withColumn("previous_version", _to_version(F.col("current_tenths") - F.col("step")))
        .drop(
            "restart", "step", "steps", "segment", "current_tenths", "last_sequence", "last_version", "last_event_type"
        )
    )


def to_openmetadata_events(
    events_df: DataFrame, published_df: DataFrame, batch_order: Sequence[str] = ()
) -> DataFrame:
    """Project silver change events onto OpenMetadata ChangeEvents, continuing the published versions.

    Args:
        events_df: rows with the columns of silver.entity_change_events (one or more batches).
        published_df: the ChangeEvents published before these events (gold.openmetadata_change_events
            without the rows of the batches being projected).
        batch_order: the batch ids of `events_df` in processing order (see `with_versions`).

    Returns:
        Rows with the columns of gold.openmetadata_change_events; changeDescription is null for
        entityCreated and entityDeleted, entity is set for entityCreated only.
    """
    # Only the entities these events touch need their last published version: aggregating the whole
    # published table would make every batch, however small, cost as much as the table's history.
    entities_df = with_openmetadata_entity(events_df).filter(F.col("om_entity_type").isNotNull()).select("entity_id")
    touched_df = published_df.join(entities_df.distinct(), "entity_id", "left_semi")
    versioned_df = with_versions(to_change_sets(events_df), to_last_versions(touched_df), batch_order)
    no_description = F.col("event_type").isin(CREATED, DELETED)
    description = F.concat(
        F.lit('{"fieldsAdded":'),
        F.col("fields_added"),
        F.lit(',"fieldsUpdated":'),
        F.col("fields_updated"),
        F.lit(',"fieldsDeleted":'),
        F.col("fields_deleted"),
        F.lit(',"previousVersion":'),
        F.col("previous_version").cast("string"),
        F.lit("}"),
    )
    return (
        versioned_df.withColumn("change_description", F.when(~no_description, description))
        .withColumn("entity", F.when(F.col("event_type") == CREATED, to_entity_json()))
        .withColumn("event_date", F.to_date((F.col("timestamp") / 1000).cast("timestamp")))
        .select(
            "id",
            "event_type",
            "entity_type",
            "entity_id",
            "entity_fqn",
            "previous_version",
            "current_version",
            "user_name",
            "timestamp",
            "change_description",
            "entity",
            "entity_urn",
            "source_entity_urn",
            "source_entity_type",
            "aspect_name",
            "change_set_id",
            "entity_sequence",
            "major_change",
            "batch_id",
            "event_date",
        )
    )


def to_change_event_json(published_df: DataFrame) -> DataFrame:
    """Serialize ChangeEvents as the spec's JSON, one text per row in column `value`.

    Null optional keys are left out; changeDescription and entity are embedded as JSON objects
    (changeDescription never for entityCreated/entityDeleted, entity only for entityCreated).
    """
    base = F.to_json(
        F.struct(
            F.col("id"),
            F.col("event_type").alias("eventType"),
            F.col("entity_type").alias("entityType"),
            F.col("entity_id").alias("entityId"),
            F.col("entity_fqn").alias("entityFullyQualifiedName"),
            F.col("previous_version").alias("previousVersion"),
            F.col("current_version").alias("currentVersion"),
            F.col("user_name").alias("userName"),
            F.col("timestamp"),
        )
    )
    description = F.when(~F.col("event_type").isin(CREATED, DELETED), F.col("change_description"))
    entity = F.when(F.col("event_type") == CREATED, F.col("entity"))
    return published_df.select(
        F.concat(
            F.regexp_extract(base, r"^(\{.*)\}$", 1),
            F.coalesce(F.concat(F.lit(',"changeDescription":'), description), F.lit("")),
            F.coalesce(F.concat(F.lit(',"entity":'), entity), F.lit("")),
            F.lit("}"),
        ).alias("value")
    )


def parse_event_filter(event_filter: Any) -> tuple[str, tuple[str, ...]]:
    """Check an OpenMetadata eventFilter `{eventType, entities}` and return (eventType, entities).

    Args:
        event_filter: the decoded JSON object; `entities` empty or absent means every entity type.

    Raises:
        RequestError: for a value that is not an object, an unknown key, a missing or unknown eventType,
            or entities that are not a list of known OpenMetadata entity type names.
    """
    if not isinstance(event_filter, Mapping):
        raise RequestError(f"eventFilter: {event_filter!r} is not a JSON object")
    unknown = sorted(str(k) for k in event_filter if k not in EVENT_FILTER_KEYS)
    if unknown:
        raise RequestError(f"eventFilter: unknown key(s) {unknown} (allowed: {', '.join(EVENT_FILTER_KEYS)})")
    if "eventType" not in event_filter:
        raise RequestError("eventFilter.eventType: required (one of " + ", ".join(EVENT_TYPES) + ")")
    event_type = event_filter["eventType"]
    if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
        raise RequestError(f"eventFilter.eventType: {event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    entities = event_filter.get("entities")
    if entities is None:
        return event_type, ()
    if not isinstance(entities, list):
        raise RequestError(f"eventFilter.entities: {entities!r} is not an array of entity type names")
    for entity in entities:
        if not isinstance(entity, str) or entity not in OPENMETADATA_ENTITY_TYPES:
            raise RequestError(
                f"eventFilter.entities: {entity!r} is not an entity type name "
                f"(known: {', '.join(OPENMETADATA_ENTITY_TYPES)})"
            )
    return event_type, tuple(dict.fromkeys(entities))


def event_filter_predicate(event_filter: Mapping[str, Any] | None) -> Column:
    """Return the predicate over gold.openmetadata_change_events that an eventFilter selects.

    Args:
        event_filter: `{eventType, entities}` or None (every event).

    Raises:
        RequestError: see `parse_event_filter`.
    """
    if event_filter is None:
        return F.lit(True)
    event_type, entities = parse_event_filter(event_filter)
    predicate = F.col("event_type") == event_type
    return predicate & F.col("entity_type").isin(*entities) if entities else predicate
