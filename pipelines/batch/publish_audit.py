"""The publish_audit stage: refined batches -> gold.audit_events (MERGE) and gold.actor_activity_daily."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from conf.settings import Settings
from conf.tables import (
    ACTOR_ACTIVITY_DAILY,
    AUDIT_EVENTS,
    ENTITY_CHANGE_EVENTS,
    STAGE_PROGRESS,
    USAGE_EVENTS,
    table_name,
    table_spec,
)
from gold.audit import ORIGIN_USAGE, to_actor_activity_daily, to_audit_events
from pipelines.batch.audit_chain import link_batches
from pipelines.runtime.state_store import staged_entity_domains
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import any_stored, append, insert_row, merge, read_table, replace_where
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import StageResult, pending_batches, record_progress

STAGE = "publish_audit"
AUDIT_TABLE = AUDIT_EVENTS
ACTIVITY_TABLE = ACTOR_ACTIVITY_DAILY
# Compaction sorts each day's rows by time into row groups of AUDIT_ROW_GROUP_ROWS rows: a search window
# reads only the row groups of its time range (their footers' min/max), and the in-process serving engine
# reads a page's rows by decoding only the small row groups that hold them.
AUDIT_ZORDER = ("timestamp",)
AUDIT_ROW_GROUP_ROWS = 1_024
# Sorted, the time column is stored as deltas: smaller, and decoded faster by every window filter.
AUDIT_DELTA_ENCODED = ("timestamp",)
# A batch naming more actors than this refreshes its activity days whole: the actors are listed in the
# replace predicate, and a whole day costs about a second however many actors it has.
ACTIVITY_LISTED_ACTORS = 1_000


@dataclass
class _BatchCounts:
    """What one batch brings to the stage: rows read, audit rows derived, and the activity rows they feed."""

    rows_in: int = 0
    rows_out: int = 0
    days: set[date] = field(default_factory=set)
    actors: set[str | None] = field(default_factory=set)


def publish_audit(spark: SparkSession, settings: Settings, run_id: str | None = None) -> StageResult:
    """Publish every batch refine finished and this stage has not: audit rows, then the touched activity days.

    Crash-safe: the audit MERGE inserts event ids not already there (in the batch's day partitions) and
    replaces a stored row only with one the dedup prefers, so a re-run leaves it as it is; the activity
    rows are recomputed from the tables (those of the batch's actors and days when its events were all
    new, else its days whole: a re-run after a crash finds them stored), and progress is recorded last.
    So a re-run after a crash at any point writes the same tables and a re-run after success adds nothing.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        run_id: the pipeline run recorded with the progress rows.

    Returns:
        The batches published, rows read (usage events + change events) and audit rows derived.
    """
    batch_ids = pending_batches(spark, settings, STAGE)
    if not batch_ids:
        return StageResult(STAGE, (), 0, 0, {"days_refreshed": 0})
    usage_df = read_table(spark, settings, USAGE_EVENTS).filter(F.col("batch_id").isin(batch_ids))
    changes_df = read_table(spark, settings, ENTITY_CHANGE_EVENTS).filter(F.col("batch_id").isin(batch_ids))
    entities_df = usage_df.select("entity_urn").unionByName(
        changes_df.select(F.col("aspect_entity_urn").alias("entity_urn"))
    ).filter(F.col("entity_urn").isNotNull())
    # Each row is stamped with its entity's domain as the state holds it now; every scoped read takes an
    # entity's domain from its newest row (gold.scopes.newest_domain_query).
    folder = home_of(settings).scratch(STAGE, "entity_domains")
    with staged_entity_domains(spark, settings, entities_df, folder) as domains_df:
        audit_df = to_audit_events(usage_df, changes_df, domains_df)
        per_batch = _counts_per_batch(usage_df, changes_df, audit_df)
        days = sorted(set().union(*(counts.days for counts in per_batch.values())))
        appended = True  # nothing written replaced no stored row
        if days:
            appended = merge_audit_events(spark, settings, audit_df, days)
    if days:
        crash_point("publish_audit.merged")
        # Appended rows (every event new) change only the activity rows of the actors they name. A MERGE
        # may have replaced a stored row whose actor the batch does not name: then the days are redone.
        actors = set().union(*(counts.actors for counts in per_batch.values()))
        listed = appended and len(actors) <= ACTIVITY_LISTED_ACTORS
        refresh_actor_activity(spark, settings, days, batch_ids, actors=actors if listed else None)
    # Linked before progress: a re-run after a crash links what is missing and nothing twice.
    link_batches(spark, settings, [AUDIT_TABLE], batch_ids, appended=appended)
    for batch_id in batch_ids:
        counts = per_batch.get(batch_id, _BatchCounts())
        record_progress(
            spark,
            settings,
            STAGE,
            USAGE_EVENTS,
            batch_id,
            rows_in=counts.rows_in,
            rows_out=counts.rows_out,
            run_id=run_id,
            pending=True,
        )
    rows_in = sum(c.rows_in for c in per_batch.values())
    rows_out = sum(c.rows_out for c in per_batch.values())
    return StageResult(STAGE, tuple(batch_ids), rows_in, rows_out, {"days_refreshed": float(len(days))})


def _counts_per_batch(usage_df: DataFrame, changes_df: DataFrame, audit_df: DataFrame) -> dict[str, _BatchCounts]:
    """Per batch: rows read, audit rows derived, their event days, and the actors of its audit rows and changes."""
    no_actor, no_day = F.lit(None).cast("string"), F.lit(None).cast("date")
    flows_df = (
        usage_df.select("batch_id", F.lit(1).alias("read"), F.lit(0).alias("derived"), no_actor.alias("actor"),
                        F.lit(0).alias("names_actor"), no_day.alias("day"))  # fmt: skip
        .unionByName(
            changes_df.select("batch_id", F.lit(1).alias("read"), F.lit(0).alias("derived"), "actor",
                              F.lit(1).alias("names_actor"), no_day.alias("day"))  # fmt: skip
        )
        .unionByName(
            audit_df.select("batch_id", F.lit(0).alias("read"), F.lit(1).alias("derived"),
                            F.col("actor_urn").alias("actor"), F.lit(1).alias("names_actor"),
                            F.col("event_date").alias("day"))  # fmt: skip
        )
    )
    rows = (
        flows_df.groupBy("batch_id")
        .agg(
            F.sum("read").alias("rows_in"),
            F.sum("derived").alias("rows_out"),
            F.collect_set("day").alias("days"),
            F.collect_set("actor").alias("actors"),
            F.max(F.when(F.col("actor").isNull(), F.col("names_actor")).otherwise(0)).alias("null_actor"),
        )
        .collect()
    )
    return {
        row.batch_id: _BatchCounts(
            rows_in=int(row.rows_in),
            rows_out=int(row.rows_out),
            days=set(row.days),
            actors=set(row.actors) | ({None} if row.null_actor else set()),
        )
        for row in rows
    }


def _actor_predicate(column: str, actors: Collection[str | None]) -> str:
    """SQL that holds for the rows whose `column` is one of `actors` (None: a null actor)."""
    named = sorted(actor for actor in actors if actor is not None)
    conditions = [exp.column(column).isin(*named)] if named else []
    if None in actors:
        conditions.append(exp.column(column).is_(exp.null()))
    return exp.or_(*conditions).sql(dialect="spark") if conditions else "FALSE"


def days_condition(column: str, days: Collection[date]) -> str:
    """SQL: `column` is one of `days`, as one BETWEEN per run of consecutive days.

    A batch's days are mostly consecutive, so the condition stays a few ranges long however many days a
    batch spans (a list of every day grew the plan with the batch: docs/scaling.md).
    """
    ranges: list[list[date]] = []
    for day in sorted(set(days)):
        if ranges and (day - ranges[-1][1]).days == 1:
            ranges[-1][1] = day
        else:
            ranges.append([day, day])
    spans = [f"{column} BETWEEN DATE'{low.isoformat()}' AND DATE'{high.isoformat()}'" for low, high in ranges]
    return f"({' OR '.join(spans)})" if spans else "FALSE"


def merge_audit_events(spark: SparkSession, settings: Settings, audit_df: DataFrame, days: list[date]) -> bool:
    """MERGE audit rows into gold.audit_events on event_id, reading only the partitions of `days`.

    A new event is inserted; a stored one is replaced only by a row that `filter_first_per_event` would
    prefer, so the table ends the same whichever order the batches were published in. When none of the
    rows is stored yet (the usual case), they are appended instead, which is what the MERGE would do.

    Rows are sorted by time within each day before the write, so files keep time-ordered statistics.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        audit_df: deduplicated audit rows whose event_date is one of `days`.
        days: the event dates of `audit_df` (the MERGE's partition filter).

    Returns:
        True when the rows were appended (none of their events was stored), False after a MERGE.
    """
    columns = table_spec(AUDIT_TABLE).column_names
    target = table_name(settings, AUDIT_TABLE)
    source_df = audit_df.select(*columns).repartition("event_date").sortWithinPartitions("event_date", "timestamp")
    updates = ", ".join(f"t.{c} = s.{c}" for c in columns if c not in ("event_id", "event_date"))
    # The row kept for an event must not depend on which batch came first: a row that sorts before the
    # stored one (a usage document before a derived row, then the smaller source id) replaces it.
    rank_s = f"CASE WHEN s.origin = '{ORIGIN_USAGE}' THEN 0 ELSE 1 END"
    rank_t = f"CASE WHEN t.origin = '{ORIGIN_USAGE}' THEN 0 ELSE 1 END"
    preferred = f"({rank_s} < {rank_t} OR ({rank_s} = {rank_t} AND s.source_id < t.source_id))"
    stored_df = (
        read_table(spark, settings, AUDIT_TABLE)
        .filter(F.expr(days_condition("event_date", days)))
        .select("event_date", "event_id")
    )
    if not any_stored(audit_df, stored_df, ["event_date", "event_id"]):
        # Usually every event is new: then an append writes the new rows alone, where the MERGE would
        # read and rewrite the days' files. The run lock keeps other writers out in between.
        append(source_df, settings, AUDIT_TABLE)
        return True
    merge(
        spark,
        source_df,
        lambda source: (
            f"MERGE INTO {target} AS t USING {source} AS s "
            f"ON {days_condition('t.event_date', days)} AND t.event_date = s.event_date AND t.event_id = s.event_id "
            f"WHEN MATCHED AND {preferred} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN {insert_row(AUDIT_TABLE)}"
        ),
        view_name="publish_audit_source",
    )
    return False


def refresh_actor_activity(
    spark: SparkSession,
    settings: Settings,
    days: list[date],
    batch_ids: list[str] | None = None,
    actors: Collection[str | None] | None = None,
) -> None:
    """Recompute gold.actor_activity_daily for `days` from gold.audit_events and silver events.

    Change categories count the silver events of batches this stage has published (plus `batch_ids`,
    being published now), so the aggregates never run ahead of the audit table.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        days: the activity dates to recompute.
        batch_ids: batches being published in this run, counted as published.
        actors: when given, only these actors' rows of `days` are recomputed and replaced (None in it
            stands for events without an actor); the days' other rows stay as stored. Default: the days
            are replaced whole.
    """
    if not days:
        return
    audit_df = read_table(spark, settings, AUDIT_TABLE).filter(F.expr(days_condition("event_date", days)))
    published_df = (
        read_table(spark, settings, STAGE_PROGRESS).filter(F.col("stage") == F.lit(STAGE)).select("batch_id")
    )
    if batch_ids:
        published_df = published_df.unionByName(spark.createDataFrame([(b,) for b in batch_ids], "batch_id string"))
    changes_df = (
        read_table(spark, settings, ENTITY_CHANGE_EVENTS)
        .filter(F.expr(days_condition("event_date", days)))
        .join(published_df.distinct(), "batch_id", "left_semi")
    )
    predicate = days_condition("activity_date", days)
    if actors is not None:
        audit_df = audit_df.filter(F.expr(_actor_predicate("actor_urn", actors)))
        changes_df = changes_df.filter(F.expr(_actor_predicate("actor", actors)))
        predicate = f"{predicate} AND ({_actor_predicate('actor_urn', actors)})"
    replace_where(to_actor_activity_daily(audit_df, changes_df), settings, ACTIVITY_TABLE, predicate)


def optimize_audit_events(
    spark: SparkSession | None, settings: Settings, row_group_rows: int = AUDIT_ROW_GROUP_ROWS
) -> dict[str, Any]:
    """Compact gold.audit_events: each day's rows sorted by time, in row groups of `row_group_rows`.

    The sorted time column is delta-encoded.

    Args:
        spark: the session (None with the embedded engine, whose maintenance runs through delta-rs).
        settings: the lakehouse settings.
        row_group_rows: the most rows per Parquet row group.
    """
    return maintenance_for(settings, spark).optimize(
        AUDIT_TABLE, zorder_by=AUDIT_ZORDER, row_group_rows=row_group_rows, delta_encoded=AUDIT_DELTA_ENCODED
    )
