"""Retention of ops.access_log: whole flush batches older than access_log.retention_days are deleted.

A batch is deleted whole (its rows share one flush), so the audit chain knows it as pruned: `verify`
accepts a linked access batch that is gone only when retention allows it to be (`pruned_by_retention`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from conf.tables import table_name
from conf.values import DAY_MS
from pipelines.runtime.io import read_table, sql_string

ACCESS_TABLE = "ops.access_log"
# A batch's link is recorded when its flush wrote it, moments after its newest record.
LINK_SLACK_MS = 3_600_000


def retention_cutoff_ms(settings: Settings, now_ms: int) -> int | None:
    """Records older than this are past retention (None: kept for good)."""
    days = settings.access_log.retention_days
    return None if days == 0 else now_ms - days * DAY_MS


def pruned_by_retention(settings: Settings, link: Mapping[str, Any], now_ms: int) -> bool:
    """Whether a chain link names an access log batch that retention may have deleted (linked before the cutoff)."""
    cutoff = retention_cutoff_ms(settings, now_ms)
    return link["table_key"] == ACCESS_TABLE and cutoff is not None and int(link["recorded_at_ms"]) < cutoff + LINK_SLACK_MS


def prune_access_log(spark: SparkSession, settings: Settings, now_ms: int) -> list[str]:
    """Delete the access log batches whose every record is older than the retention; return their ids."""
    cutoff = retention_cutoff_ms(settings, now_ms)
    if cutoff is None:
        return []
    old = (
        read_table(spark, settings, ACCESS_TABLE)
        .groupBy("batch_id")
        .agg(F.max("accessed_at_ms").alias("newest"))
        .filter(F.col("newest") < F.lit(cutoff))
        .collect()
    )
    batch_ids = sorted(r.batch_id for r in old if r.batch_id is not None)
    if batch_ids:
        listed = ", ".join(sql_string(b) for b in batch_ids)
        spark.sql(f"DELETE FROM {table_name(settings, ACCESS_TABLE)} WHERE batch_id IN ({listed})").collect()
    return batch_ids
