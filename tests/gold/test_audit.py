"""Audit rows from usage and change events, actor activity, and the search query run on each engine."""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from conf.tables import table_spec
from gold.audit import (
    AUDIT_COLUMNS,
    to_actor_activity_daily,
    to_audit_events,
    to_audit_events_from_changes,
    to_audit_events_from_usage,
)
from gold.scroll_ids import ScrollSigner
from gold.search import build_histogram_sql, build_search_sql, to_response
from gold.search_request import SearchRequest
from tests.pipelines.audit_inputs import change_event, rows_df, usage_event

pytestmark = pytest.mark.pure

T0 = 1_700_000_000_000
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
FIELD = f"urn:li:schemaField:({DATASET},amount)"
ALICE, BOB, ADMIN = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:admin"


def _by_type(rows):
    return {r["event_type"]: r for r in rows}


def test_usage_events_map_to_audit_rows(pure_spark):
    usage_df = rows_df(
        pure_spark,
        "bronze.usage_events",
        [
            usage_event("LogInEvent", ALICE, T0, login_source="passwordLogin", source_ip="10.1.1.1",
                        event_source="GRAPHQL", user_agent="Mozilla/5.0", trace_id="tr-1"),  # fmt: skip
            usage_event("FailedLogInEvent", BOB, T0 + 1, login_source="OIDC_IMPLICIT_LOGIN"),
            usage_event("LogInEvent", BOB, T0 + 2, login_source="signUpLinkLogin"),
            usage_event("UpdatePolicyEvent", ADMIN, T0 + 3, entity_urn="urn:li:dataHubPolicy:p1",
                        entity_type="dataHubPolicy", aspect_name="dataHubPolicyInfo"),  # fmt: skip
        ],
    )
    audit_df = to_audit_events_from_usage(usage_df)
    assert tuple(audit_df.columns) == table_spec("gold.audit_events").column_names == AUDIT_COLUMNS
    rows = [r.asDict() for r in audit_df.orderBy("timestamp").collect()]
    assert [r["login_source"] for r in rows] == ["PASSWORD_LOGIN", "OIDC_IMPLICIT_LOGIN", "SIGN_UP_LINK_LOGIN", None]
    login = rows[0]
    assert (login["source_ip"], login["event_source"], login["user_agent"], login["telemetry_trace_id"]) == (
        "10.1.1.1", "GRAPHQL", "Mozilla/5.0", "tr-1")  # fmt: skip
    assert json.loads(login["raw_event"])["loginSource"] == "passwordLogin"  # the document as it came
    assert login["origin"] == "usage" and str(login["event_date"]) == "2023-11-14"
    policy = rows[3]
    assert (policy["entity_urn"], policy["entity_type"], policy["aspect_name"]) == (
        "urn:li:dataHubPolicy:p1", "dataHubPolicy", "dataHubPolicyInfo")  # fmt: skip
    assert len({r["event_id"] for r in rows}) == 4 and all(len(r["event_id"]) == 64 for r in rows)


def test_one_audit_row_per_change_set_with_its_type(pure_spark):
    changes_df = rows_df(
        pure_spark,
        "silver.entity_change_events",
        [
            change_event("cs-tags", "TAG", "ADD", ALICE, T0, DATASET, "globalTags", modifier="urn:li:tag:pii"),
            change_event("cs-tags", "TAG", "ADD", ALICE, T0, DATASET, "globalTags", entity_urn=FIELD,
                         modifier="urn:li:tag:money"),  # fmt: skip
            change_event("cs-schema", "TECHNICAL_SCHEMA", "ADD", ALICE, T0 + 5, DATASET, "schemaMetadata",
                         entity_urn=FIELD),  # fmt: skip
            change_event("cs-user", "LIFECYCLE", "CREATE", ADMIN, T0 + 10, "urn:li:corpuser:new", "corpUserKey",
                         aspect_entity_type="corpUser"),  # fmt: skip
            change_event("cs-ds-create", "LIFECYCLE", "CREATE", ADMIN, T0 + 11, DATASET, "datasetKey"),
            change_event("cs-delete", "LIFECYCLE", "HARD_DELETE", ADMIN, T0 + 20, DATASET, "datasetKey"),
        ],
    )
    rows = [r.asDict() for r in to_audit_events_from_changes(changes_df).orderBy("timestamp").collect()]
    assert [(r["event_type"], r["source_id"]) for r in rows] == [
        ("UpdateAspectEvent", "cs-tags"),
        ("UpdateAspectEvent", "cs-schema"),
        ("CreateUserEvent", "cs-user"),
        ("UpdateAspectEvent", "cs-ds-create"),
        ("DeleteEntityEvent", "cs-delete"),
    ]
    tags = rows[0]
    assert (tags["entity_urn"], tags["entity_type"], tags["aspect_name"], tags["actor_urn"]) == (
        DATASET, "dataset", "globalTags", ALICE)  # fmt: skip
    assert all("schemaField" not in r["entity_urn"] for r in rows)
    raw = json.loads(tags["raw_event"])
    assert raw["type"] == "UpdateAspectEvent" and raw["changeSetId"] == "cs-tags"
    assert raw["changeCategories"] == ["TAG"] and raw["changeCount"] == 2 and raw["entityUrn"] == DATASET
    assert rows[2]["entity_urn"] == "urn:li:corpuser:new" and rows[2]["origin"] == "change"


