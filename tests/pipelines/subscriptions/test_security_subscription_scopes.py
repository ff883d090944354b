"""A subscription created under a scope delivers only the events in it (a real receiver on loopback)."""

from __future__ import annotations

import pytest

from gold.scopes import parse_scope
from gold.subscriptions import EventFilters
from pipelines.runtime.io import append
from pipelines.subscriptions.delivery import deliver_outcomes
from pipelines.subscriptions.store import list_subscriptions
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import rows_df
from tests.pipelines.serving.test_security_scopes import _state_row
from tests.pipelines.subscriptions.test_delivery import EVENT_ID, FAST, PAYMENTS, _add, _delivered_ids, _publish, receiver  # noqa: F401

FINANCE = "urn:li:domain:finance"


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory):
    """The delivery tests' two batches, PAYMENTS in the finance domain."""
    settings = make_settings(tmp_path_factory.mktemp("subscription-scopes"), subscriptions=FAST)
    register_fresh_tables(spark, settings)
    append(rows_df(spark, "silver.aspect_state", [_state_row(PAYMENTS, FINANCE)]), settings, "silver.aspect_state")
    _publish(spark, settings, "b-1")
    _publish(spark, settings, "b-2")
    return settings


@pytest.mark.parametrize(
    ("name", "scope", "expected"),
    [
        ("hive", ["platform=hive"], ["e1", "e2", "e5"]),
        ("looker", ["platform=looker"], ["e3"]),
        ("finance", ["domain=" + FINANCE], ["e4", "e6"]),
        ("finance-tags", ["domain=" + FINANCE], ["e4"]),
    ],
)
def test_a_scoped_subscription_delivers_only_its_scope(spark, home, receiver, name, scope, expected):
    categories = ("TAG",) if name.endswith("-tags") else ()
    _add(spark, home, name, receiver.url, filters=EventFilters(categories=categories, scope=parse_scope(scope)))
    stored = next(s for s in list_subscriptions(spark, home) if s.name == name)
    assert stored.filters.scope == parse_scope(scope)  # kept with the subscription
    (outcome,) = deliver_outcomes(spark, home, names=[name])
    assert sorted(_delivered_ids(receiver)) == sorted(EVENT_ID[e] for e in expected)
    assert outcome.delivered == len(expected)
