"""A subscription created under a scope delivers only the events in it (a real receiver on loopback)."""

from __future__ import annotations

import pytest

from gold.scopes import parse_scope
from gold.subscriptions import EventFilters
from pipelines.batch.publish_audit import publish_audit
from pipelines.runtime.io import append
from pipelines.subscriptions.delivery import deliver_outcomes
from pipelines.subscriptions.store import list_subscriptions
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import land_refined_batch, rows_df
from tests.pipelines.serving.test_security_scopes import _state_row
from tests.pipelines.subscriptions.test_delivery import EVENT_ID, FAST, PAYMENTS, ROWS, _add, receiver  # noqa: F401

pytestmark = pytest.mark.slow  # a home published and delivered: seconds
FINANCE = "urn:li:domain:finance"
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
