"""Bronze usage events and silver change events, built row by row with exactly the tables' columns."""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime, timezone
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from conf.settings import Settings
from conf.tables import table_spec
from pipelines.runtime.io import append
from pipelines.runtime.progress import record_progress

_USAGE_DOC_KEYS = {
    "entity_urn": "entityUrn",
    "entity_type": "entityType",
    "aspect_name": "aspectName",
    "event_source": "eventSource",
    "source_ip": "sourceIP",
    "user_agent": "userAgent",
    "trace_id": "traceId",
    "login_source": "loginSource",
    "login_denial_reason": "loginDenialReason",
    "usage_source": "usageSource",
}


def day_of(millis: int) -> date:
    """The UTC date of epoch ms."""
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).date()


def usage_event(event_type: str, actor: str, timestamp: int, batch_id: str = "b-1", **fields: Any) -> dict[str, Any]:
    """One bronze.usage_events row as landing writes it (raw_document is the DataHub document)."""
    document = {"type": event_type, "actorUrn": actor, "timestamp": timestamp}
    document.update({_USAGE_DOC_KEYS[k]: v for k, v in fields.items() if v is not None})
    raw = json.dumps(document, separators=(",", ":"))
    row = {name: None for name in table_spec("bronze.usage_events").column_names}
    row.update(fields)
    row.update(
        event_type=event_type,
        actor_urn=actor,
        timestamp=timestamp,
        raw_document=raw,
        record_hash=hashlib.sha256(raw.encode()).hexdigest(),
        source_file="landing/usage.jsonl",
        line_number=1,
        batch_id=batch_id,
        landed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        land_date=date(2026, 1, 1),
    )
    return row


def change_event(
    change_set_id: str,
    category: str,
    operation: str,
    actor: str,
    event_time: int,
    aspect_entity_urn: str,
    aspect_name: str,
    batch_id: str = "b-1",
    entity_urn: str | None = None,
    aspect_entity_type: str = "dataset",
    modifier: str | None = None,
) -> dict[str, Any]:
    """One silver.entity_change_events row (entity_urn defaults to the written entity)."""
    entity_urn = entity_urn or aspect_entity_urn
    entity_type = entity_urn.split(":")[2]
    return {
        "event_id": hashlib.sha256(f"{change_set_id}|{category}|{operation}|{modifier}|{entity_urn}".encode()).hexdigest(),
        "entity_urn": entity_urn,
        "entity_type": entity_type,
        "category": category,
        "operation": operation,
        "modifier": modifier,
        "parameters": {},
        "actor": actor,
        "event_time": event_time,
        "version": 0,
        "aspect_name": aspect_name,
        "aspect_entity_urn": aspect_entity_urn,
        "aspect_entity_type": aspect_entity_type,
        "change_set_id": change_set_id,
        "old_value": None,
        "new_value": None,
        "source_version": 1,
        "source_order_key": "1",
        "batch_id": batch_id,
        "source_file": "landing/history.mcl.jsonl",
        "line_number": 1,
        "event_date": day_of(event_time),
    }


def rows_df(spark: SparkSession, table_key: str, rows: list[dict[str, Any]]) -> DataFrame:
    """A DataFrame of `rows` with exactly the declared columns of `table_key`."""
    spec = table_spec(table_key)
    return spark.createDataFrame([tuple(r[c] for c in spec.column_names) for r in rows], spec.columns)


def land_refined_batch(
    spark: SparkSession,
    settings: Settings,
    batch_id: str,
    usage: list[dict[str, Any]] = (),
    changes: list[dict[str, Any]] = (),
) -> None:
    """Write a batch's bronze usage rows and silver change rows, then mark the batch refined."""
    if usage:
        append(rows_df(spark, "bronze.usage_events", list(usage)), settings, "bronze.usage_events")
    if changes:
        append(rows_df(spark, "silver.entity_change_events", list(changes)), settings, "silver.entity_change_events")
    record_progress(
        spark, settings, "refine", "bronze.aspect_snapshots", batch_id, rows_in=len(changes), rows_out=len(changes)
    )
