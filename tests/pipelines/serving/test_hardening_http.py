"""The hardened HTTP surface on a real server: admission everywhere, rate limits, body limits, HEAD, headers."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from pipelines.batch.publish_audit import publish_audit
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.hardening import json_depth
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event

NOW = int(time.time() * 1000)
MINUTE = 60_000
ALICE = "urn:li:corpuser:alice"
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
WINDOW = {"startTime": NOW - 60 * MINUTE, "endTime": NOW + MINUTE}
# Every endpoint that reads audit data, as (method, path with parameters).
DATA_ENDPOINTS = [
    ("POST", f"{SEARCH_PATH}?startTime={WINDOW['startTime']}&endTime={WINDOW['endTime']}"),
    ("GET", "/api/v1/changes"),
    ("GET", "/api/v1/activity"),
    ("GET", f"/api/v1/activity/actor?actor={ALICE}"),
    ("GET", f"/api/v1/timeline?urn={DATASET}"),
    ("GET", "/api/v1/anomalies"),
    ("GET", f"/openapi/v1/audit/report?from={NOW - 60 * MINUTE}&to={NOW + MINUTE}"),
]


def _serve_settings(settings, **serve):
    return dataclasses.replace(settings, serve=dataclasses.replace(settings.serve, **serve))


@pytest.fixture(scope="module")
def home(spark, lakehouse):
    usage = [usage_event("LogInEvent", ALICE, NOW - i * MINUTE, "hard-1") for i in range(5)]
    changes = [change_event("cs-1", "TAG", "ADD", ALICE, NOW - 2 * MINUTE, DATASET, "globalTags", "hard-1")]
    land_refined_batch(spark, lakehouse, "hard-1", usage=usage, changes=changes)
    publish_audit(spark, lakehouse)
    token, _ = create_token(lakehouse, ALICE, ["audit-read"])
    other, _ = create_token(lakehouse, ALICE, ["audit-read"])
    return {"settings": lakehouse, "spark": spark, "token": token, "other": other}


@pytest.fixture(scope="module")
def api(home):
    """A server with a 64 KiB body limit, one query slot and no wait queue."""
    settings = _serve_settings(home["settings"], max_body_bytes=65536, query_slots=1, queue_depth=0)
    with serving(create_app(settings, home["spark"])) as base_url:
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {home['token']}"}) as client:
            yield {**home, "client": client, "base_url": base_url}


def _search(api, content: bytes | str, headers=None):
    return api["client"].post(SEARCH_PATH, params=WINDOW, content=content, headers=headers)


def test_an_oversized_body_gets_413_declared_or_streamed(api):
    declared = _search(api, b"{" + b" " * 70_000 + b"}")
    assert declared.status_code == 413 and "serve.max_body_bytes" in declared.json()["error"]
    streamed = _search(api, iter([b"{", b" " * 40_000, b" " * 40_000, b"}"]))  # chunked: no Content-Length
    assert streamed.status_code == 413, streamed.text


def test_json_nested_beyond_the_limit_gets_400_not_a_500(api):
    deep = _search(api, "[" * 20_000 + "]" * 20_000)
    assert deep.status_code == 400 and "nested 20000 levels deep" in deep.json()["error"]
    brackets_in_strings = json.dumps({"actorUrns": ["[" * 100]})
    assert _search(api, brackets_in_strings).status_code == 200


@pytest.mark.parametrize(
    ("raw", "depth"),
    [(b"", 0), (b"{}", 1), (b'[[1],{"a":[2]}]', 3), (b'{"a": ["[[{{", "\\"["]}', 2), (b'"[["', 0),
     (b'{"a": "x\\\\"}', 1), (b"[" * 50 + b"]" * 50, 50)],
)  # fmt: skip
def test_json_depth_counts_brackets_outside_strings(raw, depth):
    assert json_depth(raw) == depth


def test_head_is_served_where_get_is(api):
    client = api["client"]
    for path in ("/", "/health", "/api/v1/changes", "/openapi.json"):
        got, head = client.get(path), client.head(path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]
    assert client.head(SEARCH_PATH).status_code == 405  # POST only


def test_data_responses_are_not_stored(api):
    client = api["client"]
    responses = [client.request(method, path, content="{}" if method == "POST" else None) for method, path in DATA_ENDPOINTS]
    assert [r.status_code for r in responses] == [200] * len(DATA_ENDPOINTS), [r.text for r in responses]
    assert {r.headers.get("cache-control") for r in responses} == {"no-store"}
    refused = httpx.get(api["base_url"] + "/api/v1/changes")
    assert refused.status_code == 401 and refused.headers["cache-control"] == "no-store"


def test_docs_are_off_by_default_and_on_with_the_setting(api):
    client = api["client"]
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").status_code == 200
    with serving(create_app(_serve_settings(api["settings"], api_docs=True), api["spark"])) as base_url:
        assert httpx.get(base_url + "/docs").status_code == 200


def test_health_without_a_token_says_only_that_it_is_up(api):
    bare = httpx.get(api["base_url"] + "/health")
    assert bare.status_code == 200 and bare.json() == {"status": "ok"}
    wrong = httpx.get(api["base_url"] + "/health", headers={"Authorization": "Bearer lh.nobody.secret"})
    assert wrong.json() == {"status": "ok"}
    full = api["client"].get("/health").json()
    assert full["engine"] == "inprocess" and "watch" in full and "auditEventsVersion" in full


def _hold_the_query_slot(api) -> socket.socket:
    """Start a search whose body never finishes arriving: it holds the only query slot until closed.

    Tried again while the held request met another in the slot (then it got the 503 itself).
    """
    parts = urlsplit(api["base_url"])
    headers = f"Host: x\r\nAuthorization: Bearer {api['token']}\r\nContent-Length: 100"
    for _ in range(50):
        held = socket.create_connection((parts.hostname, parts.port))
        held.sendall(f"POST {SEARCH_PATH} HTTP/1.1\r\n{headers}\r\n\r\n{{".encode())
        time.sleep(0.1)
        if api["client"].get("/api/v1/changes").status_code == 503:
            return held
        held.close()
    raise AssertionError("the held request never took the slot")


def test_every_data_endpoint_goes_through_admission(api):
    held = _hold_the_query_slot(api)
    try:
        client = api["client"]
        for method, path in DATA_ENDPOINTS:
            busy = client.request(method, path, content="{}" if method == "POST" else None)
            assert busy.status_code == 503, (path, busy.status_code, busy.text)
            assert busy.headers["retry-after"] == "1" and "server busy" in busy.json()["error"]
        assert client.get("/health").status_code == 200 and client.get("/").status_code == 200  # not data
    finally:
        held.close()
    deadline = time.monotonic() + 10
    while api["client"].get("/api/v1/changes").status_code != 200:
        assert time.monotonic() < deadline, "the slot was not given back"
        time.sleep(0.05)


def test_a_caller_above_its_rate_gets_429_and_others_do_not(home):
    settings = _serve_settings(home["settings"], rate_limit_per_minute=60, rate_limit_burst=3)
    with serving(create_app(settings, home["spark"])) as base_url:

        def get(token: str | None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.get(base_url + "/api/v1/anomalies", headers=headers)

        assert [get(home["token"]).status_code for _ in range(3)] == [200] * 3
        limited = get(home["token"])
        assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
        assert "serve.rate_limit_per_minute" in limited.json()["error"]
        assert get(home["other"]).status_code == 200  # per caller
        assert get(None).status_code == 401  # nobody's rate to spend
        time.sleep(1.1)  # one request a second refills
        assert get(home["token"]).status_code == 200


def test_the_hardening_settings_are_validated_all_at_once(tmp_path):
    from conf.errors import ConfigError
    from conf.settings import load_settings

    overrides = ["serve.max_json_depth=1", "serve.rate_limit_per_minute=-1", "serve.rate_limit_burst=0",
                 "serve.tls_cert_file=server.pem"]  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        load_settings("local", home=tmp_path, env={}, overrides=overrides)
    assert raised.value.problems == [
        "serve.max_json_depth: 1 must be at least 2",
        "serve.rate_limit_per_minute: -1 must be at least 0",
        "serve.rate_limit_burst: 0 must be at least 1",
        "serve.tls_cert_file: 'server.pem' and serve.tls_key_file: None must be set together (or both left null)",
    ]
