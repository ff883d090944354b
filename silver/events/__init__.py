"""Entity Change Events (ECE V1): one generator module per category, and the function that runs them all."""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.aspects import FIELD_ARRAYS
from conf.tables import ENTITY_CHANGE_EVENTS, table_spec
from silver.aspects import is_key_aspect
from silver.events import (
    action_request,
    deprecation,
    documentation,
    domain,
    glossary_term,
    owner,
    structured_property,
    tag,
    technical_schema,
)
from silver.events.action_request import to_action_request_events
from silver.events.common import EVENT_COLUMNS, with_schema_fields
from silver.events.deprecation import to_deprecation_events
from silver.events.documentation import to_documentation_events
from silver.events.domain import to_domain_events
from silver.events.field_tags_terms import to_field_tag_term_events
from silver.events.glossary_term import to_glossary_term_events
from silver.events.lifecycle import to_lifecycle_events
from silver.events.owner import to_owner_events
from silver.events.structured_property import to_structured_property_events
from silver.events.tag import to_tag_events
from silver.events.technical_schema import to_technical_schema_events

# The columns of silver.entity_change_events that `to_change_events` returns, in table order.
CHANGE_EVENT_COLUMNS = table_spec(ENTITY_CHANGE_EVENTS).column_names


def _one_of(aspects: Collection[str]) -> Callable[[str], bool]:
    return lambda name: name in aspects


def _lifecycle_aspect(name: str) -> bool:
    # Key aspects (`datasetKey`, ... see silver.aspects.is_key_aspect) and `status`.
    return name == "status" or name.endswith("Key")


def to_raw_change_events(
    pairs_df: DataFrame,
    owner_category: str = "OWNER",
    schema_pairs_df: DataFrame | None = None,
    aspect_names: Collection[str] | None = None,
) -> DataFrame:
    """Run the generators over the pairs and apply the DELETE rule (no ids yet).

    A DELETE of a non-key aspect is its old content diffed against an empty aspect, and only its
    REMOVE events count: deleting `status` or `deprecation` is not a reinstatement or an un-deprecation.
    `schema_pairs_df` is `with_schema_fields(pairs_df)` when the caller has it already (None: computed).
    `aspect_names`, when given, must hold every aspect name of `pairs_df`: generators that read none of
    them are left out (they would find no rows, and a smaller plan is planned and run faster).
    """
    if schema_pairs_df is None:
        schema_pairs_df = with_schema_fields(pairs_df)
    generators: list[tuple[Callable[[str], bool], Callable[[], DataFrame]]] = [
        (_one_of(tag.ASPECTS), lambda: to_tag_events(pairs_df)),
        (_one_of(glossary_term.ASPECTS), lambda: to_glossary_term_events(pairs_df)),
        (_one_of(domain.ASPECTS), lambda: to_domain_events(pairs_df)),
        (_one_of(owner.ASPECTS), lambda: to_owner_events(pairs_df, owner_category)),
        (_one_of(structured_property.ASPECTS), lambda: to_structured_property_events(pairs_df)),
        (_one_of(deprecation.ASPECTS), lambda: to_deprecation_events(pairs_df)),
        (_one_of(technical_schema.ASPECTS), lambda: to_technical_schema_events(schema_pairs_df)),
        (_one_of(FIELD_ARRAYS), lambda: to_field_tag_term_events(schema_pairs_df)),
        (_one_of(documentation.ASPECTS), lambda: to_documentation_events(pairs_df, schema_pairs_df)),
        (_lifecycle_aspect, lambda: to_lifecycle_events(pairs_df)),
        (_one_of(action_request.ASPECTS), lambda: to_action_request_events(pairs_df)),
    ]
    chosen = [
        make for reads, make in generators if aspect_names is None or any(reads(name) for name in aspect_names)
    ]
    # A union needs one frame: with no generator chosen, one over no rows stands in.
    frames = [make() for make in chosen] or [to_tag_events(pairs_df.filter(F.lit(False)))]
    events_df = reduce(DataFrame.unionByName, [f.select(*EVENT_COLUMNS) for f in frames])
    keep = ~F.col("is_delete") | is_key_aspect("aspect_name", "aspect_entity_type") | (F.col("operation") == "REMOVE")
    return events_df.filter(keep)


def event_id() -> Column:
    """The deterministic event id: sha256 over the event's identity (same input, same id)."""
    parts = [
        F.col("entity_urn"),
        F.col("aspect_entity_urn"),
        F.col("aspect_name"),
        F.col("source_order_key"),
        F.col("category"),
        F.col("operation"),
        F.col("modifier"),
        # Parameters are built in a fixed order, so their JSON text is stable from run to run.
        F.to_json(F.col("parameters")),
    ]
    # A visible marker for null keeps (a, null, b) apart from (a, b, null).
    return F.sha2(F.concat_ws("\u001f", *[F.coalesce(p.cast("string"), F.lit("\u2400")) for p in parts]), 256)


def with_event_ids(raw_events_df: DataFrame) -> DataFrame:
    """Add event_id, version (always 0) and event_date, and select the table's columns.

    Generators emit each change once (items are unique per key on each side), so ids are unique.
    """
    return (
        raw_events_df.withColumn("event_id", event_id())
        .withColumn("version", F.lit(0).cast("int"))
        .withColumn("event_date", F.to_date(F.timestamp_millis(F.col("event_time"))))
        .select(*CHANGE_EVENT_COLUMNS)
    )


def to_change_events(
    pairs_df: DataFrame,
    owner_category: str = "OWNER",
    schema_pairs_df: DataFrame | None = None,
    aspect_names: Collection[str] | None = None,
) -> DataFrame:
    """Return the Entity Change Events of aspect version pairs, with ids, in silver.entity_change_events' columns.

    Args:
        pairs_df: one row per accepted aspect version with its predecessor (`silver.sequencing.PAIR_COLUMNS`).
        owner_category: OWNER (ECE V1) or OWNERSHIP: the category name of owner events.
        schema_pairs_df: `with_schema_fields(pairs_df)`, when already computed (e.g. written once by refine).
        aspect_names: every aspect name `pairs_df` holds, when known (e.g. a small batch's): only the
            generators of those aspects run. None runs them all.
    """
    return with_event_ids(to_raw_change_events(pairs_df, owner_category, schema_pairs_df, aspect_names))
