"""publish_audit on real Delta tables: audit rows, activity days, idempotent re-runs, the rolling view."""

from __future__ import annotations

import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from conf.tables import table_name
from pipelines.runtime.io import read_table
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import pending_batches
from pipelines.batch.publish_audit import optimize_audit_events, publish_audit
from tests.pipelines.audit_inputs import change_event, day_of, land_refined_batch, usage_event

DAY = 86_400_000
NOW = int(time.time() * 1000)
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
ALICE, BOB, ADMIN = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:admin"


@pytest.fixture(scope="module")
def published(spark, lakehouse):
    """Two refined batches over three days, published once."""
    land_refined_batch(
        spark,
        lakehouse,
        "b-1",
        usage=[
            usage_event("LogInEvent", ALICE, NOW - 2 * DAY, "b-1", login_source="passwordLogin"),
            usage_event("FailedLogInEvent", BOB, NOW - 2 * DAY + 5, "b-1", login_source="SSO_LOGIN"),
            usage_event("EntityEvent", ALICE, NOW - DAY, "b-1", entity_urn=DATASET, entity_type="dataset"),
        ],
        changes=[
            change_event("cs-1", "TAG", "ADD", ALICE, NOW - DAY + 10, DATASET, "globalTags", "b-1"),
            change_event("cs-1", "TAG", "ADD", ALICE, NOW - DAY + 10, DATASET, "globalTags", "b-1",
                         entity_urn=f"urn:li:schemaField:({DATASET},amount)"),  # fmt: skip
        ],
    )
    land_refined_batch(
        spark,
        lakehouse,
        "b-2",
        usage=[usage_event("LogInEvent", ALICE, NOW - 2 * DAY, "b-2", login_source="PASSWORD_LOGIN")],  # a duplicate
        changes=[
            change_event("cs-2", "LIFECYCLE", "CREATE", ADMIN, NOW - 1000, "urn:li:corpuser:carol", "corpUserKey",
                         "b-2", aspect_entity_type="corpuser"),  # fmt: skip
            change_event("cs-3", "LIFECYCLE", "HARD_DELETE", ADMIN, NOW - 500, DATASET, "datasetKey", "b-2"),
        ],
    )
    first = publish_audit(spark, lakehouse, run_id="run-1")
    return first


def test_publish_writes_one_row_per_event(spark, lakehouse, published):
    assert published.batch_ids == ("b-1", "b-2")
    assert published.rows_in == 8 and published.rows_out == 6  # the repeated login is one event
    rows = read_table(spark, lakehouse, "gold.audit_events").orderBy("timestamp").collect()
    assert [r.event_type for r in rows] == [
        "LogInEvent", "FailedLogInEvent", "EntityEvent", "UpdateAspectEvent", "CreateUserEvent", "DeleteEntityEvent",
    ]  # fmt: skip
    assert rows[0].login_source == "PASSWORD_LOGIN"
    assert len({r.event_id for r in rows}) == len(rows)
    assert pending_batches(spark, lakehouse, "publish_audit") == []


def test_rerun_adds_nothing_and_late_batches_refresh_only_their_days(spark, lakehouse, published):
    before = {r.event_id for r in read_table(spark, lakehouse, "gold.audit_events").collect()}
    again = publish_audit(spark, lakehouse)
    assert again.batch_ids == () and {r.event_id for r in read_table(spark, lakehouse, "gold.audit_events").collect()} == before
    versions = maintenance_for(lakehouse, spark)
    activity_version = versions.version("gold.actor_activity_daily")
    # A crash after the MERGE but before progress: the same batch again, then the stage re-runs it.
    land_refined_batch(spark, lakehouse, "b-3", usage=[usage_event("LogInEvent", BOB, NOW - 100, "b-3")])
    first = publish_audit(spark, lakehouse)
    spark.sql(f"DELETE FROM {table_name(lakehouse, 'ops.stage_progress')} WHERE stage = 'publish_audit' AND batch_id = 'b-3'")
    second = publish_audit(spark, lakehouse)
    assert first.rows_out == second.rows_out == 1
    assert read_table(spark, lakehouse, "gold.audit_events").count() == len(before) + 1
    commits = versions.history("gold.actor_activity_daily", limit=versions.version("gold.actor_activity_daily") - activity_version)
    predicates = " ".join(str(c.parameters) for c in commits)
    assert str(day_of(NOW - 100)) in predicates and str(day_of(NOW - 2 * DAY)) not in predicates


def direct_activity_count(audit_df):
    """gold.actor_activity_daily's counted columns, computed straight from the audit rows."""
    return audit_df.groupBy("actor_urn", F.col("event_date").alias("activity_date")).agg(
        F.count(F.lit(1)).alias("events_total"),
        F.countDistinct("entity_urn").alias("distinct_entities"),
        F.min("timestamp").alias("first_event_time"),
        F.max("timestamp").alias("last_event_time"),
        F.sum(F.when(F.col("event_type") == "FailedLogInEvent", 1).otherwise(0)).cast("bigint").alias("failed_logins"),
        F.sum(F.when(F.col("event_type") == "DeleteEntityEvent", 1).otherwise(0)).cast("bigint").alias("deletes"),
    )


