"""Retention: whole batches past their table's period deleted, the cut linked in the audit chain first, then VACUUM.

A batch goes when its newest record is older than the table's period (`retention.days.*`, the access
log's `access_log.retention_days`), unless a legal hold covers one of its rows: then the whole batch
stays and the report names the hold. Before any row is deleted, one row per batch is appended to
ops.retention_cuts and linked in the chain, so `verify` accepts exactly those batches gone (and the
DELETE commits that removed them); the links of the deleted batches stay, so the chain is still proven
from its first link. A run killed after the cut and before the DELETE leaves the batches in place, and
the next run cuts them again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from conf.tables import table_name, table_spec
from conf.values import DAY_MS
from pipelines.batch.audit_chain import link_batches
from pipelines.batch.legal_holds import LegalHold, active_holds, held_rows
from pipelines.batch.retention_cuts import CUTS_TABLE
from pipelines.runtime.io import append, read_table, retry_commit, sql_string
from pipelines.runtime.maintenance import maintenance_for


@dataclass(frozen=True)
class RetentionRule:
    """How one table ages: its period's setting, the age of a row in epoch ms, and who and what a row names."""

    setting: str
    days: Callable[[Settings], int]
    age_ms: Callable[[], Column]
    actor_columns: tuple[str, ...] = ()
    entity_columns: tuple[str, ...] = ()
    text_columns: tuple[str, ...] = ()
    actor_id_columns: tuple[str, ...] = ()


