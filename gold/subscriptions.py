"""Webhook subscriptions: event filters as DataFrame predicates, and the payloads' formats.

Everything here is pure: DataFrame -> DataFrame filters over silver change events and gold OpenMetadata
ChangeEvents, and plain functions that build request bodies. Reaching a target (its checks, signed
requests, retries), reading tables and keeping cursors belong to `pipelines.subscriptions`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from conf.errors import InputError, RequestError
from gold.openmetadata import event_filter_predicate, parse_event_filter
from gold.scopes import UNSCOPED, Scope, change_event_condition

FORMATS = ("ece", "openmetadata", "slack")
CATEGORIES = (
    "TAG",
    "GLOSSARY_TERM",
    "OWNER",
    "OWNERSHIP",
    "DOMAIN",
    "DOCUMENTATION",
    "TECHNICAL_SCHEMA",
    "LIFECYCLE",
    "DEPRECATION",
    "STRUCTURED_PROPERTY",
)
OPERATIONS = ("ADD", "REMOVE", "MODIFY", "CREATE", "HARD_DELETE", "SOFT_DELETE", "REINSTATE")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ECE_EVENT_TYPE = "EntityChangeEvent_v1"


@dataclass(frozen=True)
class EventFilters:
    """What a subscription selects; an empty tuple selects every value of that field.

    Args:
        categories: ECE categories (TAG, OWNER, ...).
        operations: ECE operations (ADD, REMOVE, ...).
        entity_types: DataHub entity types (dataset, chart, ...).
        entity_prefixes: entity URN prefixes (`urn:li:dataset:(urn:li:dataPlatform:snowflake,`).
        actors: actor URNs.
        om_filter: an OpenMetadata eventFilter `{eventType, entities}`, or None.
        scope: the scope the subscription was created under: only events in it are delivered.
    """

    categories: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    entity_types: tuple[str, ...] = ()
    entity_prefixes: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    om_filter: Mapping[str, Any] | None = field(default=None)
    scope: Scope = UNSCOPED

    @property
    def selects_change_events(self) -> bool:
        """Whether any filter applies to the silver change events (else every change event passes)."""
        return bool(
            self.categories or self.operations or self.entity_types or self.entity_prefixes or self.actors
            or self.scope.restricted
        )  # fmt: skip


def check_name(name: str) -> str:
    """Return a subscription name when it is 1-64 letters, digits, `_`, `.` or `-` (starting alphanumeric).

    Raises:
        InputError: naming the value.
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InputError(
            f"name: {name!r} is not a subscription name (1-64 letters, digits, '_', '.', '-'; starting with a letter or digit)"
        )
    return name


def check_format(payload_format: str) -> str:
    """Return the payload format when it is one of FORMATS.

    Raises:
        InputError: naming the value.
    """
    if payload_format not in FORMATS:
        raise InputError(f"--format: {payload_format!r} is not one of {', '.join(FORMATS)}")
    return payload_format


def check_filters(filters: EventFilters) -> EventFilters:
    """Return the filters when every category, operation, URN prefix and actor is well formed.

    Raises:
        InputError: naming the option and the bad value (an eventFilter problem too).
    """
    for option, values, known in (
        ("--category", filters.categories, CATEGORIES),
        ("--operation", filters.operations, OPERATIONS),
    ):
        for value in values:
            if value not in known:
                raise InputError(f"{option}: {value!r} is not one of {', '.join(known)}")
    for value in filters.entity_types:
        if not value or not value.replace("_", "").isalnum():
            raise InputError(f"--entity-type: {value!r} is not a DataHub entity type (e.g. dataset)")
    for option, values in (("--entity-prefix", filters.entity_prefixes), ("--actor", filters.actors)):
        for value in values:
            if not value.startswith("urn:li:"):
                raise InputError(f"{option}: {value!r} does not start with urn:li:")
    if filters.om_filter is not None:
        try:
            parse_event_filter(filters.om_filter)
        except RequestError as exc:
            raise InputError(f"--om-filter: {exc}") from None
    return filters


def to_event_filter_predicate(filters: EventFilters) -> Column:
    """Return the predicate over silver.entity_change_events columns that the change-event filters select.

    Each non-empty filter must match (AND); inside one filter any value may match (OR).
    """
    predicate = F.lit(True)
    if filters.categories:
        predicate = predicate & F.col("category").isin(*filters.categories)
    if filters.operations:
        predicate = predicate & F.col("operation").isin(*filters.operations)
    if filters.entity_types:
        predicate = predicate & F.col("entity_type").isin(*filters.entity_types)
    if filters.entity_prefixes:
        prefix_match = F.lit(False)
        for prefix in filters.entity_prefixes:
            prefix_match = prefix_match | F.col("entity_urn").startswith(prefix)
        predicate = predicate & prefix_match
    if filters.actors:
        predicate = predicate & F.col("actor").isin(*filters.actors)
    if filters.scope.restricted:
        predicate = predicate & scope_predicate(filters.scope)
    return predicate


