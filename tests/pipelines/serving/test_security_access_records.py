"""What the access log records of each read, and that every stored record stays readable, on the real server.

Every endpoint notes the filters it parsed (urn, window, format, ...) and how many results it served; a
record whose filters are too large is stored cut as valid JSON with a marker; a record stored cut by an
earlier version is still served by the admin's search and the CLI; a refused JWT names the subject it
claimed; a redirect is not `ok`; an admin limited to a scope reads only the reads made within it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time

import httpx
import jwt
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from deltalake import write_deltalake

from conf.settings_sections import AccessLogSettings, IdentitySettings
from conf.tables import table_location
from gold.scopes import parse_scope
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.runtime.io import append
from pipelines.serving.access import ACCESS_LOG_PATH
from pipelines.serving.access_log import MAX_FILTER_CHARS, TRUNCATED_KEY, arrow_schema
from pipelines.serving.anomalies import ANOMALIES_PATH
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from pipelines.serving.report import REPORT_PATH
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch, rows_df, usage_event
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.serving.test_security_scopes import _state_row

# A server run to its shutdown flush, a home published: seconds.
pytestmark = pytest.mark.slow
NOW = int(time.time() * 1000)
ALICE = "urn:li:corpuser:alice"
FINANCE = "urn:li:domain:finance"
LEDGER = "urn:li:dataset:(urn:li:dataPlatform:hive,db.ledger,PROD)"
CLICKS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.clicks,PROD)"
ISSUER, AUDIENCE = "https://idp.example.test", "lakehouse-api"
SINCE, UNTIL = NOW - 3_600_000, NOW + 60_000
# Eight actor urns of 1,000 characters: a search body whose filters are far above what a record stores.
LONG_ACTORS = [f"urn:li:corpuser:{str(i) * 984}" for i in range(8)]
# A record as an earlier version stored it: its filters cut at 4,096 characters, no longer JSON.
OLD_CUT_FILTERS = json.dumps({"actorUrns": LONG_ACTORS})[:4096]


def _old_bad_record(settings) -> None:
    """Append, as an earlier server did, one record whose filters are not valid JSON."""
    record = {
        "access_id": "0" * 32, "accessed_at_ms": NOW - 1000, "principal": "token:old", "actor": ALICE,
        "method": "POST", "endpoint": SEARCH_PATH, "filters": OLD_CUT_FILTERS, "result_count": 0,
        "client_address": "127.0.0.1", "status": 200, "outcome": "ok", "batch_id": "access-old",
        "access_date": dt.datetime.fromtimestamp((NOW - 1000) / 1000, tz=dt.timezone.utc).date(),
    }  # fmt: skip
    table = pa.Table.from_pylist([record], schema=arrow_schema())
    write_deltalake(str(table_location(settings, "ops.access_log")), table, mode="append", partition_by=["access_date"])


@pytest.fixture(scope="module")
def recorded(spark, lakehouse):
    """Reads of every endpoint by tokens and JWTs; the admins' searches of the log; the records after the stop."""
    append(rows_df(spark, "silver.aspect_state", [_state_row(LEDGER, FINANCE)]), lakehouse, "silver.aspect_state")
    land_refined_batch(
        spark, lakehouse, "rec-1",
        usage=[usage_event("UpdateAspectEvent", ALICE, NOW - i * 60_000, "rec-1", entity_urn=urn, entity_type="dataset")
               for i, urn in enumerate([LEDGER, CLICKS, LEDGER], start=1)],
        changes=[change_event("cs-1", "TAG", "ADD", ALICE, NOW - 90_000, LEDGER, "globalTags", "rec-1"),
                 change_event("cs-2", "OWNER", "ADD", ALICE, NOW - 80_000, LEDGER, "ownership", "rec-1"),
                 change_event("cs-3", "TAG", "ADD", ALICE, NOW - 70_000, CLICKS, "globalTags", "rec-1")],
    )  # fmt: skip
    publish_audit(spark, lakehouse)
    publish_openmetadata(spark, lakehouse)  # chains the change events: the report shows chained batches only
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing.public_key())), "kid": "k1", "alg": "RS256"}
    (lakehouse.home / "auth").mkdir(parents=True, exist_ok=True)
    (lakehouse.home / "auth" / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    identity = IdentitySettings(
        jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwks_file="auth/jwks.json", role_map={"auditors": ("audit-read",)},
        scope_claims={"domain": "lh_domains"},
    )  # fmt: skip
    settings = dataclasses.replace(lakehouse, identity=identity, access_log=AccessLogSettings(flush_seconds=0.2))
    tokens = {
        "reader": create_token(settings, ALICE, ["audit-read"]),
        "finance_reader": create_token(settings, ALICE, ["audit-read"], scope=parse_scope([f"domain={FINANCE}"])),
        "admin": create_token(settings, ALICE, ["admin"]),
        "finance_admin": create_token(settings, ALICE, ["admin"], scope=parse_scope([f"domain={FINANCE}"])),
    }
    no_scope_claim = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": int(time.time()) + 300,
                                 "roles": ["auditors"]}, signing, algorithm="RS256", headers={"kid": "k1"})  # fmt: skip
    window = {"since": str(SINCE), "until": str(UNTIL)}
    answers = {}
    _old_bad_record(settings)
    with serving(create_app(settings, spark)) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
        def get(name: str, path: str, token: str = "reader", **params: str) -> httpx.Response:
            answers[name] = client.get(path, params=params, headers={"Authorization": f"Bearer {tokens[token][0]}"})
            return answers[name]

        get("timeline", "/api/v1/timeline", urn=LEDGER)
        get("as_of", "/api/v1/timeline/as-of", urn=LEDGER, at=str(NOW))
        get("changes", "/api/v1/changes", entity=LEDGER, size="1", **window)
        get("report", REPORT_PATH, **{"from": str(SINCE), "to": str(UNTIL), "format": "csv"})
        get("anomalies", ANOMALIES_PATH, limit="5", **window)
        get("activity", "/api/v1/activity", limit="3", **window)
        get("actor", "/api/v1/activity/actor", actor=ALICE, **window)
        get("redirect", "/api/v1/timeline/", urn=LEDGER)
        get("finance_timeline", "/api/v1/timeline", "finance_reader", urn=LEDGER)
        auth = {"Authorization": f"Bearer {tokens['reader'][0]}"}
        answers["long"] = client.post(SEARCH_PATH, json={"actorUrns": LONG_ACTORS}, headers=auth)
        answers["jwt"] = client.post(SEARCH_PATH, json={}, headers={"Authorization": f"Bearer {no_scope_claim}"})
        deadline = time.monotonic() + 30
        while True:  # the flusher appends every 0.2 s, off the request path
            logged = get("admin_log", ACCESS_LOG_PATH, "admin", size="1000")
            if logged.status_code != 200 or logged.json()["count"] >= 12 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        get("finance_admin_log", ACCESS_LOG_PATH, "finance_admin", size="1000")
    records = [r.asDict() for r in spark.sql("SELECT * FROM ops.access_log").collect()]
    return {"answers": answers, "records": records, "tokens": tokens, "settings": settings}


