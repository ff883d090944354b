"""The activity figures of the audit explorer, read in-process (delta-rs + Arrow) from gold tables."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from conf.locations import Location
from conf.settings import Settings
from conf.tables import table_location
from pipelines.runtime.storage import delta_storage_options, table_exists
from pipelines.serving.anomalies import TABLE as ANOMALIES_TABLE
from pipelines.serving.anomalies import AnomalyQuery, read_anomalies

DAILY_TABLE = "gold.actor_activity_daily"
AUDIT_TABLE = "gold.audit_events"


def latest_dataset(location: Location) -> ds.Dataset | None:
    """The latest version of the Delta table at `location`, or None while it does not exist."""
    if not table_exists(location):
        return None
    return DeltaTable(str(location), storage_options=delta_storage_options(location)).to_pyarrow_dataset()


def _and(*conditions: ds.Expression | None) -> ds.Expression | None:
    combined = None
    for condition in (c for c in conditions if c is not None):
        combined = condition if combined is None else combined & condition
    return combined


def _day(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def days_filter(since_ms: int | None, until_ms: int | None) -> ds.Expression | None:
    """Keep the UTC days that overlap [since_ms, until_ms)."""
    return _and(
        (ds.field("activity_date") >= pa.scalar(_day(since_ms))) if since_ms is not None else None,
        (ds.field("activity_date") <= pa.scalar(_day(until_ms - 1))) if until_ms is not None else None,
    )


def time_filter(since_ms: int | None, until_ms: int | None) -> ds.Expression | None:
    """Keep the audit events of [since_ms, until_ms)."""
    return _and(
        (ds.field("timestamp") >= since_ms) if since_ms is not None else None,
        (ds.field("timestamp") < until_ms) if until_ms is not None else None,
    )


def to_days(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sum daily activity rows per day: total events, events per type and changes per category, oldest first."""
    days: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row["activity_date"].isoformat()
        day = days.setdefault(key, {"date": key, "events": 0, "byType": Counter(), "byCategory": Counter()})
        day["events"] += row["events_total"] or 0
        day["byType"].update(json.loads(row["events_by_type"] or "{}"))
        day["byCategory"].update(json.loads(row["changes_by_category"] or "{}"))
    return [
        {**day, "byType": dict(sorted(day["byType"].items())), "byCategory": dict(sorted(day["byCategory"].items()))}
        for _, day in sorted(days.items())
    ]


def top_counts(table: pa.Table, column: str, limit: int) -> list[tuple[str, int]]:
    """The `limit` most frequent non-null values of `column`, most frequent first (ties by value)."""
    counts = table.filter(pc.is_valid(table[column])).group_by(column).aggregate([([], "count_all")])
    ordered = counts.sort_by([("count_all", "descending"), (column, "ascending")]).slice(0, limit)
    return list(zip(ordered[column].to_pylist(), ordered["count_all"].to_pylist()))


class ActivityReader:
    """Reads gold.actor_activity_daily, gold.audit_events and gold.actor_anomalies at their latest versions.

    Args:
        settings: the lakehouse settings (table locations).
    """

    def __init__(self, settings: Settings):
        self._daily = table_location(settings, DAILY_TABLE)
        self._audit = table_location(settings, AUDIT_TABLE)
        self._anomalies = table_location(settings, ANOMALIES_TABLE)

    def _daily_rows(self, since_ms: int | None, until_ms: int | None, actor: str | None = None) -> list[dict[str, Any]]:
        dataset = latest_dataset(self._daily)
        if dataset is None:
            return []
        condition = _and(days_filter(since_ms, until_ms), (ds.field("actor_urn") == actor) if actor else None)
        return dataset.to_table(filter=condition).to_pylist()

    def _audit_columns(self, columns: list[str], since_ms: int | None, until_ms: int | None, actor: str | None = None) -> pa.Table:
        dataset = latest_dataset(self._audit)
        if dataset is None:
            return pa.table({name: pa.array([], pa.string()) for name in columns})
        condition = _and(time_filter(since_ms, until_ms), (ds.field("actor_urn") == actor) if actor else None)
        return dataset.to_table(columns=columns, filter=condition)

    def overview(self, since_ms: int | None, until_ms: int | None, limit: int) -> dict[str, Any]:
        """Events per day (with types and categories), the top actors and the top entities of the window.

        Days are whole UTC days (the daily table's grain); the top entities count audit events in the
        exact window.
        """
        rows = self._daily_rows(since_ms, until_ms)
        per_actor: Counter[str] = Counter()
        for row in rows:
            per_actor[row["actor_urn"]] += row["events_total"] or 0
        actors = sorted(per_actor.items(), key=lambda item: (-item[1], item[0]))[:limit]
        entities = top_counts(self._audit_columns(["entity_urn"], since_ms, until_ms), "entity_urn", limit)
        return {
            "since": since_ms,
            "until": until_ms,
            "days": to_days(rows),
            "topActors": [{"actor": actor, "events": count} for actor, count in actors],
            "topEntities": [{"entityUrn": urn, "events": count} for urn, count in entities],
        }

    def actor(
        self, actor: str, since_ms: int | None, until_ms: int | None, limit: int, anomalies: AnomalyQuery
    ) -> dict[str, Any]:
        """One actor's events per day, the entities they touched most, and their flagged windows."""
        rows = self._daily_rows(since_ms, until_ms, actor)
        audit = self._audit_columns(["entity_urn", "entity_type"], since_ms, until_ms, actor)
        entities = top_counts(audit, "entity_urn", limit)
        types = top_counts(audit, "entity_type", limit)
        return {
            "actor": actor,
            "since": since_ms,
            "until": until_ms,
            "days": to_days(rows),
            "entities": [{"entityUrn": urn, "events": count} for urn, count in entities],
            "entityTypes": [{"entityType": name, "events": count} for name, count in types],
            "anomalies": read_anomalies(self._anomalies, anomalies),
        }


