"""Deliver pending change events to every subscription: at least once, in order per entity, batched.

One thread per subscription (at most `subscriptions.max_concurrent` at once, at most
`max_concurrent_per_host` POSTing to one host), so a slow or dead receiver holds up only itself. A
subscription's events go out in batches of `max_events_per_post`, one POST at a time; its cursor is
committed after the receiver's 2xx, never before, so a delivery killed at any point re-sends from the
last acknowledged POST on its next run (the receiver may see a POST twice, with the same event ids).

Failures: 5xx, 408, 429, timeouts and connection errors are retried with exponential backoff and
jitter (429 waits what Retry-After asks) for up to `retry_budget_ms` per run; then the events stay
pending and the subscription waits out its backoff (next_attempt_at) before the next run tries it. A
subscription failing for `pause_after_seconds` is paused. Other answers (4xx but 408/429, 3xx) put the
POST's events in ops.subscription_dead_letters and delivery moves on. Over 400 lines on purpose: the
threads, the per-host limits, the retries and the cursor commits are one delivery protocol.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from conf.errors import LakehouseError
from conf.settings import Settings
from gold.subscriptions import to_batch_body, to_slack_body
from pipelines.runtime.backoff import backoff_seconds
from pipelines.runtime.faults import crash_point
from pipelines.runtime.progress import StageResult
from pipelines.subscriptions.posting import classify_status, excerpt, retry_after_seconds, signed_headers
from pipelines.subscriptions.secrets import decrypt_secret
from pipelines.subscriptions.targets import check_url, pinned_connection
from pipelines.subscriptions.store import Subscription, list_subscriptions, update_state
from pipelines.subscriptions.stream import (
    DeliveryItem,
    StreamBatch,
    commit_cursor,
    load_items,
    pending_batches,
    published_stream,
    read_cursor,
    record_dead_letters,
)

STAGE = "deliver"
USER_AGENT = "metadata-audit-lakehouse-subscriptions/1"
_MAX_BODY_READ = 65_536


@dataclass
class Outcome:
    """What one delivery run did for one subscription."""

    name: str
    delivered: int = 0
    posts: int = 0
    dead_lettered: int = 0
    retries: int = 0
    state: str = "idle"  # idle, delivered, failing, paused, busy, waiting, skipped
    error: str | None = None


@dataclass(frozen=True)
class Answer:
    """One HTTP exchange: a status (0 for none) and what to make of it."""

    status: int
    verdict: str  # delivered, retry, dead
    error: str | None = None
    retry_after: float | None = None


class HostLimits:
    """One bounded semaphore per target host:port: at most `per_host` POSTs to one host at once."""

    def __init__(self, per_host: int):
        self._per_host = per_host
        self._lock = threading.Lock()
        self._semaphores: dict[str, threading.BoundedSemaphore] = {}

    def of(self, url: str) -> threading.BoundedSemaphore:
        parts = urlsplit(url)
        key = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        with self._lock:
            return self._semaphores.setdefault(key, threading.BoundedSemaphore(self._per_host))


class Target:
    """A keep-alive HTTP connection to one subscription's URL (one request at a time).

    Each new connection resolves the host again and goes to the address it checked
    (`pipelines.subscriptions.targets`): never to a loopback, private or link-local one outside
    `allowed_networks`.
    """

    def __init__(self, url: str, timeout_s: float, excerpt_chars: int, allowed_networks: Sequence[str] = ()):
        parts = urlsplit(url)
        self._url = url
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._timeout = timeout_s
        self._excerpt_chars = excerpt_chars
        self._allowed_networks = tuple(allowed_networks)
        self._connection: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str]) -> Answer:
        """POST `body`; connection errors and timeouts come back as a retryable Answer with status 0.

        Raises:
            InputError: when the host now resolves to an address that is not allowed.
        """
        try:
            connection = self._connect()
            connection.request("POST", self._path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read(_MAX_BODY_READ)
            if response.will_close or len(data) == _MAX_BODY_READ:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return Answer(0, "retry", f"{type(exc).__name__}: {exc}"[: self._excerpt_chars])
        verdict = classify_status(response.status)
        error = None if verdict == "delivered" else f"HTTP {response.status}: {excerpt(data, self._excerpt_chars)}"
        retry_after = retry_after_seconds(response.getheader("Retry-After")) if response.status == 429 else None
        return Answer(response.status, verdict, error, retry_after)

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            self._connection = pinned_connection(self._url, self._allowed_networks, self._timeout)
        return self._connection

    def close(self) -> None:
        """Drop the connection (the next POST opens a new one)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