def test_same_type_actor_time_entity_and_aspect_is_one_event(pure_spark):
    usage = [
        usage_event("UpdateAspectEvent", ALICE, T0, "b-1", entity_urn=DATASET, entity_type="dataset",
                    aspect_name="globalTags", source_ip="10.0.0.9"),  # fmt: skip
        usage_event("LogInEvent", ALICE, T0, "b-1", login_source="passwordLogin"),
        usage_event("LogInEvent", ALICE, T0, "b-2", login_source="passwordLogin", source_ip="10.0.0.2"),
    ]
    changes = [change_event("cs-1", "TAG", "ADD", ALICE, T0, DATASET, "globalTags")]
    audit_df = to_audit_events(
        rows_df(pure_spark, "bronze.usage_events", usage), rows_df(pure_spark, "silver.entity_change_events", changes)
    )
    rows = _by_type([r.asDict() for r in audit_df.collect()])
    assert audit_df.count() == 2
    assert rows["UpdateAspectEvent"]["origin"] == "usage" and rows["UpdateAspectEvent"]["source_ip"] == "10.0.0.9"


def test_activity_counts_per_actor_and_day(pure_spark):
    day2 = T0 + 86_400_000
    usage = [
        usage_event("LogInEvent", ALICE, T0, login_source="passwordLogin"),
        usage_event("FailedLogInEvent", ALICE, T0 + 1),
        usage_event("FailedLogInEvent", ALICE, T0 + 2),
        usage_event("EntityEvent", ALICE, T0 + 3, entity_urn="urn:li:chart:(looker,c1)", entity_type="chart"),
        usage_event("LogInEvent", ALICE, day2),
    ]
    changes = [
        change_event("cs-1", "TAG", "ADD", ALICE, T0 + 4, DATASET, "globalTags"),
        change_event("cs-1", "TAG", "REMOVE", ALICE, T0 + 4, DATASET, "globalTags", entity_urn=FIELD),
        change_event("cs-2", "OWNER", "ADD", ALICE, T0 + 5, DATASET, "ownership"),
        change_event("cs-3", "LIFECYCLE", "HARD_DELETE", BOB, T0 + 6, DATASET, "datasetKey"),
    ]
    usage_df = rows_df(pure_spark, "bronze.usage_events", usage)
    changes_df = rows_df(pure_spark, "silver.entity_change_events", changes)
    activity_df = to_actor_activity_daily(to_audit_events(usage_df, changes_df), changes_df)
    assert tuple(activity_df.columns) == table_spec("gold.actor_activity_daily").column_names
    rows = {(r.actor_urn, str(r.activity_date)): r.asDict() for r in activity_df.collect()}
    alice = rows[(ALICE, "2023-11-14")]
    assert alice["events_total"] == 6
    assert json.loads(alice["events_by_type"]) == {"EntityEvent": 1, "FailedLogInEvent": 2, "LogInEvent": 1,
                                                   "UpdateAspectEvent": 2}  # fmt: skip
    assert json.loads(alice["changes_by_category"]) == {"OWNER": 1, "TAG": 2}
    assert (alice["distinct_entities"], alice["distinct_entity_types"]) == (2, 2)
    assert (alice["first_event_time"], alice["last_event_time"], alice["failed_logins"], alice["deletes"]) == (
        T0, T0 + 5, 2, 0)  # fmt: skip
    assert json.loads(rows[(ALICE, "2023-11-15")]["changes_by_category"]) == {}
    assert rows[(BOB, "2023-11-14")]["deletes"] == 1