def test_activity_matches_a_direct_count_over_the_audit_table(spark, lakehouse, published):
    expected_df = direct_activity_count(read_table(spark, lakehouse, "gold.audit_events"))
    actual_df = read_table(spark, lakehouse, "gold.actor_activity_daily").select(*expected_df.columns)
    assert_df_equality(actual_df, expected_df, ignore_row_order=True, ignore_nullable=True)
    alice_day = (
        read_table(spark, lakehouse, "gold.actor_activity_daily")
        .filter((F.col("actor_urn") == ALICE) & (F.col("activity_date") == F.lit(str(day_of(NOW - DAY))).cast("date")))
        .collect()
    )
    assert [(r.changes_by_category, r.events_by_type) for r in alice_day] == [
        ('{"TAG":2}', '{"EntityEvent":1,"UpdateAspectEvent":1}')
    ]


def test_rolling_view_sums_the_last_7_and_30_days(spark, lakehouse, published):
    rows = {r.actor_urn: r for r in spark.sql(f"SELECT * FROM {table_name(lakehouse, 'gold.actor_activity_daily').rsplit('.', 1)[0]}.actor_activity_rolling").collect()}
    alice = rows[ALICE]
    assert (alice.events_7d, alice.events_30d, alice.active_days_7d, alice.distinct_entities_7d) == (3, 3, 2, 1)
    assert rows[BOB].failed_logins_7d == 1 and rows[ADMIN].deletes_30d == 1


def test_compaction_keeps_every_row(spark, lakehouse, published):
    before = read_table(spark, lakehouse, "gold.audit_events").orderBy("event_id").collect()
    optimize_audit_events(spark, lakehouse)
    assert read_table(spark, lakehouse, "gold.audit_events").orderBy("event_id").collect() == before


def test_the_kept_row_does_not_depend_on_the_batch_order(spark, lakehouse, published):
    ts = NOW - 3 * DAY
    later = usage_event("LogInEvent", "urn:li:corpuser:dana", ts, "b-late", source_ip="10.9.9.9")
    earlier = usage_event("LogInEvent", "urn:li:corpuser:dana", ts, "b-early", source_ip="10.1.1.1")
    later["record_hash"], earlier["record_hash"] = "f" * 64, "0" * 64  # the same event, landed twice
    land_refined_batch(spark, lakehouse, "b-late", usage=[later])
    publish_audit(spark, lakehouse)
    land_refined_batch(spark, lakehouse, "b-early", usage=[earlier])
    publish_audit(spark, lakehouse)
    rows = read_table(spark, lakehouse, "gold.audit_events").filter(F.col("actor_urn") == "urn:li:corpuser:dana").collect()
    assert [(r.source_id, r.source_ip, r.batch_id) for r in rows] == [("0" * 64, "10.1.1.1", "b-early")]


def test_a_batch_of_new_events_recomputes_its_actors_days_and_keeps_the_other_rows(spark, lakehouse, published):
    day = NOW - 4 * DAY
    frank, gina = "urn:li:corpuser:frank", "urn:li:corpuser:o'neil"
    land_refined_batch(
        spark,
        lakehouse,
        "b-5",
        usage=[
            usage_event("LogInEvent", frank, day, "b-5"),
            usage_event("LogInEvent", gina, day + 1, "b-5"),
            usage_event("FailedLogInEvent", None, day + 2, "b-5"),
        ],
        changes=[change_event("cs-5", "TAG", "ADD", frank, day + 3, DATASET, "globalTags", "b-5")],
    )
    publish_audit(spark, lakehouse)

    def activity_rows():
        rows = read_table(spark, lakehouse, "gold.actor_activity_daily").filter(
            F.col("activity_date") == F.lit(str(day_of(day))).cast("date")
        )
        return {r.actor_urn: r for r in rows.collect()}

    before = activity_rows()
    land_refined_batch(
        spark,
        lakehouse,
        "b-6",
        usage=[
            usage_event("EntityEvent", frank, day + 10, "b-6", entity_urn=DATASET, entity_type="dataset"),
            usage_event("FailedLogInEvent", None, day + 11, "b-6"),
        ],
        changes=[change_event("cs-6", "DOCUMENTATION", "MODIFY", frank, day + 12, DATASET, "datasetProperties", "b-6")],
    )
    publish_audit(spark, lakehouse)
    after = activity_rows()

    assert after[gina] == before[gina]
    assert (after[None].events_total, after[None].failed_logins) == (2, 2)
    assert (after[frank].events_total, after[frank].changes_by_category) == (4, '{"DOCUMENTATION":1,"TAG":1}')
    expected_df = direct_activity_count(read_table(spark, lakehouse, "gold.audit_events"))
    actual_df = read_table(spark, lakehouse, "gold.actor_activity_daily").select(*expected_df.columns)
    assert_df_equality(actual_df, expected_df, ignore_row_order=True, ignore_nullable=True)


def test_a_batch_days_are_named_by_their_runs_of_consecutive_days():
    from datetime import date, timedelta

    from pipelines.batch.publish_audit import days_condition

    first = date(2026, 2, 27)
    days = [first + timedelta(days=n) for n in (0, 1, 2, 3, 5, 9, 10)] + [first]
    assert days_condition("d", days) == (
        "(d BETWEEN DATE'2026-02-27' AND DATE'2026-03-02' OR d BETWEEN DATE'2026-03-04' AND DATE'2026-03-04'"
        " OR d BETWEEN DATE'2026-03-08' AND DATE'2026-03-09')"
    )
    a_year = [first + timedelta(days=n) for n in range(366)]
    assert days_condition("d", a_year) == "(d BETWEEN DATE'2026-02-27' AND DATE'2027-02-27')"
    assert days_condition("d", []) == "FALSE"