@contextlib.contextmanager
def subscription_lock(settings: Settings, subscription: Subscription) -> Iterator[bool]:
    """Hold a subscription's delivery lock if no other process or thread holds it; yield whether it is held.

    An flock is released by the kernel when its holder dies, so a delivery killed with SIGKILL never
    leaves the subscription locked.
    """
    # An flock is local to one host: beside an object-storage home it lives in the local folder.
    folder = settings.local_home / "_locks" / "subscriptions"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{subscription.subscription_id}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def deliver_pending(
    spark: SparkSession, settings: Settings, *, names: Sequence[str] = (), force: bool = False
) -> StageResult:
    """Deliver every subscription's pending events (called after each publish, and by `subscriptions deliver`).

    Receiver failures never raise: they are retried, recorded on the subscription, or dead-lettered.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        names: only these subscriptions (default all).
        force: also try subscriptions that are waiting out a backoff.

    Returns:
        A StageResult `deliver` whose metrics count events delivered and dead-lettered, POSTs, retries
        and subscriptions failing (rows_in/rows_out stay 0: delivery writes no data table).
    """
    outcomes = deliver_outcomes(spark, settings, names=names, force=force)
    return StageResult(
        STAGE,
        (),
        0,
        0,
        {
            "subscriptions": float(len(outcomes)),
            "delivered": float(sum(o.delivered for o in outcomes)),
            "dead_lettered": float(sum(o.dead_lettered for o in outcomes)),
            "posts": float(sum(o.posts for o in outcomes)),
            "retries": float(sum(o.retries for o in outcomes)),
            "failing": float(sum(o.state in ("failing", "paused") for o in outcomes)),
        },
    )


