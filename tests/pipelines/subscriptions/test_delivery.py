"""Webhook delivery against a real HTTP receiver on loopback and real Delta tables.

The history is written by hand (tests/pipelines/audit_inputs.py) so every expected count below is
counted from the table at the top of this module, not produced by the code under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import time

import pytest

from conf.errors import InputError
from conf.settings_sections import SubscriptionSettings
from conf.tables import table_name
from gold.subscriptions import EventFilters
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.runtime.io import read_table
from pipelines.subscriptions.delivery import deliver_outcomes, deliver_pending
from pipelines.subscriptions.secrets import encrypt_secret
from pipelines.subscriptions.status import subscription_status
from pipelines.subscriptions.store import add_subscription, list_subscriptions, remove_subscription, resume_subscription
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import change_event, land_refined_batch
from tests.pipelines.subscriptions.receiver import start_receiver

T0 = int(time.time() * 1000) - 3_600_000
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
PAYMENTS = "urn:li:dataset:(urn:li:dataPlatform:snowflake,db.payments,PROD)"
CHART = "urn:li:chart:(looker,sales)"
ALICE, BOB, ADMIN = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:admin"

# name: (change set, category, operation, actor, time, entity, aspect, modifier, batch)
HISTORY = {
    "e1": ("cs-1", "TAG", "ADD", ALICE, T0, ORDERS, "globalTags", "urn:li:tag:pii", "b-1"),
    "e2": ("cs-1", "OWNER", "ADD", ALICE, T0 + 1, ORDERS, "ownership", "urn:li:corpuser:carol", "b-1"),
    "e3": ("cs-2", "DOCUMENTATION", "MODIFY", BOB, T0 + 5, CHART, "editableChartProperties", None, "b-1"),
    "e4": ("cs-3", "TAG", "ADD", BOB, T0 + 7, PAYMENTS, "globalTags", "urn:li:tag:finance", "b-1"),
    "e5": ("cs-4", "TAG", "REMOVE", BOB, T0 + 100, ORDERS, "globalTags", "urn:li:tag:pii", "b-2"),
    "e6": ("cs-5", "LIFECYCLE", "HARD_DELETE", ADMIN, T0 + 200, PAYMENTS, "datasetKey", None, "b-2"),
}
ROWS = {
    name: change_event(cs, category, operation, actor, at, urn, aspect, batch, modifier=modifier)
    for name, (cs, category, operation, actor, at, urn, aspect, modifier, batch) in HISTORY.items()
}
EVENT_ID = {name: row["event_id"] for name, row in ROWS.items()}
# The receivers listen on loopback: allow-listed, as any private target must be.
FAST = SubscriptionSettings(
    retry_initial_ms=20, retry_max_ms=100, retry_budget_ms=5000, request_timeout_ms=3000, allowed_networks=("127.0.0.0/8",)
)


def _publish(spark, settings, batch_id: str) -> None:
    land_refined_batch(spark, settings, batch_id, changes=[r for r in ROWS.values() if r["batch_id"] == batch_id])
    publish_audit(spark, settings)
    publish_openmetadata(spark, settings)


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory):
    """Both batches published; each test adds its own subscriptions (replaying from the start)."""
    settings = make_settings(tmp_path_factory.mktemp("subscriptions"), subscriptions=FAST)
    register_fresh_tables(spark, settings)
    _publish(spark, settings, "b-1")
    _publish(spark, settings, "b-2")
    return settings


@pytest.fixture
def receiver():
    serving = start_receiver()
    yield next(serving)
    serving.close()


def _add(spark, settings, name, url, payload_format="ece", filters=EventFilters(), secret=None):
    ciphertext = encrypt_secret(settings, secret) if secret else None
    return add_subscription(
        spark, settings, name=name, url=url, payload_format=payload_format, filters=filters,
        secret_ciphertext=ciphertext, since_ms=1,
    )  # fmt: skip


def _delivered_ids(receiver) -> list[str]:
    return [event["id"] for post in receiver.acknowledged() for event in post.json()["events"]]


@pytest.mark.parametrize(
    ("name", "filters", "expected"),
    [
        ("everything", EventFilters(), ["e1", "e2", "e3", "e4", "e5", "e6"]),
        ("tags", EventFilters(categories=("TAG",)), ["e1", "e4", "e5"]),
        ("adds", EventFilters(operations=("ADD",)), ["e1", "e2", "e4"]),
        ("charts", EventFilters(entity_types=("chart",)), ["e3"]),
        ("hive", EventFilters(entity_prefixes=("urn:li:dataset:(urn:li:dataPlatform:hive,",)), ["e1", "e2", "e5"]),
        ("bob", EventFilters(actors=(BOB,)), ["e3", "e4", "e5"]),
        ("bob-tags", EventFilters(categories=("TAG",), actors=(BOB,)), ["e4", "e5"]),
        ("deletes", EventFilters(om_filter={"eventType": "entityDeleted"}), ["e6"]),
    ],
)
def test_each_filter_delivers_exactly_its_events(spark, home, receiver, name, filters, expected):
    _add(spark, home, name, receiver.url, filters=filters)
    (outcome,) = deliver_outcomes(spark, home, names=[name])
    assert sorted(_delivered_ids(receiver)) == sorted(EVENT_ID[e] for e in expected)
    assert outcome.delivered == len(expected) and outcome.state == "delivered"
    # Nothing is pending any more: a second delivery posts nothing.
    posts = len(receiver.posts)
    (again,) = deliver_outcomes(spark, home, names=[name])
    assert again.posts == 0 and len(receiver.posts) == posts


def test_events_of_an_entity_arrive_in_order_in_batches_of_the_configured_size(spark, home, receiver):
    settings = dataclasses.replace(home, subscriptions=dataclasses.replace(FAST, max_events_per_post=2))
    _add(spark, settings, "ordered", receiver.url)
    deliver_outcomes(spark, settings, names=["ordered"])
    posts = receiver.acknowledged()
    assert [len(p.json()["events"]) for p in posts] == [2, 2, 2]  # b-1's four events in two POSTs, b-2's two in one
    orders = [e["id"] for p in posts for e in p.json()["events"] if e["event"]["entityUrn"] == ORDERS]
    assert orders == [EVENT_ID["e1"], EVENT_ID["e2"], EVENT_ID["e5"]]
    first = posts[0].json()["events"][0]
    assert first["event_type"] == "EntityChangeEvent_v1" and first["event"]["category"] == "TAG"
    assert first["event"]["operation"] == "ADD" and first["event"]["modifier"] == "urn:li:tag:pii"
    assert first["meta"] == {"batch_id": "b-1"}


def test_two_503s_are_retried_and_the_events_delivered_once(spark, home, receiver):
    _add(spark, home, "flaky", receiver.url, filters=EventFilters(categories=("TAG",)))
    receiver.fail_next(503, 503)
    (outcome,) = deliver_outcomes(spark, home, names=["flaky"])
    assert [p.status for p in receiver.posts] == [503, 503, 200, 200]  # b-1's two tags, retried; then b-2's
    assert sorted(_delivered_ids(receiver)) == sorted(EVENT_ID[e] for e in ("e1", "e4", "e5"))
    assert outcome.retries == 2 and outcome.delivered == 3
    (row,) = subscription_status(spark, home, ["flaky"])
    assert row["state"] == "ok" and row["delivered"] == 3 and row["pending"] == 0


def test_a_400_goes_to_the_dead_letters_and_delivery_moves_on(spark, home, receiver):
    _add(spark, home, "refused", receiver.url, filters=EventFilters(actors=(BOB,)))
    receiver.fail_next(400)
    (outcome,) = deliver_outcomes(spark, home, names=["refused"])
    assert [p.status for p in receiver.posts] == [400, 200]
    assert _delivered_ids(receiver) == [EVENT_ID["e5"]]
    assert outcome.dead_lettered == 2
    dead = read_table(spark, home, "ops.subscription_dead_letters").filter("subscription = 'refused'").collect()
    assert sorted(r.event_id for r in dead) == sorted([EVENT_ID["e3"], EVENT_ID["e4"]])
    assert {r.status for r in dead} == {400} and all("HTTP 400" in r.error for r in dead)
    assert all(json.loads(r.payload)["id"] == r.event_id for r in dead)
    (row,) = subscription_status(spark, home, ["refused"])
    assert (row["delivered"], row["failed"], row["pending"]) == (1, 2, 0)


def test_a_429_waits_what_retry_after_asks(spark, home, receiver):
    _add(spark, home, "limited", receiver.url, filters=EventFilters(entity_types=("chart",)))
    receiver.fail_next((429, {"Retry-After": "1"}))
    deliver_outcomes(spark, home, names=["limited"])
    first, second = receiver.posts
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 1.0


def test_a_failing_receiver_is_left_pending_then_paused_and_resumed(spark, home, receiver):
    settings = dataclasses.replace(
        home, subscriptions=dataclasses.replace(FAST, retry_budget_ms=200, pause_after_seconds=1)
    )
    _add(spark, settings, "down", receiver.url, filters=EventFilters(entity_types=("chart",)))
    receiver.fail_next(*[500] * 50)
    (outcome,) = deliver_outcomes(spark, settings, names=["down"])
    assert outcome.state == "failing" and "HTTP 500" in outcome.error
    (row,) = subscription_status(spark, settings, ["down"])
    assert row["state"] == "failing" and row["pending"] == 1 and row["next_attempt_at"] is not None
    assert row["oldest_pending_age_s"] > 0 and "HTTP 500" in row["last_error"]
    time.sleep(1.1)
    (outcome,) = deliver_outcomes(spark, settings, names=["down"], force=True)
    assert outcome.state == "paused"
    (outcome,) = deliver_outcomes(spark, settings, names=["down"], force=True)
    assert outcome.state == "paused" and outcome.posts == 0
    receiver.clear()
    resume_subscription(spark, settings, "down")
    (outcome,) = deliver_outcomes(spark, settings, names=["down"])
    assert outcome.delivered == 1 and _delivered_ids(receiver) == [EVENT_ID["e3"]]
    (row,) = subscription_status(spark, settings, ["down"])
    assert row["state"] == "ok" and row["last_error"] is not None  # the last error stays visible


def test_signed_posts_verify_with_the_secret(spark, home, receiver):
    secret = b"s3cr3t-shared-with-the-receiver"
    _add(spark, home, "signed", receiver.url, filters=EventFilters(entity_types=("chart",)), secret=secret)
    deliver_outcomes(spark, home, names=["signed"])
    (post,) = receiver.posts
    timestamp = post.headers["X-Lakehouse-Timestamp"]
    expected = "sha256=" + hmac.new(secret, timestamp.encode() + b"." + post.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(post.headers["X-Lakehouse-Signature"], expected)
    assert abs(int(timestamp) - time.time()) < 60
    stored = read_table(spark, home, "ops.subscriptions").filter("name = 'signed'").collect()[0]
    assert secret.decode() not in json.dumps(stored.asDict(), default=str)


def test_unsigned_posts_carry_no_signature(spark, home, receiver):
    _add(spark, home, "unsigned", receiver.url, filters=EventFilters(entity_types=("chart",)))
    deliver_outcomes(spark, home, names=["unsigned"])
    (post,) = receiver.posts
    assert "X-Lakehouse-Signature" not in post.headers and post.headers["X-Lakehouse-Subscription"] == "unsigned"


def test_a_slow_receiver_does_not_hold_up_a_fast_one(spark, home):
    slow_serving, fast_serving = start_receiver(), start_receiver()
    slow, fast = next(slow_serving), next(fast_serving)
    slow.delay_s = 5.0
    settings = dataclasses.replace(home, subscriptions=dataclasses.replace(FAST, request_timeout_ms=20_000))
    try:
        _add(spark, settings, "slow", slow.url)
        _add(spark, settings, "fast", fast.url)
        started = time.time()
        outcomes = {o.name: o for o in deliver_outcomes(spark, settings, names=["slow", "fast"])}
    finally:
        slow_serving.close()
        fast_serving.close()
    assert outcomes["fast"].delivered == 6 and outcomes["slow"].delivered == 6
    # Both batches reached the fast receiver before the slow one had answered its first POST.
    assert len(fast.acknowledged()) == 2
    assert max(p.at for p in fast.posts) < min(p.at for p in slow.posts)
    assert min(p.at for p in slow.posts) - started >= 5.0


def test_slack_messages_read_as_one_line_per_event_with_a_link(spark, home, receiver):
    settings = dataclasses.replace(
        home, subscriptions=dataclasses.replace(FAST, link_base_url="https://datahub.example.com")
    )
    _add(spark, settings, "chat", receiver.url, payload_format="slack", filters=EventFilters(categories=("TAG",)))
    deliver_outcomes(spark, settings, names=["chat"])
    first, second = (p.json() for p in receiver.acknowledged())
    lines = first["text"].splitlines()
    assert lines[0] == "2 metadata changes (chat)"
    link = "https://datahub.example.com/dataset/urn%3Ali%3Adataset%3A%28urn%3Ali%3AdataPlatform%3Ahive%2Cdb.orders%2CPROD%29"
    assert lines[1] == f"• alice add tag urn:li:tag:pii on <{link}|dataset {ORDERS}>"
    assert first["event_ids"] == [EVENT_ID["e1"], EVENT_ID["e4"]]
    assert second["text"].splitlines()[1].startswith("• bob remove tag urn:li:tag:pii on <")


def test_openmetadata_format_posts_change_events_of_the_selected_sets(spark, home, receiver):
    _add(spark, home, "om", receiver.url, payload_format="openmetadata", filters=EventFilters(actors=(ADMIN,)))
    deliver_outcomes(spark, home, names=["om"])
    (post,) = receiver.acknowledged()
    (event,) = post.json()["data"]
    assert event["eventType"] == "entityDeleted" and event["userName"] == "admin"
    assert post.json()["subscription"] == "om"


def test_bad_subscriptions_are_refused_naming_the_value(spark, home):
    with pytest.raises(InputError, match="--url: 'ftp://example.com/x' is not an http or https URL"):
        _add(spark, home, "ftp", "ftp://example.com/x")
    with pytest.raises(InputError, match="--category: 'TAGS' is not one of"):
        _add(spark, home, "typo", "http://127.0.0.1:9/x", filters=EventFilters(categories=("TAGS",)))
    with pytest.raises(InputError, match="carries credentials"):
        _add(spark, home, "creds", "https://user:pw@example.com/x")
    allow = dataclasses.replace(home, subscriptions=dataclasses.replace(FAST, allowed_hosts=("*.example.com",)))
    with pytest.raises(InputError, match="host 'evil.test' is not in subscriptions.allowed_hosts"):
        _add(spark, allow, "evil", "https://evil.test/hook")
    _add(spark, allow, "allowed", "https://hooks.example.com/x")
    with pytest.raises(InputError, match="a subscription named 'allowed' already exists"):
        _add(spark, allow, "allowed", "https://hooks.example.com/y")
    remove_subscription(spark, home, "allowed")
    assert "allowed" not in {s.name for s in list_subscriptions(spark, home)}
    with pytest.raises(InputError, match="no subscription named 'allowed'"):
        remove_subscription(spark, home, "allowed")


def test_subscription_tables_are_registered(spark, home):
    for key in ("ops.subscriptions", "ops.subscription_cursors", "ops.subscription_dead_letters"):
        assert spark.sql(f"SELECT * FROM {table_name(home, key)} LIMIT 1").columns


# Last: it points the session's table names at another home.
def test_a_new_subscription_starts_from_now(spark, tmp_path, receiver):
    settings = make_settings(tmp_path / "fresh", subscriptions=FAST)
    register_fresh_tables(spark, settings)
    _publish(spark, settings, "b-1")
    add_subscription(spark, settings, name="later", url=receiver.url, payload_format="ece", filters=EventFilters())
    deliver_outcomes(spark, settings)
    assert _delivered_ids(receiver) == []
    time.sleep(0.05)
    between_ms = int(time.time() * 1000)
    time.sleep(0.05)
    _publish(spark, settings, "b-2")
    deliver_pending(spark, settings)
    assert _delivered_ids(receiver) == [EVENT_ID["e5"], EVENT_ID["e6"]]
    # --since replays what silver did not hold at that time (read with time travel): b-2 only.
    receiver.clear()
    add_subscription(
        spark, settings, name="replay", url=receiver.url, payload_format="ece", filters=EventFilters(), since_ms=between_ms
    )  # fmt: skip
    deliver_outcomes(spark, settings, names=["replay"])
    assert _delivered_ids(receiver) == [EVENT_ID["e5"], EVENT_ID["e6"]]
    with pytest.raises(InputError, match="--since: .* is in the future"):
        add_subscription(
            spark, settings, name="future", url=receiver.url, payload_format="ece", filters=EventFilters(),
            since_ms=int(time.time() * 1000) + 3_600_000,
        )  # fmt: skip


# Also on its own home (after the test above, for the same reason).
def test_a_batch_is_delivered_once_the_publish_its_subscription_reads_has_recorded_it(spark, tmp_path, receiver):
    settings = make_settings(tmp_path / "gates", subscriptions=FAST)
    register_fresh_tables(spark, settings)
    for name, payload_format, filters in [
        ("ece", "ece", EventFilters()),
        ("slack", "slack", EventFilters()),
        ("deletes", "ece", EventFilters(om_filter={"eventType": "entityDeleted"})),
        ("om", "openmetadata", EventFilters()),
    ]:
        _add(spark, settings, name, receiver.url, payload_format=payload_format, filters=filters)
    land_refined_batch(spark, settings, "b-2", changes=[r for r in ROWS.values() if r["batch_id"] == "b-2"])
    publish_audit(spark, settings)
    # Watch mode publishes the ChangeEvents one micro-batch later: the subscriptions that read only
    # silver's events get theirs now, those that read ChangeEvents wait.
    assert {o.name: o.delivered for o in deliver_outcomes(spark, settings)} == {"ece": 2, "slack": 2, "deletes": 0, "om": 0}
    pending = {row["name"]: row["pending"] for row in subscription_status(spark, settings)}
    assert pending == {"ece": 0, "slack": 0, "deletes": 0, "om": 0}
    publish_openmetadata(spark, settings)
    assert {o.name: o.delivered for o in deliver_outcomes(spark, settings)} == {"ece": 0, "slack": 0, "deletes": 1, "om": 2}
