"""GET /api/v1/anomalies: a real server on loopback over rows in a real gold.actor_anomalies table."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest

from pipelines.runtime.io import append
from pipelines.serving.anomalies import ANOMALIES_PATH
from pipelines.serving.api import create_app, serving
from pipelines.serving.tokens import create_token

DAY = 86_400_000
HOUR = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ALICE, BOB, SVC = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:svc_ingest"
SCHEMA = (
    "actor STRING, granularity STRING, window_start BIGINT, window_end BIGINT, score DOUBLE, kind STRING, "
    "peer_scored BOOLEAN, top_features STRING, model_name STRING, model_version STRING, scored_at TIMESTAMP, "
    "window_date DATE"
)


def _row(actor, granularity, start, score, kind, peer=False):
    width = DAY if granularity == "day" else HOUR
    top = [{"feature": "hard_deletes", "value": 40.0, "baseline": 0.0, "deviation": 7.5}]
    scored_at = dt.datetime(2026, 1, 20, 6, 0, tzinfo=dt.timezone.utc)
    day = dt.datetime.fromtimestamp(start / 1000, dt.timezone.utc).date()
    return (actor, granularity, start, start + width, score, kind, peer, json.dumps(top), "m", "3", scored_at, day)


ROWS = [
    _row(ALICE, "day", T0 + 2 * DAY, 2.5, "deletion_burst"),
    _row(ALICE, "hour", T0 + 2 * DAY + 3 * HOUR, 1.7, "deletion_burst"),
    _row(BOB, "day", T0 + 5 * DAY, 3.1, "ownership_takeover", peer=True),
    _row(SVC, "day", T0 + 9 * DAY, 1.2, "new_platform"),
    _row(BOB, "day", T0 + 9 * DAY, 1.2, "mass_classification_removal"),
]


@pytest.fixture(scope="module")
def api(spark, lakehouse):
    append(spark.createDataFrame(ROWS, SCHEMA), lakehouse, "gold.actor_anomalies")
    reader, _ = create_token(lakehouse, ALICE, ["audit-read"])
    other, _ = create_token(lakehouse, ALICE, ["metrics-read"])
    with serving(create_app(lakehouse, spark)) as base_url:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            yield client, reader, other


def _get(api, params=None, token="reader"):
    client, reader, other = api
    headers = {"Authorization": f"Bearer {reader if token == 'reader' else other}"} if token else {}
    return client.get(ANOMALIES_PATH, params=params or {}, headers=headers)


def test_every_flagged_window_highest_score_first_ties_by_actor(api):
    response = _get(api)
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 5
    assert [(a["actor"], a["score"]) for a in body["anomalies"]] == [
        (BOB, 3.1), (ALICE, 2.5), (ALICE, 1.7), (BOB, 1.2), (SVC, 1.2)
    ]  # fmt: skip
    first = body["anomalies"][0]
    assert first["peerScored"] is True and first["kind"] == "ownership_takeover"
    assert first["windowStart"] == T0 + 5 * DAY and first["windowEnd"] == T0 + 6 * DAY
    assert first["topFeatures"] == [{"feature": "hard_deletes", "value": 40.0, "baseline": 0.0, "deviation": 7.5}]
    assert first["modelVersion"] == "3" and first["scoredAt"].startswith("2026-01-20T06:00:00")


def test_filters_combine(api):
    alice_days = _get(api, {"actor": ALICE, "granularity": "day"}).json()["anomalies"]
    assert [(a["actor"], a["granularity"]) for a in alice_days] == [(ALICE, "day")]
    since = _get(api, {"since": "2026-01-07", "until": str(T0 + 10 * DAY)}).json()["anomalies"]
    assert {a["actor"] for a in since} == {BOB, SVC} and len(since) == 2
    assert _get(api, {"kind": "new_platform"}).json()["count"] == 1
    assert _get(api, {"limit": "2"}).json()["count"] == 2


def test_the_same_auth_as_search(api):
    assert _get(api, token=None).status_code == 401
    assert _get(api, token="other").status_code == 403


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "5000"}, "limit"),
        ({"limit": "²"}, "limit"),
        ({"granularity": "week"}, "granularity"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-01-10", "until": "2026-01-02"}, "since"),
        ({"actorUrn": ALICE}, "actorUrn"),
    ],
)
def test_bad_parameters_are_400_naming_them(api, params, named):
    response = _get(api, params)
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{named}:")
