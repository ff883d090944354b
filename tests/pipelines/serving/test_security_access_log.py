"""The audit of the auditors and bearer token checks, against the real server on loopback.

Every read of audit data, refused ones included, becomes an ops.access_log record; the records are
chained (a tampered one fails `verify`) and searchable by admin only. Malformed, unknown and wrong
tokens are all the same 401.
"""

from __future__ import annotations

import dataclasses
import time

import httpx
import pytest

from conf.settings_sections import AccessLogSettings
from pipelines.batch.access_retention import DAY_MS, prune_access_log
from pipelines.batch.audit_chain import read_chain
from pipelines.batch.chain_verification import verify_chain
from pipelines.batch.publish_audit import publish_audit
from pipelines.serving.access import ACCESS_LOG_PATH
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

# A server run to its shutdown flush, a home published: seconds.
pytestmark = pytest.mark.slow
NOW = int(time.time() * 1000)
ALICE = "urn:li:corpuser:alice"
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"


@pytest.fixture(scope="module")
def logged(spark, lakehouse):
    """A published batch, a reader, an admin and a metrics-only token; requests made, then the server stopped."""
    land_refined_batch(spark, lakehouse, "log-1", usage=[
        usage_event("UpdateAspectEvent", ALICE, NOW - i * 60_000, "log-1", entity_urn=DATASET, entity_type="dataset")
        for i in range(1, 8)
    ])  # fmt: skip
    publish_audit(spark, lakehouse)
    settings = dataclasses.replace(lakehouse, access_log=AccessLogSettings(flush_seconds=0.2))
    reader, reader_record = create_token(settings, ALICE, ["audit-read"])
    admin, admin_record = create_token(settings, ALICE, ["admin"])
    metrics, _ = create_token(settings, ALICE, ["metrics-read"])
    wrong_secret = reader[:-2] + ("AA" if not reader.endswith("AA") else "BB")
    answers = {}
    with serving(create_app(settings, spark)) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
        def search(token: str | None, body: dict | None = None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            return client.post(SEARCH_PATH, json=body or {}, headers=headers)

        answers["ok"] = search(reader, {"actorUrns": [ALICE]})
        answers["unknown"] = search("lh.ffffffffffff." + reader.split(".")[2])
        answers["wrong_secret"] = search(wrong_secret)
        answers["non_ascii"] = client.post(SEARCH_PATH, json={}, headers={"Authorization": "Bearer lh.ab\u00e9cd.secret".encode("utf-8")})
        answers["no_token"] = search(None)
        answers["no_role"] = search(metrics)
        answers["reader_log"] = client.get(ACCESS_LOG_PATH, headers={"Authorization": f"Bearer {reader}"})
        deadline = time.monotonic() + 30
        while True:  # the flusher appends every 0.2 s, off the request path
            answers["admin_log"] = client.get(ACCESS_LOG_PATH, params={"endpoint": SEARCH_PATH},
                                              headers={"Authorization": f"Bearer {admin}"})  # fmt: skip
            if answers["admin_log"].json().get("count", 0) >= 6 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # Requested just before the stop: written by the shutdown flush.
        answers["last"] = search(reader)
    records = [r.asDict() for r in spark.sql("SELECT * FROM ops.access_log").collect()]
    return {"answers": answers, "records": records, "reader": reader_record, "admin": admin_record,
            "spark": spark, "settings": settings}  # fmt: skip


def test_malformed_unknown_and_wrong_tokens_are_the_same_401(logged):
    answers = logged["answers"]
    assert answers["ok"].status_code == 200 and answers["ok"].json()["total"] == 7
    for name in ("unknown", "wrong_secret", "non_ascii"):
        assert answers[name].status_code == 401, (name, answers[name].text)
        assert answers[name].json() == {"error": "invalid bearer token"}, name
        assert answers[name].headers["www-authenticate"] == "Bearer"
    assert answers["no_token"].status_code == 401 and answers["no_role"].status_code == 403


def test_every_read_is_recorded_refused_ones_included(logged):
    searches = sorted((r for r in logged["records"] if r["endpoint"] == SEARCH_PATH), key=lambda r: r["accessed_at_ms"])
    reader = f"token:{logged['reader'].token_id}"
    assert [(r["outcome"], r["status"]) for r in searches] == [
        ("ok", 200), ("refused", 401), ("refused", 401), ("refused", 401), ("refused", 401), ("refused", 403), ("ok", 200)
    ]
    ok = searches[0]
    assert ok["principal"] == reader and ok["actor"] == ALICE and ok["result_count"] == 7
    assert '"actorUrns": ["urn:li:corpuser:alice"]' in ok["filters"] and ok["client_address"] == "127.0.0.1"
    # A refused request names the token id it claimed when the id is well formed; never the secret.
    assert searches[1]["principal"] == "token:ffffffffffff" and searches[2]["principal"] == reader
    assert searches[3]["principal"] is None and searches[1]["actor"] is None
    assert searches[-1]["outcome"] == "ok"  # made just before the stop: flushed at shutdown
    log_reads = [r for r in logged["records"] if r["endpoint"] == ACCESS_LOG_PATH]
    assert {r["outcome"] for r in log_reads} == {"refused", "ok"}


def test_only_admin_searches_the_access_log(logged):
    answers = logged["answers"]
    assert answers["reader_log"].status_code == 403
    found = answers["admin_log"].json()
    assert found["count"] >= 6 and all(r["endpoint"] == SEARCH_PATH for r in found["records"])
    times = [r["accessedAt"] for r in found["records"]]
    assert times == sorted(times, reverse=True)


def test_access_batches_are_chained_and_a_tampered_record_fails_verify(logged):
    spark, settings = logged["spark"], logged["settings"]
    links = [link for link in read_chain(spark, settings) if link["table_key"] == "ops.access_log"]
    assert links and sum(link["row_count"] for link in links) == len(logged["records"])
    assert [link["seq"] for link in read_chain(spark, settings)] == list(range(len(read_chain(spark, settings))))
    assert verify_chain(spark, settings).ok
    spark.sql("UPDATE ops.access_log SET result_count = 0 WHERE outcome = 'ok' AND result_count = 7").collect()
    broken = verify_chain(spark, settings).broken
    assert broken is not None and broken.table_key == "ops.access_log" and broken.changed >= 1


def test_retention_deletes_whole_batches_and_verify_accepts_only_what_retention_allows(logged):
    # Runs after the tamper test: the tampered batch goes too, being past retention two days from now.
    spark = logged["spark"]
    settings = dataclasses.replace(logged["settings"], access_log=AccessLogSettings(retention_days=1))
    assert prune_access_log(spark, settings, NOW) == []  # nothing is a day old yet
    later = int(time.time() * 1000) + 2 * DAY_MS
    assert sorted(prune_access_log(spark, settings, later)) == sorted({r["batch_id"] for r in logged["records"]})
    assert spark.sql("SELECT count(*) AS n FROM ops.access_log").collect()[0].n == 0
    # The batches retention allowed to go, and the prune, are accepted; the history keeps the tamper test's UPDATE.
    problems = verify_chain(spark, settings, now_ms=later).problems
    assert [(p.table_key, [c.split(" ")[1] for c in p.commits_after]) for p in problems] == [("ops.access_log", ["UPDATE"])]
    broken = verify_chain(spark, settings).broken  # today retention allows none of them gone
    assert broken is not None and broken.table_key == "ops.access_log" and broken.missing >= 1
