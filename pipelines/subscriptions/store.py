"""The subscriptions table: add, list, remove and resume subscriptions, and their delivery state.

A subscription takes the batches refine finished after its `start_after`; the order it receives them
in is `pipelines.subscriptions.stream`'s.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import (
    ENTITY_CHANGE_EVENTS,
    STAGE_PROGRESS,
    SUBSCRIPTION_CURSORS,
    SUBSCRIPTION_DEAD_LETTERS,
    SUBSCRIPTIONS,
    table_name,
    table_spec,
)
from gold.scopes import scope_from_json, scope_json
from gold.subscriptions import (
    EventFilters,
    check_filters,
    check_format,
    check_name,
)
from pipelines.privacy.display import person_pseudonym
from pipelines.runtime.io import insert_missing, merge, read_table, retry_commit
from pipelines.runtime.maintenance import maintenance_for
from pipelines.subscriptions.targets import check_target, check_url

# Delivery threads update rows of the one small subscriptions table: taking turns in this process
# avoids most commit races (those with other processes are retried).
_STATE_WRITES = threading.Lock()
_STATE_COLUMNS = ("paused", "failing_since", "next_attempt_at", "last_error", "last_error_at", "last_delivered_at")
# The publish stages that make a batch deliverable (`Subscription.gate_stage`).
AUDIT_GATE, OPENMETADATA_GATE = "publish_audit", "publish_openmetadata"


@dataclass(frozen=True)
class Subscription:
    """One row of ops.subscriptions."""

    subscription_id: str
    name: str
    url: str
    format: str
    filters: EventFilters
    secret_ciphertext: str | None
    start_after: datetime | None
    created_at: datetime | None
    paused: bool = False
    failing_since: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None
    last_delivered_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Subscription:
        """Build from a table row."""
        filters = EventFilters(
            categories=tuple(row["categories"] or ()),
            operations=tuple(row["operations"] or ()),
            entity_types=tuple(row["entity_types"] or ()),
            entity_prefixes=tuple(row["entity_prefixes"] or ()),
            actors=tuple(row["actors"] or ()),
            om_filter=json.loads(row["om_filter"]) if row["om_filter"] else None,
            scope=scope_from_json(json.loads(row["scope"]) if row.get("scope") else None, "ops.subscriptions.scope"),
        )
        return cls(
            subscription_id=row["subscription_id"],
            name=row["name"],
            url=row["url"],
            format=row["format"],
            filters=filters,
            secret_ciphertext=row["secret_ciphertext"],
            start_after=as_utc(row["start_after"]),
            created_at=as_utc(row["created_at"]),
            paused=bool(row["paused"]),
            failing_since=as_utc(row["failing_since"]),
            next_attempt_at=as_utc(row["next_attempt_at"]),
            last_error=row["last_error"],
            last_error_at=as_utc(row["last_error_at"]),
            last_delivered_at=as_utc(row["last_delivered_at"]),
        )

    @property
    def gate_stage(self) -> str:
        """The publish stage whose progress row makes a batch deliverable to this subscription.

        publish_audit for `ece` and `slack` without an eventFilter: their events are silver's, and once
        the audit publish has recorded a batch, search finds them (a slack line links to it). Watch
        mode publishes a batch's OpenMetadata ChangeEvents one micro-batch later, so only the
        subscriptions that read them (the `openmetadata` format, or an eventFilter) wait for
        publish_openmetadata.
        """
        reads_change_events = self.format == "openmetadata" or self.filters.om_filter is not None
        return OPENMETADATA_GATE if reads_change_events else AUDIT_GATE

    def describe(self) -> dict[str, Any]:
        """The subscription as shown by `list`: the secret only as whether one is set."""
        filters = self.filters
        return {
            "name": self.name,
            "url": self.url,
            "format": self.format,
            "categories": list(filters.categories),
            "operations": list(filters.operations),
            "entity_types": list(filters.entity_types),
            "entity_prefixes": list(filters.entity_prefixes),
            "actors": list(filters.actors),
            "om_filter": dict(filters.om_filter) if filters.om_filter is not None else None,
            "scope": filters.scope.to_specs(),
            "signed": self.secret_ciphertext is not None,
            "start_after": self.start_after,
            "created_at": self.created_at,
            "paused": self.paused,
        }


def as_utc(value: datetime | None) -> datetime | None:
    """Timestamps come back naive in the session time zone (UTC): make them aware."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def list_subscriptions(spark: SparkSession, settings: Settings, names: Sequence[str] = ()) -> list[Subscription]:
    """The subscriptions (all, or those named), by name.

    Raises:
        InputError: when a named subscription does not exist.
    """
    rows = read_table(spark, settings, SUBSCRIPTIONS).orderBy("name").collect()
    subscriptions = [Subscription.from_row(r.asDict()) for r in rows]
    if not names:
        return subscriptions
    by_name = {s.name: s for s in subscriptions}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise InputError(f"name: no subscription named {missing[0]!r} (known: {', '.join(by_name) or 'none'})")
    return [by_name[n] for n in names]


