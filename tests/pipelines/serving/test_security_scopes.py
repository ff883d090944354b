"""Scopes and masked fields, against the real server on loopback: a scoped token sees its rows and totals only."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import datetime, timezone

import httpx
import pytest

from gold.scopes import SENSITIVE_EVENT_FIELDS, parse_scope
from pipelines.audit_trail.report_format import REPORT_COLUMNS
from gold.search_request import SearchRequest
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.runtime.io import append
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.report import REPORT_PATH
from pipelines.serving.search import search as spark_search
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch, rows_df, usage_event

NOW = int(time.time() * 1000)
HIVE_ORDERS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
HIVE_USERS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.users,PROD)"
SNOWFLAKE_SALES = "urn:li:dataset:(urn:li:dataPlatform:snowflake,sales.daily,PROD)"
LOOKER_DASHBOARD = "urn:li:dashboard:(looker,sales)"
FINANCE, SALES = "urn:li:domain:finance", "urn:li:domain:sales"
DOMAINS = {HIVE_ORDERS: FINANCE, SNOWFLAKE_SALES: SALES, LOOKER_DASHBOARD: SALES}
ALICE, BOB = "urn:li:corpuser:alice", "urn:li:corpuser:bob"
WINDOW = {"startTime": str(NOW - 10 * 3_600_000), "endTime": str(NOW + 60_000), "size": "10000"}
# Each scope, and the SQL condition over gold.audit_events that selects the same rows, written by hand.
SCOPES = {
    "finance": (["domain=" + FINANCE], f"domain = '{FINANCE}'"),
    "hive": (["platform=hive"], "entity_urn LIKE '%urn:li:dataPlatform:hive,%'"),
    "looker-or-snowflake": (
        ["platform=looker", "platform=snowflake"],
        "(entity_urn LIKE 'urn:li:dashboard:(looker,%' OR entity_urn LIKE '%dataPlatform:snowflake,%')",
    ),
    "dashboards": (["entity-type=dashboard"], "entity_type = 'dashboard'"),
    "users-table": (["prefix=" + HIVE_USERS[:-6]], f"entity_urn LIKE '{HIVE_USERS[:-6]}%'"),
    "sales-datasets": (["domain=" + SALES, "entity-type=dataset"], f"domain = '{SALES}' AND entity_type = 'dataset'"),
}
# The same scopes over silver.entity_change_events `c`, by the entity whose aspect was written, its domain `d`
# the one on the entity's newest audit row; written by hand.
CHANGE_SCOPES = {
    "finance": f"d.domain = '{FINANCE}'",
    "hive": "c.aspect_entity_urn LIKE '%urn:li:dataPlatform:hive,%'",
    "looker-or-snowflake": "(c.aspect_entity_urn LIKE 'urn:li:dashboard:(looker,%' OR c.aspect_entity_urn LIKE '%dataPlatform:snowflake,%')",
    "dashboards": "c.aspect_entity_type = 'dashboard'",
    "users-table": f"c.aspect_entity_urn LIKE '{HIVE_USERS[:-6]}%'",
    "sales-datasets": f"d.domain = '{SALES}' AND c.aspect_entity_type = 'dataset'",
}
ORDERS_FIELD = f"urn:li:schemaField:({HIVE_ORDERS},amount)"


def _state_row(entity_urn: str, domain: str) -> dict:
    """A silver.aspect_state row: the entity's current `domains` aspect."""
    return {
        "entity_urn": entity_urn, "entity_type": entity_urn.split(":")[2], "aspect_name": "domains",
        "aspect_json": json.dumps({"domains": [domain]}), "version": 0, "order_key": "0", "change_type": "UPSERT",
        "created_time": NOW, "created_actor": ALICE, "deleted": False, "entity_deleted": False, "record_hash": "h" + domain,
        "batch_id": "scope-0", "updated_at": datetime.now(timezone.utc), "source_file": "f", "line_number": 1,
        "prev_version": None, "prev_order_key": None, "prev_change_type": None, "prev_created_time": None,
        "prev_created_actor": None, "prev_record_hash": None, "prev_batch_id": None,
    }  # fmt: skip


