"""The audit search HTTP API: a real uvicorn server on loopback over real Delta tables."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.batch.publish_audit import publish_audit
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event

REPO = Path(__file__).resolve().parents[3]
NOW = int(time.time() * 1000)
HOUR = 3_600_000
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
DASHBOARD = "urn:li:dashboard:(looker,sales)"
ALICE, BOB, ADMIN = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:admin"
TRICKY = "urn:li:corpuser:o'brien"
INJECTIONS = ["x' OR '1'='1", "x\\' OR 1=1 --", "') OR ('1'='1", "'; DROP TABLE gold.audit_events; --"]


def _usage_rows(batch_id: str) -> list[dict]:
    rows = []
    for i in range(24):  # one event every 10 minutes over the last 4 hours, several kinds and actors
        actor = (ALICE, BOB, TRICKY)[i % 3]
        ts = NOW - 5 * 60_000 - i * 600_000
        if i % 4 == 0:
            rows.append(usage_event("LogInEvent", actor, ts, batch_id, login_source="passwordLogin", source_ip="10.0.0.1",
                                    event_source="GRAPHQL", user_agent="Mozilla/5.0", trace_id=f"t{i}"))  # fmt: skip
        elif i % 4 == 1:
            rows.append(usage_event("FailedLogInEvent", actor, ts, batch_id, login_source="SSO_LOGIN"))
        elif i % 4 == 2:
            rows.append(usage_event("EntityEvent", actor, ts, batch_id, entity_urn=DASHBOARD, entity_type="dashboard",
                                    aspect_name="dashboardInfo"))  # fmt: skip
        else:
            rows.append(usage_event("UpdateAspectEvent", actor, ts, batch_id, entity_urn=DATASET, entity_type="dataset",
                                    aspect_name="ownership"))  # fmt: skip
    # Three events at one instant: the order falls to type, then actor, then event id.
    rows += [usage_event("LogInEvent", a, NOW - 2 * HOUR, batch_id) for a in (BOB, ALICE)]
    rows.append(usage_event("EntityEvent", ALICE, NOW - 2 * HOUR, batch_id, entity_urn=DATASET, entity_type="dataset"))
    rows.append(usage_event("LogInEvent", ALICE, NOW - 30 * HOUR, batch_id))  # outside the default window
    return rows


@pytest.fixture(scope="module")
def api(spark, lakehouse):
    """Published audit events, three tokens, and the server running on loopback."""
    land_refined_batch(
        spark,
        lakehouse,
        "api-1",
        usage=_usage_rows("api-1"),
        changes=[
            change_event("cs-1", "TAG", "ADD", ADMIN, NOW - 3 * 60_000, DATASET, "globalTags", "api-1"),
            change_event("cs-2", "LIFECYCLE", "CREATE", ADMIN, NOW - 4 * 60_000, "urn:li:corpuser:carol",
                         "corpUserKey", "api-1", aspect_entity_type="corpuser"),  # fmt: skip
        ],
    )
    publish_audit(spark, lakehouse)
    # The contract's every field, source IPs and raw events included, is what the sensitive role sees.
    reader, _ = create_token(lakehouse, ADMIN, ["audit-read-sensitive"])
    other, _ = create_token(lakehouse, ADMIN, ["metrics-read"])
    with serving(create_app(lakehouse, spark)) as base_url:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            yield {"client": client, "reader": reader, "other": other, "spark": spark, "settings": lakehouse}


def _search(api, params=None, body=None, token="reader", raw_body=None):
    headers = {"Authorization": f"Bearer {api[token]}"} if token in ("reader", "other") else {}
    if token not in ("reader", "other", None):
        headers = {"Authorization": token}
    content = raw_body if raw_body is not None else json.dumps(body if body is not None else {})
    return api["client"].post(SEARCH_PATH, params=params or {}, content=content, headers=headers)


def _ok(api, params=None, body=None):
    response = _search(api, params, body)
    assert response.status_code == 200, response.text
    return response.json()


def _all(api, params=None, body=None):
    return _ok(api, {**(params or {}), "size": 10000}, body)


def test_health_and_openapi(api):
    health = api["client"].get("/health", headers={"Authorization": f"Bearer {api['reader']}"}).json()
    assert (health["status"], health["engine"]) == ("ok", "inprocess")
    assert health["auditEventsVersion"] >= 1  # created, then published into
    document = api["client"].get("/openapi.json").json()
    operation = document["paths"][SEARCH_PATH]["post"]
    # The spec's parameter table: types and defaults.
    assert {p["name"]: (p["schema"]["type"], p["schema"].get("format"), p["schema"].get("default"))
            for p in operation["parameters"]} == {
        "startTime": ("integer", "int64", -1), "endTime": ("integer", "int64", -1), "size": ("integer", "int32", 10),
        "scrollId": ("string", None, None), "includeRaw": ("boolean", None, True)}  # fmt: skip
    assert set(operation["requestBody"]["content"]["application/json"]["schema"]["properties"]) == {
        "eventTypes", "entityTypes", "aspectTypes", "actorUrns"}  # fmt: skip


def test_default_window_is_the_last_day_in_sorted_order(api):
    result = _all(api)
    events = result["usageEvents"]
    assert result["total"] == result["count"] == 29  # 27 usage rows in the last day + 2 change sets
    assert all(NOW - 24 * HOUR - 60_000 <= e["timestamp"] < NOW + 60_000 for e in events)
    keys = [(-e["timestamp"], e["eventType"], e["actorUrn"]) for e in events]
    assert keys == sorted(keys)
    tie = [(e["eventType"], e["actorUrn"]) for e in events if e["timestamp"] == NOW - 2 * HOUR]
    assert tie == [("EntityEvent", ALICE), ("LogInEvent", ALICE), ("LogInEvent", BOB)]
    assert "nextScrollId" not in result


def test_explicit_window_is_start_inclusive_end_exclusive(api):
    at = NOW - 2 * HOUR
    assert _ok(api, {"startTime": at, "endTime": at + 1})["total"] == 3
    assert _ok(api, {"startTime": at + 1, "endTime": at + 2})["total"] == 0
    assert _ok(api, {"startTime": at - 1, "endTime": at})["total"] == 0
    assert _ok(api, {"startTime": NOW - 31 * HOUR, "endTime": NOW - 29 * HOUR})["total"] == 1


def test_each_filter_alone_and_combined(api):
    # Expected counts come from the fixture above: 24 usage rows in turn LogIn, FailedLogIn, dashboard
    # EntityEvent, dataset ownership UpdateAspectEvent, by alice, bob, o'brien in turn; three rows at
    # NOW - 2h (two LogIns and a dataset EntityEvent); a TAG change (UpdateAspectEvent on the dataset's
    # globalTags by admin) and a user creation.
    logins = _all(api, body={"eventTypes": ["LogInEvent", "FailedLogInEvent"]})
    assert logins["total"] == 6 + 6 + 2
    assert all(set(e) >= {"loginSource"} and "entityUrn" not in e for e in logins["usageEvents"])
    dashboards = _all(api, body={"entityTypes": ["dashboard"]})
    assert dashboards["total"] == 6 and {e["entityUrn"] for e in dashboards["usageEvents"]} == {DASHBOARD}
    ownership = _all(api, body={"aspectTypes": ["ownership"]})
    assert ownership["total"] == 6 and {e["eventType"] for e in ownership["usageEvents"]} == {"UpdateAspectEvent"}
    tricky = _all(api, body={"actorUrns": [TRICKY]})
    assert tricky["total"] == 8 and {e["actorUrn"] for e in tricky["usageEvents"]} == {TRICKY}
    combined = _all(api, body={"eventTypes": ["UpdateAspectEvent"], "entityTypes": ["dataset"], "actorUrns": [BOB, ADMIN]})
    # bob's ownership updates (rows 7 and 19) and admin's TAG change.
    assert sorted((e["actorUrn"], e["aspectName"]) for e in combined["usageEvents"]) == [
        (ADMIN, "globalTags"), (BOB, "ownership"), (BOB, "ownership")]  # fmt: skip
    assert _all(api, body={"eventTypes": [], "entityTypes": [], "aspectTypes": [], "actorUrns": []})["total"] == 29


def test_change_events_appear_as_audit_events(api):
    created = _all(api, body={"eventTypes": ["CreateUserEvent"]})["usageEvents"]
    assert [(e["entityUrn"], e["aspectName"], e["actorUrn"]) for e in created] == [
        ("urn:li:corpuser:carol", "corpUserKey", ADMIN)
    ]
    tags = _all(api, body={"aspectTypes": ["globalTags"]})["usageEvents"]
    assert tags[0]["eventType"] == "UpdateAspectEvent" and tags[0]["rawUsageEvent"]["changeCategories"] == ["TAG"]


def test_include_raw(api):
    with_raw = _ok(api, {"size": 3})["usageEvents"]
    assert all(isinstance(e["rawUsageEvent"], dict) for e in with_raw)
    login = _all(api, body={"eventTypes": ["LogInEvent"], "actorUrns": [ALICE]})["usageEvents"][0]
    assert login["loginSource"] == "PASSWORD_LOGIN" and login["rawUsageEvent"]["type"] == "LogInEvent"
    assert all("rawUsageEvent" not in e for e in _ok(api, {"size": 3, "includeRaw": "false"})["usageEvents"])


def _walk(api, size, body=None, between_pages=None):
    seen, scroll, totals, pages = [], None, [], 0
    while True:
        params = {"size": size, **({"scrollId": scroll} if scroll else {})}
        result = _ok(api, params, body)
        pages += 1
        totals.append(result["total"])
        assert result["count"] == len(result["usageEvents"]) <= size
        seen += [(e["timestamp"], e["eventType"], e["actorUrn"], json.dumps(e["rawUsageEvent"], sort_keys=True))
                 for e in result["usageEvents"]]  # fmt: skip
        scroll = result.get("nextScrollId")
        # A scroll id comes with every full page and only with full ones.
        assert (scroll is not None) == (result["count"] == size)
        if scroll is None:
            return seen, totals, pages
        if between_pages:
            between_pages(pages)


def test_paging_equals_the_full_sorted_result(api):
    full = [(e["timestamp"], e["eventType"], e["actorUrn"], json.dumps(e["rawUsageEvent"], sort_keys=True))
            for e in _all(api)["usageEvents"]]  # fmt: skip
    seen, totals, pages = _walk(api, 4)
    assert seen == full and len(set(seen)) == len(seen)
    assert pages == len(full) // 4 + 1 and set(totals) == {len(full)}


def test_paging_is_stable_when_events_arrive_between_pages(api):
    full = [(e["timestamp"], e["eventType"], e["actorUrn"]) for e in _all(api)["usageEvents"]]

    def land_newer(page):
        if page == 2:
            # One event newer than every listed one but inside the first page's window, one after that window.
            late = [
                usage_event("LogInEvent", BOB, full[0][0] + 1, "api-late"),
                usage_event("LogInEvent", ALICE, int(time.time() * 1000) + 1000, "api-late"),
            ]
            land_refined_batch(api["spark"], api["settings"], "api-late", usage=late)
            publish_audit(api["spark"], api["settings"])

    seen, totals, _ = _walk(api, 5, between_pages=land_newer)
    assert [s[:3] for s in seen] == full  # nothing repeated, nothing skipped: later pages read the first page's version
    assert totals[0] == len(full) and totals[-1] == len(full)  # the pinned version's exact total
    time.sleep(1.1)
    assert _all(api)["total"] == len(full) + 2


@pytest.mark.parametrize("key", ["eventTypes", "entityTypes", "aspectTypes", "actorUrns"])
def test_injection_strings_match_nothing_and_break_nothing(api, key):
    for value in INJECTIONS:
        response = _search(api, {"size": 100}, {key: [value]})
        if key == "eventTypes":
            assert response.status_code == 400 and "unknown event type" in response.json()["error"]
        else:
            assert response.status_code == 200, response.text
            assert response.json() == {"count": 0, "total": 0, "usageEvents": []}
    assert _all(api)["total"] > 0


@pytest.mark.parametrize(
    ("params", "raw_body", "named"),
    [
        ({"size": 0}, "{}", "size"),
        ({"size": 10001}, "{}", "size"),
        ({"scrollId": "garbage"}, "{}", "scrollId"),
        ({"startTime": 20, "endTime": 10}, "{}", "startTime"),
        ({}, '{"eventTypes": ["NoSuchEvent"]}', "NoSuchEvent"),
        ({}, '["LogInEvent"]', "body"),
        ({}, '{"actorUrns": "urn:li:corpuser:a"}', "actorUrns"),
        ({}, '{"actorUrns": [1]}', "actorUrns"),
        ({}, '{"bogus": []}', "bogus"),
        ({}, '{"eventTypes": [', "not valid JSON"),
    ],
)
def test_bad_requests_are_400_naming_the_problem(api, params, raw_body, named):
    response = _search(api, params, raw_body=raw_body)
    assert response.status_code == 400
    assert named in response.json()["error"]


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("Bearer lh.0000.nope", 401), ("Basic dXNlcjpwdw==", 401), ("Bearer", 401), ("other", 403)],
)
def test_auth_failures(api, token, status):
    response = _search(api, {}, {}, token=token)
    assert response.status_code == status
    assert "error" in response.json()
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def test_a_forged_secret_for_a_known_id_is_refused(api):
    token_id = api["reader"].split(".")[1]
    assert _search(api, token=f"Bearer lh.{token_id}.{'A' * 43}").status_code == 401


def test_cli_token_and_search_use_the_same_code_path(api, tmp_path):
    settings = api["settings"]
    env = {**os.environ, "RUST_LOG": "error"}
    base = [sys.executable, "-m", "pipelines.cli", "--home", str(settings.home)]
    created = subprocess.run([*base, "token", "create", "--actor", BOB, "--role", "audit-read-sensitive"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    stored = settings.tokens_path.read_text()
    assert token.split(".")[2] not in stored and token.split(".")[1] in stored
    assert stat.S_IMODE(settings.tokens_path.stat().st_mode) == 0o600
    assert _search(api, {"size": 1}, {}, token=f"Bearer {token}").status_code == 200  # picked up without restart
    window = {"startTime": NOW - 30 * HOUR, "endTime": NOW - HOUR, "size": 7}
    body = {"eventTypes": ["LogInEvent", "EntityEvent"], "actorUrns": [ALICE, TRICKY]}
    from_api = _ok(api, window, body)
    searched = subprocess.run(
        [*base, "search", "--start-time", str(window["startTime"]), "--end-time", str(window["endTime"]),
         "--size", "7", "--body", json.dumps(body)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert searched.returncode == 0, searched.stderr
    from_cli = json.loads(searched.stdout)
    # The same page; each scroll id is issued to its own caller (the command line is `local`).
    assert from_cli.pop("nextScrollId") != from_api.pop("nextScrollId") and from_cli == from_api
    bad = subprocess.run([*base, "search", "--size", "0"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert bad.returncode != 0 and "size" in bad.stderr and "Traceback" not in bad.stderr