def add_subscription(
    spark: SparkSession,
    settings: Settings,
    *,
    name: str,
    url: str,
    payload_format: str,
    filters: EventFilters,
    secret_ciphertext: str | None = None,
    since_ms: int | None = None,
) -> Subscription:
    """Add a subscription, starting from now or replaying the batches refined since `since_ms`.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings (allowed hosts).
        name: the subscription's unique name.
        url: the http(s) target.
        payload_format: ece, openmetadata or slack.
        filters: what it selects.
        secret_ciphertext: the signing secret, encrypted (`pipelines.subscriptions.secrets.encrypt_secret`).
        since_ms: replay from this time (epoch ms); None: deliver only batches refined from now on.

    Raises:
        InputError: naming the bad value, an existing name, or a replay point that cannot be read.
    """
    check_name(name)
    check_url(url, settings.subscriptions.allowed_hosts, settings.subscriptions.allowed_networks)
    check_target(url, settings.subscriptions.allowed_networks)
    check_format(payload_format)
    check_filters(filters)
    # Events hold people by pseudonym: a person named here is matched, and stored, as one.
    filters = dataclasses.replace(filters, actors=tuple(person_pseudonym(settings, a) for a in filters.actors))
    if any(s.name == name for s in list_subscriptions(spark, settings)):
        raise InputError(f"name: a subscription named {name!r} already exists (remove it first)")
    start_after = replay_start(spark, settings, since_ms) if since_ms is not None else latest_refined_at(spark, settings)
    subscription_id = str(uuid.uuid4())
    row = {
        "subscription_id": subscription_id,
        "name": name,
        "url": url,
        "format": payload_format,
        "categories": list(filters.categories),
        "operations": list(filters.operations),
        "entity_types": list(filters.entity_types),
        "entity_prefixes": list(filters.entity_prefixes),
        "actors": list(filters.actors),
        "om_filter": json.dumps(filters.om_filter, sort_keys=True) if filters.om_filter is not None else None,
        "secret_ciphertext": secret_ciphertext,
        "start_after": start_after,
        "created_at": datetime.now(timezone.utc),
        "paused": False,
        "failing_since": None,
        "next_attempt_at": None,
        "last_error": None,
        "last_error_at": None,
        "last_delivered_at": None,
        "scope": json.dumps(scope_json(filters.scope), sort_keys=True) if filters.scope.restricted else None,
    }
    row_df = spark.createDataFrame([row], _schema(SUBSCRIPTIONS))
    insert_missing(spark, settings, SUBSCRIPTIONS, row_df, "t.name = s.name", view_name="subscription_add")
    added = [s for s in list_subscriptions(spark, settings) if s.name == name]
    if not added or added[0].subscription_id != subscription_id:
        raise InputError(f"name: a subscription named {name!r} already exists (remove it first)")
    return added[0]


def _schema(table_key: str) -> str:
    return table_spec(table_key).columns


