"""Delivery beside a long-running pipeline: each subscription delivered on its own, after every publish."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import SparkSession

from conf.errors import InputError, error_text
from conf.settings import Settings
from pipelines.subscriptions.delivery import HostLimits, Outcome, deliver_outcomes
from pipelines.subscriptions.store import list_subscriptions

# Without a new publish, pending deliveries (receivers that were failing) are looked at this often.
IDLE_RETRY_SECONDS = 5.0


class BackgroundDelivery:
    """Deliver pending events from worker threads, so no receiver holds up a micro-batch or another receiver.

    `poke()` after a publish starts a delivery of every subscription at once. A subscription still being
    delivered (a slow or failing receiver) is not waited for: it is delivered again as soon as its
    current delivery ends. Between pokes every subscription is looked at every IDLE_RETRY_SECONDS, so a
    failing one is retried when its backoff ends.

    Args:
        settings: the lakehouse settings.
        session: returns the current engine session (the watcher reopens it after engine failures).
        emit: writes one structured log record.
        idle_retry_seconds: how often subscriptions are looked at without a poke.
        observe: called with the session and each delivery round's outcome (the watcher's metrics).
    """

    def __init__(
        self,
        settings: Settings,
        session: Callable[[], SparkSession | None],
        emit: Callable[[dict[str, Any]], None],
        idle_retry_seconds: float = IDLE_RETRY_SECONDS,
        observe: Callable[[SparkSession, Outcome], None] | None = None,
    ):
        self.settings = settings
        self._session = session
        self._emit = emit
        self._idle_retry_seconds = idle_retry_seconds
        self._observe = observe
        self._limits = HostLimits(settings.subscriptions.max_concurrent_per_host)
        self._pool = ThreadPoolExecutor(settings.subscriptions.max_concurrent, thread_name_prefix="deliver")
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._dispatch_loop, name="deliver-dispatch", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask for a delivery now (a publish has just committed)."""
        self._wake.set()

    def close(self, timeout: float) -> None:
        """Stop; wait at most `timeout` seconds for deliveries in progress (their cursors make them resumable)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._running and time.monotonic() < deadline:
                self._idle.wait(max(0.0, deadline - time.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _dispatch_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._idle_retry_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            spark = self._session()
            if spark is None:
                continue
            try:
                names = [s.name for s in list_subscriptions(spark, self.settings) if not s.paused]
            except Exception as exc:  # an engine failure: the next poke or tick tries again
                self._emit({"event": "delivery_failed", "error": error_text(exc)})
                continue
            for name in names:
                self._dispatch(name)

    def _dispatch(self, name: str) -> None:
        with self._lock:
            if name in self._running:
                self._again.add(name)
                return
            self._running.add(name)
        self._pool.submit(self._deliver, name)

    def _deliver(self, name: str) -> None:
        while True:
            if not self._stop.is_set():
                self._deliver_once(name)
            with self._idle:
                if name in self._again and not self._stop.is_set():
                    self._again.discard(name)
                    continue
                self._running.discard(name)
                self._idle.notify_all()
                return

    def _deliver_once(self, name: str) -> None:
        spark = self._session()
        if spark is None:
            return
        started = time.monotonic()
        try:
            (outcome,) = deliver_outcomes(
                spark, self.settings, names=[name], host_limits=self._limits, stop=self._stop
            )
        except InputError:
            return  # removed since it was listed
        except Exception as exc:  # an engine failure mid-delivery: the cursor holds, the next round resumes
            self._emit({"event": "delivery_failed", "subscription": name, "error": error_text(exc)})
            return
        if self._observe is not None:
            self._observe(spark, outcome)
        if outcome.posts:
            self._emit({
                "event": "delivered",
                "subscription": name,
                "state": outcome.state,
                "delivered": outcome.delivered,
                "posts": outcome.posts,
                "retries": outcome.retries,
                "dead_lettered": outcome.dead_lettered,
                "seconds": round(time.monotonic() - started, 3),
                **({"error": outcome.error} if outcome.error else {}),
            })  # fmt: skip