def _usage(batch_id: str) -> list[dict]:
    rows = []
    entities = [(HIVE_ORDERS, "dataset"), (HIVE_USERS, "dataset"), (SNOWFLAKE_SALES, "dataset"), (LOOKER_DASHBOARD, "dashboard")]
    for i in range(40):
        ts = NOW - 60_000 - i * 300_000
        actor = (ALICE, BOB)[i % 2]
        if i % 5 == 0:
            rows.append(usage_event("LogInEvent", actor, ts, batch_id, source_ip="10.1.2.3", user_agent="curl/8"))
            continue
        entity, kind = entities[i % 4]
        rows.append(usage_event("UpdateAspectEvent", actor, ts, batch_id, entity_urn=entity, entity_type=kind,
                                aspect_name="ownership", source_ip="10.9.9.9", user_agent="Mozilla/5.0"))  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def scoped_api(spark, lakehouse):
    """Audit events over four entities in two domains, one token per scope, and the server on loopback."""
    append(rows_df(spark, "silver.aspect_state", [_state_row(u, d) for u, d in DOMAINS.items()]), lakehouse, "silver.aspect_state")
    land_refined_batch(
        spark, lakehouse, "scope-1", usage=_usage("scope-1"),
        changes=[change_event("cs-s1", "TAG", "ADD", ALICE, NOW - 90_000, HIVE_ORDERS, "globalTags", "scope-1"),
                 change_event("cs-s2", "TAG", "ADD", BOB, NOW - 95_000, LOOKER_DASHBOARD, "globalTags", "scope-1",
                              aspect_entity_type="dashboard"),
                 change_event("cs-s3", "TECHNICAL_SCHEMA", "ADD", BOB, NOW - 96_000, HIVE_ORDERS, "schemaMetadata",
                              "scope-1", entity_urn=ORDERS_FIELD),
                 change_event("cs-s4", "TAG", "REMOVE", ALICE, NOW - 97_000, HIVE_USERS, "globalTags", "scope-1"),
                 change_event("cs-s5", "DOCUMENTATION", "ADD", BOB, NOW - 98_000, SNOWFLAKE_SALES,
                              "editableDatasetProperties", "scope-1"),
                 change_event("cs-s6", "OWNER", "ADD", ALICE, NOW - 99_000, SNOWFLAKE_SALES, "ownership", "scope-1")],
    )  # fmt: skip
    publish_audit(spark, lakehouse)
    publish_openmetadata(spark, lakehouse)  # chains the change events: the report shows chained batches only
    tokens = {name: create_token(lakehouse, ALICE, ["audit-read"], scope=parse_scope(specs))[0]
              for name, (specs, _) in SCOPES.items()}  # fmt: skip
    tokens["plain"] = create_token(lakehouse, ALICE, ["audit-read"])[0]
    tokens["sensitive"] = create_token(lakehouse, ALICE, ["audit-read-sensitive"])[0]
    tokens["admin"] = create_token(lakehouse, ALICE, ["admin"])[0]
    with serving(create_app(lakehouse, spark)) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
        yield {"client": client, "tokens": tokens, "spark": spark, "settings": lakehouse}


def _search(api, token_name: str, body: dict | None = None, params: dict | None = None) -> httpx.Response:
    return api["client"].post(
        SEARCH_PATH, params=params or WINDOW, json=body or {},
        headers={"Authorization": f"Bearer {api['tokens'][token_name]}"},
    )  # fmt: skip


def _sql_ids(api, condition: str) -> set[str]:
    table = "gold.audit_events"
    sql = (f"SELECT event_id FROM {table} WHERE timestamp >= {WINDOW['startTime']} AND timestamp < {WINDOW['endTime']} "
           f"AND ({condition})")  # fmt: skip
    return {r.event_id for r in api["spark"].sql(sql).collect()}


def _ids(api, response: dict) -> set[str]:
    # The response carries no event id: match rows by (type, actor, time, entity), unique in this data.
    keys = {(e["eventType"], e["actorUrn"], e["timestamp"], e.get("entityUrn")) for e in response["usageEvents"]}
    rows = api["spark"].sql("SELECT event_id, event_type, actor_urn, timestamp, entity_urn FROM gold.audit_events").collect()
    return {r.event_id for r in rows if (r.event_type, r.actor_urn, r.timestamp, r.entity_urn) in keys}