def deliver_outcomes(
    spark: SparkSession,
    settings: Settings,
    *,
    names: Sequence[str] = (),
    force: bool = False,
    host_limits: HostLimits | None = None,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """Deliver as `deliver_pending` does and return what happened per subscription, by name.

    Args:
        host_limits: per-host POST limits shared with other deliveries running at the same time
            (default: limits of this call alone).
        stop: when set, retry waits end at once and the events stay pending (a stopping watcher).
    """
    subscriptions = list_subscriptions(spark, settings, names)
    if not subscriptions:
        return []
    stream = published_stream(spark, settings)
    limits = host_limits or HostLimits(settings.subscriptions.max_concurrent_per_host)
    workers = min(settings.subscriptions.max_concurrent, len(subscriptions))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver") as pool:
        futures = [
            pool.submit(_deliver_guarded, spark, settings, s, stream, limits, force, stop or threading.Event())
            for s in subscriptions
        ]
        return [f.result() for f in futures]


def _deliver_guarded(
    spark: SparkSession,
    settings: Settings,
    subscription: Subscription,
    stream: Sequence[StreamBatch],
    limits: HostLimits,
    force: bool,
    stop: threading.Event,
) -> Outcome:
    outcome = Outcome(subscription.name)
    if subscription.paused:
        outcome.state, outcome.error = "paused", subscription.last_error
        return outcome
    now = datetime.now(timezone.utc)
    if not force and subscription.next_attempt_at is not None and subscription.next_attempt_at > now:
        outcome.state, outcome.error = "waiting", subscription.last_error
        return outcome
    with subscription_lock(settings, subscription) as held:
        if not held:
            outcome.state = "busy"
            return outcome
        try:
            _deliver(spark, settings, subscription, stream, limits, outcome, stop)
        except LakehouseError as exc:
            # A subscription that cannot be delivered at all (host no longer allowed, key file gone):
            # recorded on it and shown by `status`; the others go on.
            outcome.state, outcome.error = "failing", str(exc)
            _record_failure(spark, settings, subscription, outcome, next_attempt_at=None)
    return outcome


def _deliver(
    spark: SparkSession,
    settings: Settings,
    subscription: Subscription,
    stream: Sequence[StreamBatch],
    limits: HostLimits,
    outcome: Outcome,
    stop: threading.Event,
) -> None:
    config = settings.subscriptions
    check_url(subscription.url, config.allowed_hosts, config.allowed_networks)
    secret = (
        decrypt_secret(settings, subscription.secret_ciphertext, subscription.name)
        if subscription.secret_ciphertext
        else None
    )
    cursor = read_cursor(spark, settings, subscription.subscription_id)
    batches = pending_batches(stream, subscription, cursor)
    timeout_s = config.request_timeout_ms / 1000
    target = Target(subscription.url, timeout_s, config.error_excerpt_chars, config.allowed_networks)
    deadline = time.monotonic() + config.retry_budget_ms / 1000
    semaphore = limits.of(subscription.url)
    try:
        for batch in batches:
            items = load_items(spark, settings, subscription, batch.batch_id, config.link_base_url)
            offset = cursor.offsets.get(batch.batch_id, 0)
            if offset >= len(items):
                commit_cursor(
                    spark, settings, subscription.subscription_id, batch.batch_id, len(items), complete=True, delivered=0
                )
                continue
            for start in range(offset, len(items), config.max_events_per_post):
                chunk = items[start : start + config.max_events_per_post]
                end = start + len(chunk)
                answer = _post_with_retries(
                    spark, settings, subscription, target, semaphore, secret, chunk, deadline, outcome, stop
                )
                if answer.verdict == "retry":
                    return
                if answer.verdict == "dead":
                    record_dead_letters(
                        spark, settings, subscription, batch.batch_id, chunk, status=answer.status, error=answer.error or ""
                    )
                    outcome.dead_lettered += len(chunk)
                crash_point("subscriptions.acknowledged")
                delivered = len(chunk) if answer.verdict == "delivered" else 0
                commit_cursor(
                    spark,
                    settings,
                    subscription.subscription_id,
                    batch.batch_id,
                    end,
                    complete=end == len(items),
                    delivered=delivered,
                )
                crash_point("subscriptions.committed")
                outcome.delivered += delivered
    finally:
        target.close()
    if outcome.posts:
        outcome.state = "delivered"
    # A retry in this run may have recorded a failure that the delivery has since got past.
    recovered = subscription.failing_since is not None or subscription.next_attempt_at is not None or outcome.retries > 0
    if outcome.delivered or recovered:
        # Only a delivery that changed something writes the subscription row.
        state: dict = {"failing_since": None, "next_attempt_at": None}
        if outcome.delivered:
            state["last_delivered_at"] = datetime.now(timezone.utc)
        update_state(spark, settings, subscription.subscription_id, **state)


def _post_with_retries(
    spark: SparkSession,
    settings: Settings,
    subscription: Subscription,
    target: Target,
    semaphore: threading.BoundedSemaphore,
    secret: bytes | None,
    chunk: Sequence[DeliveryItem],
    deadline: float,
    outcome: Outcome,
    stop: threading.Event,
) -> Answer:
    """POST one chunk until it is acknowledged, refused for good, or the retry budget or pause time runs out."""
    config = settings.subscriptions
    body = _body(subscription, chunk)
    failing_since = subscription.failing_since
    attempt = 0
    while True:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Lakehouse-Subscription": subscription.name,
            "X-Lakehouse-Event-Count": str(len(chunk)),
            **signed_headers(secret, body, time.time()),
        }
        with semaphore:
            answer = target.post(body, headers)
        outcome.posts += 1
        if answer.verdict != "retry":
            return answer
        attempt += 1
        now = datetime.now(timezone.utc)
        failing_since = failing_since or now
        wait = answer.retry_after if answer.retry_after is not None else backoff_seconds(
            attempt, config.retry_initial_ms / 1000, config.retry_max_ms / 1000, jitter=0.5
        )
        outcome.error = answer.error
        if now - failing_since >= timedelta(seconds=config.pause_after_seconds):
            outcome.state = "paused"
            _record_failure(spark, settings, subscription, outcome, failing_since=failing_since, paused=True)
            return answer
        if time.monotonic() + wait > deadline or stop.is_set():
            outcome.state = "failing"
            _record_failure(
                spark,
                settings,
                subscription,
                outcome,
                failing_since=failing_since,
                next_attempt_at=now + timedelta(seconds=wait),
            )
            return answer
        if attempt == 1 and subscription.failing_since is None:
            # Shown by `status` from the first failure on, not only once the retry budget is spent.
            _record_failure(spark, settings, subscription, outcome, failing_since=failing_since)
        outcome.retries += 1
        if stop.wait(wait):
            outcome.state = "failing"
            _record_failure(
                spark, settings, subscription, outcome, failing_since=failing_since, next_attempt_at=now
            )  # fmt: skip
            return answer


def _body(subscription: Subscription, chunk: Sequence[DeliveryItem]) -> bytes:
    if subscription.format == "slack":
        return to_slack_body([i.text for i in chunk], [i.event_id for i in chunk], subscription.name)
    return to_batch_body(subscription.format, subscription.name, [i.text for i in chunk])


def _record_failure(
    spark: SparkSession,
    settings: Settings,
    subscription: Subscription,
    outcome: Outcome,
    *,
    failing_since: datetime | None = None,
    next_attempt_at: datetime | None = None,
    paused: bool = False,
) -> None:
    now = datetime.now(timezone.utc)
    update_state(
        spark,
        settings,
        subscription.subscription_id,
        paused=paused,
        failing_since=failing_since or subscription.failing_since or now,
        next_attempt_at=next_attempt_at,
        last_error=outcome.error,
        last_error_at=now,
    )
