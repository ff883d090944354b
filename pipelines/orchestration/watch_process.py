"""The watcher's process: its stop signal, retries of engine failures, its engine session, its log lines and
the background recording of its micro-batches.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from conf.errors import LakehouseError, StageError
from conf.settings import Settings
from pipelines.orchestration.jobs import RunSummary, run_metrics
from pipelines.runtime.backoff import backoff_seconds as retry_backoff
from pipelines.runtime.engine import open_session
from pipelines.runtime.logs import structured_line

log = logging.getLogger("lakehouse.watch")

# After SIGTERM/SIGINT the current micro-batch may finish; past this it is abandoned (it resumes on restart).
STOP_GRACE_SECONDS = 25.0

T = TypeVar("T")


def retry_transient(
    action: Callable[[], T], attempts: int, backoff_seconds: float, on_retry: Callable[[int, BaseException], None]
) -> T:
    """Run `action`, retrying an engine failure up to `attempts` times with doubling backoff.

    Project errors (LakehouseError: bad input, configuration, a held lock) are not transient and are
    raised at once; anything else (a Spark or connection error, or a StageError caused by one) is retried.

    Raises:
        LakehouseError: as raised by `action`.
        Exception: the engine error of the last attempt.
    """
    for attempt in range(attempts + 1):
        try:
            return action()
        except Exception as exc:  # the engine's own errors (pyspark, grpc) are not one family
            # A stage that failed on an engine error (StageError) is as transient as its cause.
            if isinstance(exc, LakehouseError) and not isinstance(exc, StageError):
                raise
            if attempt == attempts:
                raise
            on_retry(attempt + 1, exc)
            time.sleep(retry_backoff(attempt + 1, backoff_seconds))
    raise AssertionError("unreachable")


class StopSignal:
    """Set by SIGTERM/SIGINT: the loop finishes its micro-batch, then exits; a stuck one is abandoned."""

    def __init__(self, grace_seconds: float = STOP_GRACE_SECONDS):
        self.event = threading.Event()
        self.grace_seconds = grace_seconds

    def install(self) -> None:
        """Handle SIGTERM and SIGINT in this (main) thread."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.event.is_set():
            return
        self.event.set()
        emit({"event": "stopping", "signal": signal.Signals(signum).name})
        timer = threading.Timer(self.grace_seconds, _abandon)
        timer.daemon = True
        timer.start()


def _abandon() -> None:
    # Every write of a micro-batch is resumable (ledger, stage progress): leaving now loses nothing.
    emit({"event": "abandoned", "reason": f"micro-batch still running {STOP_GRACE_SECONDS} s after the signal"})
    os._exit(0)


def emit(record: dict[str, Any]) -> None:
    """Write one structured log line (JSON) to stdout."""
    sys.stdout.write(structured_line(record, log.name) + "\n")
    sys.stdout.flush()


class WatchSession:
    """The watcher's one engine session, reopened after an engine failure."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._stack: contextlib.ExitStack | None = None
        self.spark = None
        self.reopen()

    def reopen(self) -> None:
        self.close()
        self._stack = contextlib.ExitStack()
        self.spark = self._stack.enter_context(open_session(self.settings))

    def close(self) -> None:
        if self._stack is not None:
            with contextlib.suppress(Exception):
                self._stack.close()
            self._stack, self.spark = None, None


class BackgroundTracking:
    """Records each micro-batch as an MLflow run from one background thread, so batches never wait for it."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.summaries: queue.Queue[RunSummary | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="watch-tracking", daemon=True)
        self.thread.start()

    def submit(self, summary: RunSummary) -> None:
        self.summaries.put(summary)

    def close(self, timeout: float = 10.0) -> None:
        self.summaries.put(None)
        self.thread.join(timeout)

    def _work(self) -> None:
        from pipelines.runtime.tracking import tracked_run

        while (summary := self.summaries.get()) is not None:
            try:
                with tracked_run(self.settings, "watch-batch", tags={"lakehouse.run_id": summary.run_id}) as tracker:
                    tracker.log_params({"profile": self.settings.profile, "run_id": summary.run_id})
                    tracker.log_metrics(run_metrics(summary))
                    tracker.summary["run"] = summary.as_dict()
            except Exception as exc:  # tracking is optional: a failing store must not stop the watcher
                emit({"event": "tracking_failed", "run_id": summary.run_id, "error": str(exc)[:500]})