CHANGES_TABLE = "silver.entity_change_events"
CHANGE_COLUMNS = ("event_id", "event_time", "actor", "category", "operation", "entity_urn", "entity_type",
                  "modifier", "aspect_name", "parameters", "old_value", "new_value", "version", "change_set_id")  # fmt: skip


@dataclass(frozen=True)
class ChangeQuery:
    """A validated change-event search: filters, a window on event_time, a page size and a cursor.

    Attributes:
        entity: an entity urn, or a prefix when it ends with `*`.
        after: the cursor of the previous page: `<event_time>:<event_id>` of its last row.
    """

    actor: str | None = None
    entity: str | None = None
    category: str | None = None
    operation: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    size: int = 50
    after: tuple[int, str] | None = None


def change_filter(query: ChangeQuery) -> ds.Expression | None:
    """The row filter of `query` (the window also bounds the event_date partitions)."""
    entity = None
    if query.entity and query.entity.endswith("*"):
        entity = pc.starts_with(ds.field("entity_urn"), query.entity[:-1])
    elif query.entity:
        entity = ds.field("entity_urn") == query.entity
    return _and(
        (ds.field("event_time") >= query.since_ms) if query.since_ms is not None else None,
        (ds.field("event_date") >= pa.scalar(_day(query.since_ms))) if query.since_ms is not None else None,
        (ds.field("event_time") < query.until_ms) if query.until_ms is not None else None,
        (ds.field("event_date") <= pa.scalar(_day(query.until_ms - 1))) if query.until_ms is not None else None,
        (ds.field("actor") == query.actor) if query.actor else None,
        (ds.field("category") == query.category) if query.category else None,
        (ds.field("operation") == query.operation) if query.operation else None,
        entity,
    )


def to_change(row: dict[str, Any]) -> dict[str, Any]:
    """One change event as the page shows it (parameters as an object)."""
    parameters = row["parameters"]
    return {
        "eventId": row["event_id"],
        "timestamp": row["event_time"],
        "actor": row["actor"],
        "category": row["category"],
        "operation": row["operation"],
        "entityUrn": row["entity_urn"],
        "entityType": row["entity_type"],
        "modifier": row["modifier"],
        "aspectName": row["aspect_name"],
        "parameters": dict(parameters) if parameters else {},
        "oldValue": row["old_value"],
        "newValue": row["new_value"],
        "version": row["version"],
        "changeSetId": row["change_set_id"],
    }


def search_changes(location: Path, query: ChangeQuery, scope: ds.Expression | None = None) -> dict[str, Any]:
    """The change events matching `query` within `scope` (an Arrow filter, None: every row), newest first
    (ties by event id), one page after its cursor.

    Returns:
        `{total, count, changes, nextCursor?}`: total counts every match (the cursor aside); nextCursor
        is present when more rows follow.
    """
    dataset = latest_dataset(location)
    if dataset is None:
        return {"total": 0, "count": 0, "changes": []}
    table = dataset.to_table(columns=list(CHANGE_COLUMNS), filter=_and(change_filter(query), scope))
    total = table.num_rows
    if query.after is not None:
        after_time, after_id = query.after
        older = pc.less(table["event_time"], after_time)
        same_time_lower_id = pc.and_(pc.equal(table["event_time"], after_time), pc.less(table["event_id"], after_id))
        table = table.filter(pc.or_(older, same_time_lower_id))
    ordered = table.sort_by([("event_time", "descending"), ("event_id", "descending")])
    rows = ordered.slice(0, query.size).to_pylist()
    response: dict[str, Any] = {"total": total, "count": len(rows), "changes": [to_change(r) for r in rows]}
    if ordered.num_rows > query.size:
        response["nextCursor"] = f"{rows[-1]['event_time']}:{rows[-1]['event_id']}"
    return response


# The timeline's order: oldest first, then the change set's order key, category, operation, event id.
HISTORY_ORDER = ("event_time", "source_order_key", "category", "operation", "event_id")


def read_entity_history(location: Location, urn: str) -> list[dict[str, Any]]:
    """The change events of `urn` and of its schema fields (their aspect's entity is `urn`), oldest first.

    The rows and order of `pipelines.batch.timeline.entity_history`, read in-process from the latest
    table version: every column, parameters as a dict, nulls first in each sort column as Spark orders.
    """
    dataset = latest_dataset(location)
    if dataset is None:
        return []
    table = dataset.to_table(filter=(ds.field("entity_urn") == urn) | (ds.field("aspect_entity_urn") == urn))
    ordered = table.sort_by([(column, "ascending", "at_start") for column in HISTORY_ORDER])
    rows = ordered.to_pylist()
    for row in rows:
        row["parameters"] = None if row["parameters"] is None else dict(row["parameters"])
    return rows
