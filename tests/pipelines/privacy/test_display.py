"""Identities on every surface, by the one rule of `pipelines.privacy.display`, over one pseudonymised home.

The explorer's endpoints, the anomalies endpoint and the report download (a real server on loopback), the
report and export files, and webhook payloads (a real receiver on loopback) show people as who they are
to callers allowed to see them, pseudonyms to the others, and an erased person as the erased subject
beside their pseudonym. The erasure test and the page's after it run last: the erasure changes the home.
"""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from selenium.webdriver.common.by import By

from bronze.pseudonym_rules import PSEUDONYM_PREFIX
from conf.settings_sections import SubscriptionSettings
from conf.tables import table_name
from gold.subscriptions import EventFilters
from pipelines.audit_trail.report_format import parse_report_query
from pipelines.batch.audit_report import report_rows
from pipelines.batch.export_ece import write_ece_jsonl
from pipelines.batch.export_openmetadata import write_openmetadata_jsonl
from pipelines.privacy.display import person_pseudonym, show_identities
from pipelines.privacy.identities import ERASED_SUBJECT
from pipelines.serving.api import create_app, serving
from pipelines.serving.erasure import erase_person
from pipelines.serving.report import REPORT_PATH
from pipelines.serving.tokens import create_token
from pipelines.subscriptions.delivery import deliver_outcomes
from pipelines.subscriptions.store import add_subscription
from tests.pipelines.serving.test_explorer import _open, _wait, browser  # noqa: F401 (the fixture)
from tests.pipelines.privacy.people import ERASED, ERASED_AGENT, ERASED_IP, KEPT, LOGIN_AT, landed_home
from tests.pipelines.subscriptions.receiver import start_receiver

SINCE = "2023-01-01T00:00:00Z"
WINDOW = {"from": SINCE, "to": "2025-01-01T00:00:00Z"}
# The receiver listens on loopback: allow-listed, as any private target must be.
FAST = SubscriptionSettings(retry_initial_ms=20, retry_max_ms=100, retry_budget_ms=5000, allowed_networks=("127.0.0.0/8",))
P1 = PSEUDONYM_PREFIX + "1" * 24
P2 = PSEUDONYM_PREFIX + "2" * 24


def test_the_rule_shows_identities_in_fields_and_text_and_keeps_erased_pseudonyms():
    resolved = {P1: "urn:li:corpuser:jdoe", P2: ERASED_SUBJECT, "ua-" + "3" * 24: 'agent "x"'}
    document = {"actor": P1, "owner": P2, "userName": P1.split(":")[-1], "raw": f'{{"u": "{"ua-" + "3" * 24}", "a": "{P1}"}}',
                "owners": [P1, P2], "note": f"changed by {P1}"}  # fmt: skip
    assert show_identities(document, resolved) == {
        "actor": "urn:li:corpuser:jdoe", "actorPseudonym": P1,
        "owner": ERASED_SUBJECT, "ownerPseudonym": P2,
        "userName": "jdoe", "userNamePseudonym": P1.split(":")[-1],
        "raw": '{"u": "agent \\"x\\"", "a": "urn:li:corpuser:jdoe"}',
        "owners": ["urn:li:corpuser:jdoe", P2],
        "note": "changed by urn:li:corpuser:jdoe",
    }  # fmt: skip
    assert json.loads(show_identities(document, resolved)["raw"])["u"] == 'agent "x"'
    # Fixed formats take the text rule alone: no field is added, an erased person keeps their pseudonym.
    assert show_identities(document, resolved, annotate=False)["owner"] == P2
    assert "ownerPseudonym" not in show_identities(document, resolved, annotate=False)


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory):
    """The pseudonymised home, a flagged day of the erased person's, two tokens and the API on loopback."""
    settings = landed_home(spark, tmp_path_factory.mktemp("display") / "home", subscriptions=FAST)
    pseudonym = person_pseudonym(settings, ERASED)
    spark.sql(
        f"INSERT INTO {table_name(settings, 'gold.actor_anomalies')} VALUES ('{pseudonym}', 'day', {LOGIN_AT}, "
        f"{LOGIN_AT + 86_400_000}, 2.5, 'volume', true, '[]', 'actor-activity', '1', TIMESTAMP '2024-01-17 00:00:00', "
        "DATE '2024-01-16')"
    )
    sensitive, _ = create_token(settings, "urn:li:corpuser:auditor", ["audit-read-sensitive"])
    plain, _ = create_token(settings, "urn:li:corpuser:auditor", ["audit-read"])
    with serving(create_app(settings, spark)) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:

        def get(path: str, token: str, **params) -> httpx.Response:
            answer = client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200, answer.text
            return answer

        yield {"settings": settings, "pseudonym": pseudonym, "get": get, "sensitive": sensitive, "plain": plain, "url": base_url}


