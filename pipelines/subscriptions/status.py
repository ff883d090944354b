"""Per-subscription delivery status: delivered, pending, failed, oldest pending age, last error, paused."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession

from conf.settings import Settings
from pipelines.subscriptions.store import list_subscriptions
from pipelines.subscriptions.stream import (
    dead_letter_counts,
    pending_batches,
    pending_counts,
    published_stream,
    read_cursor,
)

STATUS_COLUMNS = (
    "name",
    "state",
    "delivered",
    "pending",
    "failed",
    "oldest_pending_age_s",
    "last_delivered_at",
    "failing_since",
    "next_attempt_at",
    "last_error",
)


def subscription_status(spark: SparkSession, settings: Settings, names: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The delivery status of each subscription (all, or those named), by name.

    `delivered`: events acknowledged with a 2xx; `pending`: selected events of published batches not
    yet acknowledged; `failed`: events dead-lettered; `oldest_pending_age_s`: seconds since the oldest
    batch holding a pending event was published; `state`: ok, failing (retrying with backoff) or paused.

    Raises:
        InputError: when a named subscription does not exist.
    """
    subscriptions = list_subscriptions(spark, settings, names)
    if not subscriptions:
        return []
    stream = published_stream(spark, settings)
    failed = dead_letter_counts(spark, settings)
    now = datetime.now(timezone.utc)
    rows = []
    for subscription in subscriptions:
        cursor = read_cursor(spark, settings, subscription.subscription_id)
        batches = pending_batches(stream, subscription, cursor)
        counts = pending_counts(spark, settings, subscription, batches, cursor)
        oldest = next((b.published_for(subscription) for b in batches if b.batch_id in counts), None)
        if subscription.paused:
            state = "paused"
        elif subscription.failing_since is not None:
            state = "failing"
        else:
            state = "ok"
        rows.append(
            {
                "name": subscription.name,
                "state": state,
                "delivered": cursor.delivered,
                "pending": sum(counts.values()),
                "failed": failed.get(subscription.subscription_id, 0),
                "oldest_pending_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
                "last_delivered_at": subscription.last_delivered_at,
                "failing_since": subscription.failing_since,
                "next_attempt_at": subscription.next_attempt_at,
                "last_error": subscription.last_error,
            }
        )
    return rows
