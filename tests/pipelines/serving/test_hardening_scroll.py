"""Scroll ids on a real server: signed with the home's key, bound to the query and the caller."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import time

import httpx
import pytest

from pipelines.batch.publish_audit import publish_audit
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.scroll_key import scroll_key_path
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

NOW = int(time.time() * 1000)
MINUTE = 60_000
ALICE, BOB = "urn:li:corpuser:alice", "urn:li:corpuser:bob"
WINDOW = {"startTime": NOW - 60 * MINUTE, "endTime": NOW + MINUTE}
FIRST = {**WINDOW, "size": 4}


@pytest.fixture(scope="module")
def api(spark, lakehouse):
    usage = [usage_event("LogInEvent", (ALICE, BOB)[i % 2], NOW - i * MINUTE, "scroll-1") for i in range(12)]
    land_refined_batch(spark, lakehouse, "scroll-1", usage=usage)
    publish_audit(spark, lakehouse)
    tokens = [create_token(lakehouse, ALICE, ["audit-read"])[0] for _ in range(2)]
    with serving(create_app(lakehouse)) as base_url:
        yield {"base_url": base_url, "tokens": tokens, "settings": lakehouse}


def _search(api, params, body=None, caller=0, base_url=None):
    headers = {"Authorization": f"Bearer {api['tokens'][caller]}"}
    url = (base_url or api["base_url"]) + SEARCH_PATH
    return httpx.post(url, params=params, content=json.dumps(body or {}), headers=headers, timeout=60)


def _first_scroll(api, body=None) -> str:
    first = _search(api, FIRST, body)
    assert first.status_code == 200 and first.json()["count"] == 4
    return first.json()["nextScrollId"]


def _refused(response) -> None:
    assert response.status_code == 400, response.text
    assert "not a valid scroll id for this caller and query" in response.json()["error"]


def test_the_next_page_follows_with_the_same_query(api):
    second = _search(api, {**FIRST, "scrollId": _first_scroll(api)})
    assert second.status_code == 200 and second.json()["count"] == 4


def test_a_scroll_id_with_a_recomputed_checksum_is_refused(api):
    """What a client could do before: change the pinned table version and compute the checksum again."""
    payload, _ = base64.urlsafe_b64decode(_first_scroll(api) + "==").decode().rsplit("|", 1)
    fields = json.loads(payload)
    fields[-1] = 0  # pin the table's first version
    forged_payload = json.dumps(fields, separators=(",", ":"))
    for check_chars in (16, 32, 64):
        check = hashlib.sha256(forged_payload.encode()).hexdigest()[:check_chars]
        forged = base64.urlsafe_b64encode(f"{forged_payload}|{check}".encode()).decode().rstrip("=")
        _refused(_search(api, {**FIRST, "scrollId": forged}))


def test_a_tampered_scroll_id_is_refused(api):
    payload, tag = base64.urlsafe_b64decode(_first_scroll(api) + "==").decode().rsplit("|", 1)
    fields = json.loads(payload)
    fields[1] += 1  # the page's last timestamp, its tag kept
    tampered = f"{json.dumps(fields, separators=(',', ':'))}|{tag}"
    _refused(_search(api, {**FIRST, "scrollId": base64.urlsafe_b64encode(tampered.encode()).decode()}))


def test_another_caller_cannot_use_a_scroll_id(api):
    _refused(_search(api, {**FIRST, "scrollId": _first_scroll(api)}, caller=1))


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({"size": 5}, None),
        ({"includeRaw": "false"}, None),
        ({}, {"actorUrns": [BOB]}),
        ({}, {"eventTypes": ["LogInEvent"]}),
    ],
)
def test_a_scroll_id_is_refused_for_another_query(api, params, body):
    _refused(_search(api, {**FIRST, **params, "scrollId": _first_scroll(api)}, body))


def test_a_scroll_id_is_refused_for_another_window(api):
    moved = _search(api, {**FIRST, "endTime": WINDOW["endTime"] + 1, "scrollId": _first_scroll(api)})
    assert moved.status_code == 400 and "endTime" in moved.json()["error"]


def test_every_server_of_the_home_shares_the_key(api):
    path = scroll_key_path(api["settings"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.is_relative_to(api["settings"].home)
    with serving(create_app(api["settings"])) as other_server:
        second = _search(api, {**FIRST, "scrollId": _first_scroll(api)}, base_url=other_server)
    assert second.status_code == 200 and second.json()["count"] == 4
