"""A subscription created under a scope delivers only the events in it (a real receiver on loopback)."""

from __future__ import annotations

import pytest

from gold.scopes import parse_scope
from gold.subscriptions import EventFilters
from pipelines.batch.publish_audit import publish_audit
from pipelines.runtime.home import home_of
from pipelines.runtime.io import append
from pipelines.runtime.state_store import staged_entity_domains
from pipelines.serving.scoped_reads import EntityDomains
from pipelines.subscriptions.delivery import deliver_outcomes
from pipelines.subscriptions.store import list_subscriptions
from pipelines.subscriptions.stream import selected_events
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import land_refined_batch, rows_df
from tests.pipelines.serving.test_scoped_reads import _audit_row
from tests.pipelines.serving.test_security_scopes import _state_row
from tests.pipelines.subscriptions.test_delivery import EVENT_ID, FAST, PAYMENTS, ROWS, _add, receiver  # noqa: F401

pytestmark = pytest.mark.slow  # a home published and delivered: seconds
FINANCE, SALES = "urn:li:domain:finance", "urn:li:domain:sales"
# name: scope, categories, the events of test_delivery's history it selects (counted by hand)
SUBSCRIPTIONS = {
    "hive": (["platform=hive"], (), ["e1", "e2", "e5"]),
    "looker": (["platform=looker"], (), ["e3"]),
    "finance-tags": (["domain=" + FINANCE], ("TAG",), ["e4"]),
}


def test_a_scoped_subscription_keeps_its_scope_and_delivers_only_events_in_it(spark, tmp_path, receiver):
    settings = make_settings(tmp_path, subscriptions=FAST)
    register_fresh_tables(spark, settings)
    append(rows_df(spark, "silver.aspect_state", [_state_row(PAYMENTS, FINANCE)]), settings, "silver.aspect_state")
    for batch_id in ("b-1", "b-2"):
        land_refined_batch(spark, settings, batch_id, changes=[r for r in ROWS.values() if r["batch_id"] == batch_id])
    publish_audit(spark, settings)
    for name, (scope, categories, _) in SUBSCRIPTIONS.items():
        _add(spark, settings, name, receiver.url, filters=EventFilters(categories=categories, scope=parse_scope(scope)))
    stored = {s.name: s.filters.scope for s in list_subscriptions(spark, settings)}
    assert stored == {name: parse_scope(scope) for name, (scope, _, _) in SUBSCRIPTIONS.items()}
    outcomes = {o.name: o for o in deliver_outcomes(spark, settings, names=list(SUBSCRIPTIONS))}
    delivered: dict[str, list[str]] = {}
    for post in receiver.acknowledged():
        body = post.json()
        delivered.setdefault(body["subscription"], []).extend(event["id"] for event in body["events"])
    for name, (_, _, expected) in SUBSCRIPTIONS.items():
        assert sorted(delivered.get(name, [])) == sorted(EVENT_ID[e] for e in expected), name
        assert outcomes[name].delivered == len(expected), name


def test_a_domain_scoped_subscription_and_the_server_put_an_entity_in_the_same_domain(spark, tmp_path):
    settings = make_settings(tmp_path, subscriptions=FAST)
    register_fresh_tables(spark, settings)
    # PAYMENTS was published in finance; the state has moved it to sales since (not published yet).
    append(rows_df(spark, "gold.audit_events", [_audit_row(PAYMENTS, 1, SALES), _audit_row(PAYMENTS, 2, FINANCE)]),
           settings, "gold.audit_events")  # fmt: skip
    append(rows_df(spark, "silver.aspect_state", [_state_row(PAYMENTS, SALES)]), settings, "silver.aspect_state")
    land_refined_batch(spark, settings, "b-1", changes=[r for r in ROWS.values() if r["batch_id"] == "b-1"])
    entities_df = spark.createDataFrame([(PAYMENTS,)], "entity_urn string")
    with staged_entity_domains(spark, settings, entities_df, home_of(settings).scratch("test", "domains")) as state_df:
        assert [r.domain for r in state_df.collect()] == [SALES]  # the state's answer differs
    assert EntityDomains(settings).entities_of([FINANCE]) == [PAYMENTS]
    for domain, expected in ((FINANCE, [EVENT_ID["e4"]]), (SALES, [])):
        subscription = _add(spark, settings, domain.rsplit(":", 1)[1], "http://127.0.0.1:9/",
                            filters=EventFilters(scope=parse_scope(["domain=" + domain])))  # fmt: skip
        with selected_events(spark, settings, subscription, ["b-1"]) as selected_df:
            assert [r.event_id for r in selected_df.collect()] == expected, domain