def _changes(home, token: str, actor: str) -> list[dict]:
    return home["get"]("/api/v1/changes", home[token], actor=actor, since=SINCE, size=1000).json()["changes"]


def test_the_explorer_shows_identities_to_sensitive_readers_and_pseudonyms_to_others(home):
    pseudonym, get = home["pseudonym"], home["get"]
    changes = _changes(home, "sensitive", ERASED)
    assert changes and {c["actor"] for c in changes} == {ERASED} and {c["actorPseudonym"] for c in changes} == {pseudonym}
    plain = home["get"]("/api/v1/changes", home["plain"], actor=ERASED, since=SINCE, size=1000)
    assert {c["actor"] for c in plain.json()["changes"]} == {pseudonym} and ERASED not in plain.text
    top = get("/api/v1/activity", home["sensitive"], since=SINCE, limit=100).json()["topActors"]
    assert {ERASED, KEPT} <= {a["actor"] for a in top}
    assert ERASED not in get("/api/v1/activity", home["plain"], since=SINCE, limit=100).text
    actor = get("/api/v1/activity/actor", home["sensitive"], actor=ERASED, since=SINCE).json()
    assert actor["actor"] == ERASED and actor["days"] and [a["actor"] for a in actor["anomalies"]] == [ERASED]
    # An entity the erased person was made an owner of: its timeline names them as the change's modifier.
    every = get("/api/v1/changes", home["plain"], since=SINCE, size=1000).json()["changes"]
    owned = next(c["entityUrn"] for c in every if c["modifier"] == pseudonym)
    assert ERASED in get("/api/v1/timeline", home["sensitive"], urn=owned).text
    assert ERASED not in get("/api/v1/timeline", home["plain"], urn=owned).text


def test_anomalies_and_the_report_download_show_identities_to_sensitive_readers(home):
    pseudonym, get = home["pseudonym"], home["get"]
    flagged = get("/api/v1/anomalies", home["sensitive"], actor=ERASED, since=SINCE).json()["anomalies"]
    assert [a["actor"] for a in flagged] == [ERASED] and flagged[0]["actorPseudonym"] == pseudonym
    assert [a["actor"] for a in get("/api/v1/anomalies", home["plain"], actor=ERASED, since=SINCE).json()["anomalies"]] == [pseudonym]
    report = _report_rows(get(REPORT_PATH, home["sensitive"], actor=ERASED, **WINDOW).text)
    assert ERASED in report and pseudonym not in report
    plain = _report_rows(get(REPORT_PATH, home["plain"], actor=ERASED, **WINDOW).text)
    assert pseudonym in plain and ERASED not in plain


def _report_rows(csv_text: str) -> str:
    """The report's rows without its header (which names the actor filter as the reader asked it)."""
    return "\n".join(line for line in csv_text.splitlines() if not line.startswith("#"))


def test_the_report_and_export_files_name_people(spark, home, tmp_path):
    settings = home["settings"]
    rows = list(report_rows(spark, settings, parse_report_query({**WINDOW, "actor": ERASED})))
    assert rows and {r["actor"] for r in rows} == {ERASED}
    ece, openmetadata = _exports(spark, settings, tmp_path)
    assert ERASED in ece and KEPT in ece and PSEUDONYM_PREFIX not in ece
    assert '"userName":"mlee"' in openmetadata.replace(" ", "") and "p-" + home["pseudonym"][len(PSEUDONYM_PREFIX):] not in openmetadata