RETENTION_RULES: dict[str, RetentionRule] = {
    "gold.audit_events": RetentionRule(
        "retention.days.audit_events", lambda s: s.retention.days.audit_events, lambda: F.col("timestamp"),
        ("actor_urn",), ("entity_urn",),
    ),
    "silver.entity_change_events": RetentionRule(
        "retention.days.change_events", lambda s: s.retention.days.change_events, lambda: F.col("event_time"),
        ("actor",), ("entity_urn", "aspect_entity_urn"),
    ),
    "gold.openmetadata_change_events": RetentionRule(
        "retention.days.change_events", lambda s: s.retention.days.change_events, lambda: F.col("timestamp"),
        (), ("entity_urn", "source_entity_urn"), actor_id_columns=("user_name",),
    ),
    "bronze.usage_events": RetentionRule(
        "retention.days.usage_events", lambda s: s.retention.days.usage_events, lambda: F.col("timestamp"),
        ("actor_urn",), ("entity_urn",), ("raw_document",),
    ),
    "bronze.quarantine": RetentionRule(
        "retention.days.quarantine", lambda s: s.retention.days.quarantine,
        lambda: (F.unix_micros(F.col("quarantined_at")) / 1000).cast("bigint"), (), (), ("raw_text",),
    ),
    "ops.access_log": RetentionRule(
        "access_log.retention_days", lambda s: s.access_log.retention_days, lambda: F.col("accessed_at_ms"),
        ("actor",), (),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class ExpiredBatch:
    """A batch of one table whose newest record is older than the table's cutoff."""

    table_key: str
    batch_id: str
    rows: int
    newest_ms: int
    cutoff_ms: int
    days: int


@dataclass(frozen=True)
class RetentionReport:
    """What one `retention apply` did: the batches deleted, those a hold kept, the files vacuumed per table."""

    cut_id: str | None
    deleted: tuple[ExpiredBatch, ...] = ()
    held: tuple[tuple[ExpiredBatch, tuple[str, ...]], ...] = ()
    vacuumed: dict[str, int] = field(default_factory=dict)


def expired_batches(
    spark: SparkSession, settings: Settings, now_ms: int, holds: list[LegalHold]
) -> tuple[list[ExpiredBatch], list[tuple[ExpiredBatch, tuple[str, ...]]]]:
    """The batches past their table's period: (to delete, kept by holds with the hold ids that keep them)."""
    expired, held = [], []
    for table_key, rule in RETENTION_RULES.items():
        days = rule.days(settings)
        if days == 0:
            continue
        cutoff = now_ms - days * DAY_MS
        df = read_table(spark, settings, table_key).filter(F.col("batch_id").isNotNull())
        old = (
            df.groupBy("batch_id")
            .agg(F.max(rule.age_ms()).alias("newest_ms"), F.count(F.lit(1)).alias("rows"))
            .filter(F.col("newest_ms") < F.lit(cutoff))
            .collect()
        )
        if not old:
            continue
        batches = {r.batch_id: ExpiredBatch(table_key, r.batch_id, int(r.rows), int(r.newest_ms), cutoff, days) for r in old}
        keeping = _holds_keeping(df, sorted(batches), rule, holds)
        for batch_id in sorted(batches):
            if batch_id in keeping:
                held.append((batches[batch_id], keeping[batch_id]))
            else:
                expired.append(batches[batch_id])
    return expired, held


def _holds_keeping(df, batch_ids: list[str], rule: RetentionRule, holds: list[LegalHold]) -> dict[str, tuple[str, ...]]:
    """batch id -> the ids of the holds covering one of its rows, for the batches a hold keeps."""
    keeping: dict[str, set[str]] = {}
    for hold in holds:
        condition = held_rows([hold], rule.actor_columns, rule.entity_columns, rule.text_columns, rule.actor_id_columns)
        if condition is None:
            continue
        rows = df.filter(F.col("batch_id").isin(batch_ids) & condition).select("batch_id").distinct().collect()
        for row in rows:
            keeping.setdefault(row.batch_id, set()).add(hold.hold_id)
    return {batch: tuple(sorted(ids)) for batch, ids in keeping.items()}


def apply_retention(
    spark: SparkSession, settings: Settings, now_ms: int | None = None, vacuum_hours: int | None = None
) -> RetentionReport:
    """Delete every batch past its table's retention that no legal hold covers, then VACUUM the tables cut.

    Args:
        spark: the session (call under the run lock: the stages must not publish meanwhile).
        settings: the lakehouse settings (`retention.days.*`, `access_log.retention_days`).
        now_ms: the time periods are judged at; default the clock.
        vacuum_hours: files older than this are vacuumed (default retention.vacuum_hours; 0 removes the
            deleted rows' files at once, and with them time travel to the versions before the cut).

    Returns:
        The report: the cut's id (None when nothing was past retention), the batches deleted, those kept
        by a hold, and the files vacuumed per table.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    expired, held = expired_batches(spark, settings, now_ms, active_holds(spark, settings))
    if not expired:
        return RetentionReport(None, (), tuple(held))
    cut_id = f"cut-{datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    rows = [
        (f"{b.table_key}/{b.batch_id}", b.table_key, b.batch_id, b.rows, b.newest_ms, b.cutoff_ms, b.days, now_ms, cut_id)
        for b in expired
    ]
    append(spark.createDataFrame(rows, table_spec(CUTS_TABLE).columns), settings, CUTS_TABLE)
    link_batches(spark, settings, [CUTS_TABLE], [cut_id], appended=True)
    maintenance = maintenance_for(settings, spark)
    vacuumed = {}
    for table_key in sorted({b.table_key for b in expired}):
        batch_ids = sorted(b.batch_id for b in expired if b.table_key == table_key)
        _delete_batches(spark, settings, table_key, batch_ids)
        vacuumed[table_key] = len(maintenance.vacuum(table_key, vacuum_hours))
    return RetentionReport(cut_id, tuple(expired), tuple(held), vacuumed)


def _delete_batches(spark: SparkSession, settings: Settings, table_key: str, batch_ids: list[str]) -> None:
    """DELETE whole batches; an append-only table has the property lifted for that one commit and set again."""
    name = table_name(settings, table_key)
    append_only = dict(table_spec(table_key).properties).get("delta.appendOnly") == "true"
    listed = ", ".join(sql_string(b) for b in batch_ids)
    if append_only:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.appendOnly' = 'false')").collect()
    try:
        retry_commit(lambda: spark.sql(f"DELETE FROM {name} WHERE batch_id IN ({listed})").collect())
    finally:
        if append_only:
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.appendOnly' = 'true')").collect()