def test_the_publish_carries_each_entity_domain(scoped_api):
    rows = scoped_api["spark"].sql("SELECT DISTINCT entity_urn, domain FROM gold.audit_events").collect()
    assert {r.entity_urn: r.domain for r in rows if r.entity_urn} == {**DOMAINS, HIVE_USERS: None}


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_a_scoped_token_sees_only_its_rows_and_totals(scoped_api, name):
    expected = _sql_ids(scoped_api, SCOPES[name][1])
    assert expected, f"scope {name} selects no row: the test data misses it"
    response = _search(scoped_api, name)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["total"] == len(expected) == payload["count"]
    assert _ids(scoped_api, payload) == expected
    # A filter inside the scope narrows further; the total stays within the scope.
    narrowed = _search(scoped_api, name, body={"actorUrns": [BOB]}).json()
    assert narrowed["total"] == len(expected & _sql_ids(scoped_api, f"actor_urn = '{BOB}'"))


def test_the_spark_engine_applies_the_same_scope(scoped_api):
    for name, (specs, condition) in SCOPES.items():
        request = SearchRequest.parse(WINDOW, {})
        request = SearchRequest(**{**request.__dict__, "scope": parse_scope(specs)})
        answer = spark_search(scoped_api["spark"], scoped_api["settings"], request)
        assert answer["total"] == len(_sql_ids(scoped_api, condition)), name


def test_an_unscoped_token_sees_everything_but_sensitive_fields_are_absent_without_the_role(scoped_api):
    everything = _sql_ids(scoped_api, "true")
    plain = _search(scoped_api, "plain").json()
    assert plain["total"] == len(everything)
    for event in plain["usageEvents"]:
        assert not {"sourceIP", "userAgent", "rawUsageEvent"} & set(event), event
    sensitive = _search(scoped_api, "sensitive").json()
    assert sensitive["total"] == len(everything)
    logins = [e for e in sensitive["usageEvents"] if e["eventType"] == "LogInEvent"]
    assert logins and all(e["sourceIP"] == "10.1.2.3" and e["userAgent"] == "curl/8" for e in logins)
    assert all("rawUsageEvent" in e for e in sensitive["usageEvents"])
    assert _search(scoped_api, "admin").json()["usageEvents"][0].keys() == sensitive["usageEvents"][0].keys()


def test_per_actor_aggregates_refuse_scoped_tokens(scoped_api):
    client, tokens = scoped_api["client"], scoped_api["tokens"]
    for path, params in (("/api/v1/activity", {}), ("/api/v1/activity/actor", {"actor": ALICE}), ("/api/v1/anomalies", {})):
        refused = client.get(path, params=params, headers={"Authorization": f"Bearer {tokens['finance']}"})
        assert refused.status_code == 403 and "scope" in refused.json()["error"], path
        assert client.get(path, params=params, headers=_auth(scoped_api, "plain")).status_code == 200, path


def _auth(api, token_name: str) -> dict:
    return {"Authorization": f"Bearer {api['tokens'][token_name]}"}


def _sql_change_ids(api, condition: str) -> set[str]:
    newest_domains = (
        "SELECT entity_urn, domain FROM (SELECT entity_urn, domain, row_number() OVER (PARTITION BY entity_urn "
        "ORDER BY timestamp DESC, domain ASC) AS n FROM gold.audit_events WHERE entity_urn IS NOT NULL) WHERE n = 1"
    )
    sql = (f"SELECT c.event_id FROM silver.entity_change_events c LEFT JOIN ({newest_domains}) d "
           f"ON c.aspect_entity_urn = d.entity_urn WHERE {condition}")  # fmt: skip
    return {r.event_id for r in api["spark"].sql(sql).collect()}


@pytest.mark.parametrize("name", sorted(CHANGE_SCOPES))
def test_a_scoped_token_gets_only_its_change_events_and_totals(scoped_api, name):
    expected = _sql_change_ids(scoped_api, CHANGE_SCOPES[name])
    assert expected, f"scope {name} selects no change event: the test data misses it"
    client = scoped_api["client"]
    response = client.get("/api/v1/changes", params={"size": "1000"}, headers=_auth(scoped_api, name))
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["total"] == len(expected) == payload["count"]
    assert {c["eventId"] for c in payload["changes"]} == expected
    # One row a page: the total still counts the scope's rows only; a filter narrows within the scope.
    first_page = client.get("/api/v1/changes", params={"size": "1"}, headers=_auth(scoped_api, name)).json()
    assert first_page["total"] == len(expected) and first_page["count"] == 1
    by_bob = client.get("/api/v1/changes", params={"actor": BOB}, headers=_auth(scoped_api, name)).json()
    assert by_bob["total"] == len(expected & _sql_change_ids(scoped_api, f"c.actor = '{BOB}'"))


