"""The in-process serving engine on a real server: new versions, vacuumed scrolls, overload, request limits."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import threading
import time

import httpx
import pytest

from gold.scroll_ids import ScrollSigner
from gold.search_request import SearchRequest
from pipelines.batch.publish_audit import optimize_audit_events, publish_audit
from pipelines.runtime.maintenance import maintenance_for
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.scroll_key import load_scroll_key
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

NOW = int(time.time() * 1000)
MINUTE = 60_000
ALICE, BOB = "urn:li:corpuser:alice", "urn:li:corpuser:bob"
WINDOW = {"startTime": NOW - 6 * 60 * MINUTE, "endTime": NOW + 60 * MINUTE}


def _batch(batch_id: str, count: int, newest: int) -> None:
    return [usage_event("LogInEvent", (ALICE, BOB)[i % 2], newest - i * MINUTE, batch_id) for i in range(count)]


def _limited(settings, **serve):
    return dataclasses.replace(settings, serve=dataclasses.replace(settings.serve, **serve))


@pytest.fixture(scope="module")
def served(spark, lakehouse):
    """40 published events and a server checking for new table versions every 0.2 s."""
    land_refined_batch(spark, lakehouse, "lim-1", usage=_batch("lim-1", 40, NOW - 5 * MINUTE))
    publish_audit(spark, lakehouse)
    token, _ = create_token(lakehouse, ALICE, ["audit-read"])
    settings = _limited(lakehouse, version_check_seconds=0.2, max_size=500, max_body_bytes=2048)
    with serving(create_app(settings)) as base_url:
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
            yield {"client": client, "token": token, "settings": lakehouse, "spark": spark}


def _post(served, params=None, body=None, content=None):
    content = content if content is not None else json.dumps(body or {})
    return served["client"].post(SEARCH_PATH, params={**WINDOW, **(params or {})}, content=content)


def _forged(fields: list) -> str:
    payload = json.dumps(fields, separators=(",", ":"))
    check = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return base64.urlsafe_b64encode(f"{payload}|{check}".encode()).decode().rstrip("=")


def test_a_new_version_is_served_without_restart_and_pinned_scrolls_keep_theirs(served):
    first = _post(served, {"size": 30})
    assert first.status_code == 200 and first.json()["total"] == 40
    scroll = first.json()["nextScrollId"]
    land_refined_batch(served["spark"], served["settings"], "lim-2", usage=_batch("lim-2", 5, NOW - 1000))
    publish_audit(served["spark"], served["settings"])
    committed = time.monotonic()
    while _post(served, {"size": 1}).json()["total"] != 45:
        assert time.monotonic() - committed < 5, "the new version was not picked up"
        time.sleep(0.05)
    rest = _post(served, {"size": 30, "scrollId": scroll}).json()
    assert (rest["total"], rest["count"]) == (40, 10)  # the first page's version: none of the 5 new events
    assert all(e["timestamp"] <= NOW - 5 * MINUTE for e in rest["usageEvents"])


def test_a_scroll_over_a_vacuumed_version_asks_to_restart(served):
    first = _post(served, {"size": 10})
    scroll = first.json()["nextScrollId"]
    signer = ScrollSigner(load_scroll_key(served["settings"]), principal=f"token:{served['token'].split('.')[1]}")
    pinned = SearchRequest.parse({**WINDOW, "size": 10, "scrollId": scroll}, signer=signer).scroll.table_version
    land_refined_batch(served["spark"], served["settings"], "lim-3", usage=_batch("lim-3", 3, NOW - 500))
    publish_audit(served["spark"], served["settings"])
    optimize_audit_events(served["spark"], served["settings"])  # rewrites the files the pinned version read
    removed = maintenance_for(served["settings"]).vacuum("gold.audit_events", retention_hours=0)
    assert removed
    response = _post(served, {"size": 10, "scrollId": scroll})
    assert response.status_code == 410, response.text
    assert f"table version {pinned}" in response.json()["error"] and "restart the search" in response.json()["error"]
    fresh = _post(served, {"size": 10})  # a new search reads the latest version
    assert fresh.status_code == 200 and fresh.json()["count"] == 10


@pytest.mark.parametrize(
    ("params", "content", "named"),
    [
        ({"size": 501}, "{}", "size: 501 is out of range (1..500)"),
        ({}, "{not json", "body: not valid JSON"),
        ({}, '{"actorUrns": "alice"}', "body.actorUrns"),
        ({"scrollId": _forged([3, NOW, "LogInEvent", ALICE, "id", 0, NOW, 10**6])}, "{}", "not a valid scroll id"),
        ({"scrollId": _forged([2, NOW, "LogInEvent", ALICE, "id", 0, NOW, -5])}, "{}", "not a valid scroll id"),
        ({"scrollId": "WzIsNV0"}, "{}", "not a valid scroll id"),
    ],
)
def test_bad_requests_get_a_400_naming_the_problem(served, params, content, named):
    response = _post(served, params, content=content)
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]


def test_overload_gets_503_with_retry_after_and_the_server_recovers(served):
    settings = _limited(served["settings"], query_slots=1, queue_depth=1, queue_timeout_seconds=0.5)
    statuses: list[int] = []
    retry_after: set[str] = set()
    lock = threading.Lock()
    start = threading.Barrier(24)

    with serving(create_app(settings)) as base_url:
        headers = {"Authorization": f"Bearer {served['token']}"}

        def client_loop() -> None:
            with httpx.Client(base_url=base_url, timeout=60, headers=headers) as client:
                start.wait()
                for _ in range(5):
                    response = client.post(SEARCH_PATH, params={**WINDOW, "size": 10000}, content="{}")
                    with lock:
                        statuses.append(response.status_code)
                        if response.status_code == 503:
                            retry_after.add(response.headers.get("retry-after"))
                            assert "server busy" in response.json()["error"]

        threads = [threading.Thread(target=client_loop) for _ in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert set(statuses) == {200, 503} and len(statuses) == 120
        assert retry_after == {"1"}
        with httpx.Client(base_url=base_url, timeout=60, headers=headers) as client:
            after = [client.post(SEARCH_PATH, params=WINDOW, content="{}").status_code for _ in range(5)]
        assert after == [200] * 5


def test_serve_settings_are_validated_all_at_once(tmp_path):
    from conf.errors import ConfigError
    from conf.settings import load_settings

    overrides = ["serve.engine=duckdb", "serve.query_slots=0", "serve.queue_depth=-1", "serve.max_size=10001",
                 "serve.max_body_bytes=10", "serve.version_check_seconds=-1", "serve.queue_timeout_seconds=0",
                 "serve.row_cache_mb=-1"]  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        load_settings("local", home=tmp_path, env={}, overrides=overrides)
    assert raised.value.problems == [
        "serve.engine: 'duckdb' is not one of inprocess, spark",
        "serve.query_slots: 0 must be at least 1",
        "serve.queue_depth: -1 must be at least 0",
        "serve.max_body_bytes: 10 must be at least 1024",
        "serve.row_cache_mb: -1 must be at least 0",
        "serve.max_size: 10001 is above the search contract's limit 10000",
        "serve.queue_timeout_seconds: 0.0 must be above 0",
        "serve.version_check_seconds: -1.0 must be at least 0",
    ]
    defaults = load_settings("local", home=tmp_path, env={}).serve
    assert (defaults.engine, defaults.query_slots, defaults.max_size, defaults.row_cache_mb) == ("inprocess", 4, 10000, 256)


def test_a_server_started_before_the_table_exists_serves_it_once_published(spark, tmp_path):
    from tests.conftest import make_settings, register_fresh_tables

    settings = _limited(make_settings(tmp_path / "fresh"), version_check_seconds=0.1)
    token, _ = create_token(settings, ALICE, ["audit-read"])
    with serving(create_app(settings)) as base_url:
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
            assert client.get("/health").json()["auditEventsVersion"] == -1
            empty = client.post(SEARCH_PATH, params=WINDOW, content="{}")
            assert empty.status_code == 200 and empty.json() == {"count": 0, "total": 0, "usageEvents": []}
            register_fresh_tables(spark, settings)
            land_refined_batch(spark, settings, "fresh-1", usage=_batch("fresh-1", 3, NOW - MINUTE))
            publish_audit(spark, settings)
            deadline = time.monotonic() + 5
            while client.post(SEARCH_PATH, params=WINDOW, content="{}").json()["total"] != 3:
                assert time.monotonic() < deadline, "the new table was not picked up"
                time.sleep(0.05)