def _record(recorded, endpoint: str, principal: str | None = None) -> dict:
    found = [r for r in recorded["records"] if r["endpoint"] == endpoint and r["batch_id"] != "access-old"
             and (principal is None or r["principal"] == principal)]  # fmt: skip
    assert len(found) == 1, (endpoint, found)
    return {**found[0], "filters": json.loads(found[0]["filters"])}


def test_every_endpoint_records_its_filters_and_result_count(recorded):
    answers = recorded["answers"]
    reader = f"token:{recorded['tokens']['reader'][1].token_id}"
    for name in ("timeline", "as_of", "changes", "report", "anomalies", "activity", "actor"):
        assert answers[name].status_code == 200, (name, answers[name].text)
    timeline = _record(recorded, "/api/v1/timeline", reader)
    assert timeline["filters"] == {"urn": LEDGER} and timeline["result_count"] == 2
    as_of = _record(recorded, "/api/v1/timeline/as-of")
    assert as_of["filters"] == {"urn": LEDGER, "at": NOW}
    assert as_of["result_count"] == len(answers["as_of"].json()["aspects"])
    changes = _record(recorded, "/api/v1/changes")
    assert changes["filters"] == {"entity": LEDGER, "since_ms": SINCE, "until_ms": UNTIL, "size": 1}
    assert changes["result_count"] == 2 == answers["changes"].json()["total"]  # the total, as for a search
    report = _record(recorded, REPORT_PATH)
    assert report["filters"] == {"from": SINCE, "to": UNTIL, "format": "csv"}
    data_lines = [line for line in answers["report"].text.splitlines() if "urn:li:dataset" in line]
    assert report["result_count"] == len(data_lines) == 3
    anomalies = _record(recorded, ANOMALIES_PATH)
    assert anomalies["filters"] == {"since_ms": SINCE, "until_ms": UNTIL, "limit": 5}
    assert anomalies["result_count"] == answers["anomalies"].json()["count"]
    activity = _record(recorded, "/api/v1/activity")
    assert activity["filters"] == {"since": SINCE, "until": UNTIL, "limit": 3}
    assert activity["result_count"] == len(answers["activity"].json()["days"])
    actor = _record(recorded, "/api/v1/activity/actor")
    assert actor["filters"] == {"actor": ALICE, "since": SINCE, "until": UNTIL, "limit": 10}
    assert actor["result_count"] == len(answers["actor"].json()["days"])
    finance = f"token:{recorded['tokens']['finance_reader'][1].token_id}"
    scoped = _record(recorded, "/api/v1/timeline", finance)
    assert scoped["filters"] == {"urn": LEDGER, "scope": [f"domain={FINANCE}"]} and scoped["result_count"] == 2