def _exports(spark, settings, folder) -> tuple[str, str]:
    write_ece_jsonl(spark, settings, folder / "ece.jsonl")
    write_openmetadata_jsonl(spark, settings, folder / "om.jsonl")
    return (folder / "ece.jsonl").read_text(), (folder / "om.jsonl").read_text()


def _delivered(spark, settings, name: str, actor: str) -> str:
    serving_receiver = start_receiver()
    receiver = next(serving_receiver)
    try:
        add_subscription(spark, settings, name=name, url=receiver.url, payload_format="ece",
                         filters=EventFilters(actors=(actor,)), secret_ciphertext=None, since_ms=1)  # fmt: skip
        deliver_outcomes(spark, settings, names=[name])
        return "".join(post.body.decode() for post in receiver.acknowledged())
    finally:
        serving_receiver.close()


def test_webhooks_follow_a_person_by_identity_and_name_them(spark, home):
    settings = home["settings"]
    payloads = _delivered(spark, settings, "mlee-changes", ERASED)
    events = [e for post in payloads.replace("}{", "}\n{").splitlines() for e in json.loads(post)["events"]]
    assert events and {e["event"]["auditStamp"]["actor"] for e in events} == {ERASED}
    # The subscription stores the person by pseudonym: no table holds the identity.
    stored = spark.sql(f"SELECT actors FROM {table_name(settings, 'ops.subscriptions')}").collect()
    assert [r.actors for r in stored] == [[home["pseudonym"]]]


def test_after_erasure_every_surface_shows_the_erased_subject_and_the_other_person_stays(spark, home, tmp_path):
    settings, pseudonym, get = home["settings"], home["pseudonym"], home["get"]
    erase_person(settings, ERASED, "erasure request 2026-17", "dpo")
    changes = _changes(home, "sensitive", ERASED)
    assert changes and {c["actor"] for c in changes} == {ERASED_SUBJECT} and {c["actorPseudonym"] for c in changes} == {pseudonym}
    assert {c["actor"] for c in _changes(home, "sensitive", KEPT)} == {KEPT}
    flagged = get("/api/v1/anomalies", home["sensitive"], actor=ERASED, since=SINCE).json()["anomalies"]
    assert [a["actor"] for a in flagged] == [ERASED_SUBJECT]
    report = _report_rows(get(REPORT_PATH, home["sensitive"], actor=ERASED, **WINDOW).text)
    assert pseudonym in report and ERASED not in report
    outputs = [*_exports(spark, settings, tmp_path), _delivered(spark, settings, "after-erasure", ERASED)]
    for output in outputs:
        assert all(identity not in output for identity in (ERASED, ERASED_IP, ERASED_AGENT, '"mlee"')), output[:500]
    assert pseudonym in outputs[0] and KEPT in outputs[0]


def test_the_explorer_page_opens_an_erased_person_by_pseudonym(browser, home):
    # After the erasure above: the top actors list shows the erased subject beside the pseudonym it opens.
    pseudonym = home["pseudonym"]
    browser.get(home["url"] + "/")
    browser.execute_script("sessionStorage.setItem('lakehouse.explorer.token', arguments[0])", home["sensitive"])
    _open(browser, home["url"] + "/?view=activity&since=2023-11-01&until=2024-01-31")
    actors = browser.find_elements(By.CSS_SELECTOR, "#top-actors li button")
    erased = next(button for button in actors if button.text == f"{ERASED_SUBJECT} ({pseudonym})")
    assert KEPT in [button.text for button in actors] and ERASED not in browser.page_source
    erased.click()
    _wait(browser, lambda d: d.find_element(By.ID, "actor-name").text == f"{ERASED_SUBJECT} ({pseudonym})")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#actor-anomalies tbody tr")) == 1