def test_an_unscoped_token_gets_every_change_event(scoped_api):
    payload = scoped_api["client"].get("/api/v1/changes", params={"size": "1000"}, headers=_auth(scoped_api, "plain")).json()
    assert payload["total"] == len(_sql_change_ids(scoped_api, "true"))


def test_a_timeline_outside_the_scope_is_not_found(scoped_api):
    client = scoped_api["client"]
    absent = "urn:li:dataset:(urn:li:dataPlatform:hive,db.absent,PROD)"
    # Outside the scope an entity that exists and one that does not get the same answer.
    for name, urn in (("hive", SNOWFLAKE_SALES), ("finance", SNOWFLAKE_SALES), ("finance", HIVE_USERS),
                      ("dashboards", HIVE_ORDERS), ("finance", absent)):  # fmt: skip
        timeline = client.get("/api/v1/timeline", params={"urn": urn}, headers=_auth(scoped_api, name))
        assert timeline.status_code == 404, (name, urn, timeline.text)
        as_of = client.get("/api/v1/timeline/as-of", params={"urn": urn, "at": str(NOW)}, headers=_auth(scoped_api, name))
        assert as_of.status_code == 404, (name, urn, as_of.text)
    # Inside the scope the timeline holds the entity's change events, its schema fields' included.
    for name in ("hive", "finance"):
        inside = client.get("/api/v1/timeline", params={"urn": HIVE_ORDERS}, headers=_auth(scoped_api, name))
        assert inside.status_code == 200, inside.text
        assert {e["change_set_id"] for e in inside.json()["events"]} == {"cs-s1", "cs-s3"}
        as_of = client.get("/api/v1/timeline/as-of", params={"urn": HIVE_ORDERS, "at": str(NOW)}, headers=_auth(scoped_api, name))
        assert as_of.status_code == 200, as_of.text
    field = client.get("/api/v1/timeline", params={"urn": ORDERS_FIELD}, headers=_auth(scoped_api, "finance"))
    assert [e["change_set_id"] for e in field.json()["events"]] == ["cs-s3"]
    # Inside the scope (by its urn) an entity without events is an empty timeline, as for an unscoped token.
    assert client.get("/api/v1/timeline", params={"urn": absent}, headers=_auth(scoped_api, "hive")).json()["events"] == []
    plain = client.get("/api/v1/timeline", params={"urn": SNOWFLAKE_SALES}, headers=_auth(scoped_api, "plain"))
    assert {e["change_set_id"] for e in plain.json()["events"]} == {"cs-s5", "cs-s6"}


def _report_rows(api, token_name: str, scope_label: str) -> list[dict]:
    response = api["client"].get(REPORT_PATH, params={"from": str(NOW - 3_600_000), "to": str(NOW + 60_000)},
                                 headers=_auth(api, token_name))  # fmt: skip
    assert response.status_code == 200, response.text
    # The header says whose view the report is: a scoped report is not the whole record.
    assert f"# scope: {scope_label}\r\n" in response.text
    body = "\r\n".join(line for line in response.text.split("\r\n") if not line.startswith("# "))
    reader = csv.DictReader(io.StringIO(body, newline=""))
    assert tuple(reader.fieldnames or ()) == REPORT_COLUMNS
    return list(reader)


@pytest.mark.parametrize(("name", "scope_label"), [("hive", "platform=hive"), ("finance", "domain=" + FINANCE), ("plain", "(all)")])
def test_the_report_of_a_scoped_token_holds_only_its_rows_and_no_sensitive_column(scoped_api, name, scope_label):
    condition = CHANGE_SCOPES.get(name, "true")
    rows = _report_rows(scoped_api, name, scope_label)
    assert {r["event_id"] for r in rows} == _sql_change_ids(scoped_api, condition) != set()
    sensitive = {*SENSITIVE_EVENT_FIELDS, "source_ip", "user_agent", "raw_event"}
    assert not sensitive & set(REPORT_COLUMNS)