def test_search_sql_orders_pages_and_resists_injection_on_each_engine(pure_spark):
    tricky = "urn:li:corpuser:o'brien\\"
    usage = [
        usage_event("LogInEvent", ALICE, T0 + 10),
        usage_event("LogInEvent", BOB, T0 + 10),
        usage_event("FailedLogInEvent", BOB, T0 + 10),
        usage_event("LogInEvent", tricky, T0 + 9),
        usage_event("UpdateAspectEvent", ALICE, T0 + 8, entity_urn=DATASET, entity_type="dataset", aspect_name="ownership"),
        usage_event("LogInEvent", ALICE, T0 + 7),
        usage_event("LogInEvent", ALICE, T0 - 1),  # before the window
    ]
    audit_df = to_audit_events_from_usage(rows_df(pure_spark, "bronze.usage_events", usage))
    audit_df.createOrReplaceTempView("audit_search_view")
    window = {"startTime": str(T0), "endTime": str(T0 + 11)}

    def query(request, since_ms=None):
        rows = pure_spark.sql(build_search_sql(request, "audit_search_view", T0 + 100, since_ms=since_ms)).collect()
        total = sum(r["n"] for r in pure_spark.sql(build_histogram_sql(request, "audit_search_view", T0 + 100)).collect())
        return [r.asDict() for r in rows], total

    def run(params, body=None):
        return query(SearchRequest.parse({**window, **params}, body).with_window(T0 + 100))

    everything, total = run({"size": "100"})
    expected = sorted(
        (r for r in audit_df.collect() if r.timestamp >= T0),
        key=lambda r: (-r.timestamp, r.event_type, r.actor_urn, r.event_id),
    )
    assert [r["event_id"] for r in everything] == [r.event_id for r in expected] and total == 6
    seen, scroll = [], None
    while True:
        page_params = {"size": "4", **({"scrollId": scroll} if scroll else {})}
        request = SearchRequest.parse({**window, **page_params}, signer=ScrollSigner(b"k" * 32)).with_window(T0 + 100)
        response = to_response(*query(request), request)
        seen += [(e["timestamp"], e["eventType"], e["actorUrn"]) for e in response["usageEvents"]]
        scroll = response.get("nextScrollId")
        if not scroll:
            break
    assert seen == [(r.timestamp, r.event_type, r.actor_urn) for r in expected]
    newest_slice, _ = query(SearchRequest.parse({**window, "size": "3"}).with_window(T0 + 100), since_ms=T0 + 9)
    assert [r["timestamp"] for r in newest_slice] == [T0 + 10] * 3
    assert run({}, {"actorUrns": [tricky]})[1] == 1
    for key in ("actorUrns", "entityTypes", "aspectTypes"):
        for value in ("x' OR '1'='1", "x\\' OR 1=1 --", "') OR 1=1 --"):
            assert run({}, {key: [value]}) == ([], 0)
    assert run({}, {"eventTypes": ["LogInEvent"], "actorUrns": [ALICE]})[1] == 2
    assert run({}, {"entityTypes": ["dataset"], "aspectTypes": ["ownership"]})[1] == 1
    pure_spark.catalog.dropTempView("audit_search_view")


def test_event_dates_are_utc_days(pure_spark):
    df = pure_spark.createDataFrame([(0,), (86_399_999,), (86_400_000,), (-1,)], "timestamp bigint")
    from gold.audit import to_event_date

    dated_df = df.select("timestamp", to_event_date(F.col("timestamp")).alias("d"))
    expected_df = pure_spark.createDataFrame(
        [(0, "1970-01-01"), (86_399_999, "1970-01-01"), (86_400_000, "1970-01-02"), (-1, "1969-12-31")],
        "timestamp bigint, d string",
    ).select("timestamp", F.col("d").cast("date").alias("d"))
    assert_df_equality(dated_df, expected_df, ignore_row_order=True, ignore_nullable=True)