def remove_subscription(spark: SparkSession, settings: Settings, name: str) -> Subscription:
    """Remove a subscription with its cursors and dead letters.

    Raises:
        InputError: when no subscription has that name.
    """
    (subscription,) = list_subscriptions(spark, settings, [check_name(name)])
    for table_key in (SUBSCRIPTION_CURSORS, SUBSCRIPTION_DEAD_LETTERS, SUBSCRIPTIONS):
        # The id is a uuid this module generated: safe inside the statement.
        retry_commit(
            lambda key=table_key: spark.sql(
                f"DELETE FROM {table_name(settings, key)} WHERE subscription_id = '{subscription.subscription_id}'"
            ).collect()
        )
    return subscription


def update_state(spark: SparkSession, settings: Settings, subscription_id: str, **state: Any) -> None:
    """Set delivery-state columns (paused, failing_since, next_attempt_at, last_error, ...) of one subscription."""
    unknown = sorted(set(state) - set(_STATE_COLUMNS))
    if unknown or not state:
        raise InputError(f"state: {unknown or 'nothing'} are not delivery-state columns ({', '.join(_STATE_COLUMNS)})")
    types = dict(part.split() for part in _schema(SUBSCRIPTIONS).split(", ") if part.split()[0] in state)
    source_df = spark.createDataFrame(
        [{"subscription_id": subscription_id, **state}],
        "subscription_id STRING, " + ", ".join(f"{c} {types[c]}" for c in state),
    )
    target = table_name(settings, SUBSCRIPTIONS)
    assignments = ", ".join(f"t.{c} = s.{c}" for c in state)
    with _STATE_WRITES:
        merge(
            spark,
            source_df,
            lambda source: f"MERGE INTO {target} AS t USING {source} AS s ON t.subscription_id = s.subscription_id "
            f"WHEN MATCHED THEN UPDATE SET {assignments}",
            view_name=f"subscription_state_{subscription_id.replace('-', '')}",
        )


def resume_subscription(spark: SparkSession, settings: Settings, name: str) -> Subscription:
    """Un-pause a subscription and clear its backoff, so the next delivery tries it at once.

    Raises:
        InputError: when no subscription has that name.
    """
    (subscription,) = list_subscriptions(spark, settings, [check_name(name)])
    update_state(spark, settings, subscription.subscription_id, paused=False, failing_since=None, next_attempt_at=None)
    return subscription


def latest_refined_at(spark: SparkSession, settings: Settings) -> datetime | None:
    """When refine finished its newest batch (a new subscription starts after it); None before any."""
    row = (
        read_table(spark, settings, STAGE_PROGRESS)
        .filter(F.col("stage") == "refine")
        .agg(F.max("processed_at").alias("at"))
        .collect()[0]
    )
    return as_utc(row.at)


def replay_start(spark: SparkSession, settings: Settings, since_ms: int) -> datetime | None:
    """The start point that replays every batch refined into silver at or after `since_ms`.

    The silver events table is read as it was just before `since_ms` (Delta time travel): its batches
    are the ones not replayed.

    Raises:
        InputError: when `since_ms` is in the future, or that table version can no longer be read.
    """
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    if since_ms > now_ms:
        raise InputError(f"--since: {since_ms} is in the future")
    commits = maintenance_for(settings, spark).history(ENTITY_CHANGE_EVENTS)
    before = [c for c in commits if c.timestamp_ms is not None and c.timestamp_ms < since_ms]
    if not before:
        return None
    version = max(c.version for c in before)
    try:
        rows = spark.sql(f"SELECT DISTINCT batch_id FROM {table_name(settings, ENTITY_CHANGE_EVENTS)} VERSION AS OF {version}").collect()
    except Exception as exc:  # noqa: BLE001 - any engine error here means the version's files are gone
        raise InputError(
            f"--since: silver change events as of version {version} cannot be read any more ({str(exc)[:200]}); "
            "choose a later date (old versions are removed by `lakehouse maintain --vacuum`)"
        ) from None
    batch_ids = [r.batch_id for r in rows]
    if not batch_ids:
        return None
    row = (
        read_table(spark, settings, STAGE_PROGRESS)
        .filter((F.col("stage") == "refine") & F.col("batch_id").isin(batch_ids))
        .agg(F.max("processed_at").alias("at"))
        .collect()[0]
    )
    return as_utc(row.at)