def scope_predicate(scope: Scope) -> Column:
    """The scope rule of the audit search (`gold.scopes.scope_condition`) over silver change events.

    The entity is the one whose aspect was written (as in the audit rows); a domain scope needs a
    `domain` column: the entity's, by `gold.scopes.newest_domain_query` on `aspect_entity_urn`.
    """
    condition = change_event_condition(scope)
    return F.lit(True) if condition is None else F.expr(condition.sql(dialect="spark"))


def filter_change_events(events_df: DataFrame, change_events_df: DataFrame, filters: EventFilters) -> DataFrame:
    """Keep the silver change events a subscription selects.

    Args:
        events_df: rows of silver.entity_change_events.
        change_events_df: rows of gold.openmetadata_change_events for the same batches; read only when
            the filters hold an eventFilter (a change event passes when its change set's ChangeEvent does).
        filters: the subscription's filters.
    """
    selected_df = events_df.filter(to_event_filter_predicate(filters))
    if filters.om_filter is None:
        return selected_df
    matching_sets_df = change_events_df.filter(event_filter_predicate(filters.om_filter)).select("change_set_id")
    return selected_df.join(matching_sets_df.distinct(), "change_set_id", "left_semi")


def filter_openmetadata_events(
    change_events_df: DataFrame, events_df: DataFrame, filters: EventFilters
) -> DataFrame:
    """Keep the OpenMetadata ChangeEvents a subscription selects.

    A ChangeEvent passes the eventFilter by its own type and entity type, and the change-event filters
    when at least one silver change event of its change set passes them.

    Args:
        change_events_df: rows of gold.openmetadata_change_events.
        events_df: rows of silver.entity_change_events for the same batches (read only when needed).
        filters: the subscription's filters.
    """
    selected_df = change_events_df.filter(event_filter_predicate(filters.om_filter))
    if not filters.selects_change_events:
        return selected_df
    matching_sets_df = events_df.filter(to_event_filter_predicate(filters)).select("change_set_id").distinct()
    return selected_df.join(matching_sets_df, "change_set_id", "left_semi")


def to_ece_item(event_id: str, document: Mapping[str, Any], batch_id: str | None) -> str:
    """One delivered ECE as the DataHub Actions framework's event envelope, with its stable id, as JSON text.

    Args:
        event_id: the silver event id (stable across re-deliveries).
        document: the ECE V1 JSON object (`pipelines.batch.export_ece.ece_document`).
        batch_id: the batch the event was refined in.
    """
    envelope = {
        "id": event_id,
        "event_type": ECE_EVENT_TYPE,
        "event": document,
        "meta": {"batch_id": batch_id},
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def to_summary_line(event: Mapping[str, Any], link_base_url: str | None) -> str:
    """A readable one-line summary of one change event, with a link to the entity.

    Args:
        event: a silver change event row (entity_urn, entity_type, category, operation, modifier, actor).
        link_base_url: a DataHub UI base URL; the link is `<base>/<entity_type>/<urn-encoded>`.
    """
    actor = str(event.get("actor") or "someone")
    actor_name = actor.split(":", 3)[3] if actor.startswith("urn:li:") and actor.count(":") >= 3 else actor
    what = f"{str(event['operation']).lower().replace('_', ' ')} {str(event['category']).lower().replace('_', ' ')}"
    modifier = f" {event['modifier']}" if event.get("modifier") else ""
    urn = str(event["entity_urn"])
    target = f"{event['entity_type']} {urn}"
    if link_base_url:
        link = f"{link_base_url.rstrip('/')}/{event['entity_type']}/{quote(urn, safe='')}"
        target = f"<{link}|{event['entity_type']} {urn}>"
    return f"{actor_name} {what}{modifier} on {target}"


def to_slack_body(lines: Sequence[str], event_ids: Sequence[str], subscription: str) -> bytes:
    """A Slack / Teams incoming-webhook message: a heading and one summary line per event, ids alongside."""
    count = len(lines)
    heading = f"{count} metadata change{'s' if count != 1 else ''} ({subscription})"
    text = heading + "\n" + "\n".join(f"• {line}" for line in lines)
    body = {"text": text, "event_ids": list(event_ids)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def to_batch_body(payload_format: str, subscription: str, items: Sequence[str]) -> bytes:
    """The body of one POST in the `ece` or `openmetadata` format from already serialized items.

    `ece`: `{"subscription": ..., "events": [envelope, ...]}`; `openmetadata`: a ChangeEventList,
    `{"data": [ChangeEvent, ...], "subscription": ...}`.

    Raises:
        InputError: for another format (slack bodies come from `to_slack_body`).
    """
    name = json.dumps(subscription)
    if payload_format == "ece":
        return ('{"subscription":' + name + ',"events":[' + ",".join(items) + "]}").encode("utf-8")
    if payload_format == "openmetadata":
        return ('{"data":[' + ",".join(items) + '],"subscription":' + name + "}").encode("utf-8")
    raise InputError(f"payload_format: {payload_format!r} is not ece or openmetadata")