def test_too_large_filters_are_stored_cut_as_valid_json_with_a_marker(recorded):
    assert recorded["answers"]["long"].status_code == 200
    stored = [r for r in recorded["records"] if r["endpoint"] == SEARCH_PATH and r["status"] == 200
              and r["batch_id"] != "access-old"]  # fmt: skip
    assert len(stored) == 1 and len(stored[0]["filters"]) <= MAX_FILTER_CHARS
    filters = json.loads(stored[0]["filters"])
    assert filters[TRUNCATED_KEY] > MAX_FILTER_CHARS
    assert len(filters["actorUrns"]) == 8 and all(LONG_ACTORS[i].startswith(u[:-1]) for i, u in enumerate(filters["actorUrns"]))


def test_a_record_stored_unreadable_is_still_served_by_the_api_and_the_cli(recorded):
    logged = recorded["answers"]["admin_log"]
    assert logged.status_code == 200, logged.text
    old = [r for r in logged.json()["records"] if r["batchId"] == "access-old"]
    assert old and old[0]["filters"] == {"unreadable": OLD_CUT_FILTERS}
    cut = [r for r in logged.json()["records"] if TRUNCATED_KEY in r["filters"]]
    assert len(cut) == 1 and cut[0]["endpoint"] == SEARCH_PATH
    table = run_cli("access-log", "search", "--size", "1000", home=recorded["settings"].home)
    assert "Traceback" not in table.stderr and "token:old" in table.stdout
    as_json = run_cli("access-log", "search", "--size", "1000", "--json", home=recorded["settings"].home)
    assert "Traceback" not in as_json.stderr
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert {"unreadable": OLD_CUT_FILTERS} in [line["filters"] for line in lines]


def test_a_refused_jwt_records_the_subject_it_claimed(recorded):
    answer = recorded["answers"]["jwt"]
    assert answer.status_code == 401 and "lh_domains" in answer.json()["error"]
    refused = _record(recorded, SEARCH_PATH, f"jwt:{ISSUER}#mallory")
    assert refused["outcome"] == "refused" and refused["actor"] is None and refused["result_count"] is None


def test_a_redirect_is_recorded_as_a_redirect(recorded):
    assert recorded["answers"]["redirect"].status_code == 307
    redirect = _record(recorded, "/api/v1/timeline/")
    assert (redirect["status"], redirect["outcome"]) == (307, "redirect")


def test_an_admin_limited_to_a_scope_reads_only_the_reads_within_it(recorded):
    everything = recorded["answers"]["admin_log"].json()["records"]
    assert len({r["principal"] for r in everything}) >= 4  # the reader's, the scoped reader's, a JWT's, the admin's
    answer = recorded["answers"]["finance_admin_log"]
    assert answer.status_code == 200, answer.text
    seen = answer.json()["records"]
    finance = {f"token:{recorded['tokens'][name][1].token_id}" for name in ("finance_reader", "finance_admin")}
    assert seen and {r["principal"] for r in seen} <= finance
    assert any(r["endpoint"] == "/api/v1/timeline" for r in seen)
    assert all(r["filters"]["scope"] == [f"domain={FINANCE}"] for r in seen)
