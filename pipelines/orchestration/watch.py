"""Watch mode: land -> refine -> publish micro-batches as complete files arrive in the landing folders.

One watcher per home (the watcher lock, held for its lifetime); each micro-batch takes the run lock like
any `lakehouse run`, so a manual run and the watcher never overlap. A micro-batch is `run_job` on the
watcher's one session: killed at any point, the next start resumes it through the landing ledger and
the stage progress, exactly as for a killed `lakehouse run`. Over 400 lines on purpose: the loop is one
class (`Watcher`) whose state each step reads; what it takes, its process and compaction live beside it
(`watch_files`, `watch_process`, `watch_compaction`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

from conf.errors import ConcurrencyError, ConfigError, InputError, SourceUnavailable, error_text
from conf.locations import Location, ObjectLocation
from conf.settings import Settings
from pipelines.orchestration.jobs import (
    JOB_STAGES,
    OPENMETADATA_ALONGSIDE,
    OPENMETADATA_LATER,
    RunSummary,
    run_job,
)
from pipelines.batch.kafka.feed import KafkaFeed
from pipelines.batch.publish_openmetadata import STAGE as OPENMETADATA_STAGE
from pipelines.orchestration.watch_compaction import Compaction
from pipelines.orchestration.watch_files import is_complete_file, undetectable_files
from pipelines.orchestration.watch_process import (
    BackgroundTracking, StopSignal, WatchSession, emit, retry_transient,
)  # fmt: skip
from pipelines.runtime.watch_status import touch_lock, watcher_lock, write_state
from pipelines.orchestration.metrics import WatcherMetrics
from pipelines.runtime.home import home_of
from pipelines.runtime.lease import Lease
from pipelines.subscriptions.background import BackgroundDelivery

# How long a micro-batch waits for a manual run holding the run lock before trying again.
_LOCK_WAIT_SECONDS = 5.0
# On stop, a delivery in progress may finish its POST; past this it is left (its cursor resumes it).
_DELIVERY_STOP_SECONDS = 10.0
# With a Kafka source, how often the loop moves fetched messages into the buffer.
_KAFKA_POLL_SECONDS = 0.2


class Watcher:
    """The watch loop of one home: pending files, micro-batch triggers, state file, anomaly scoring."""

    def __init__(self, settings: Settings, stop: StopSignal, metrics_port: int | None = None):
        self.settings = settings
        self.cfg = settings.watch
        self.stop = stop
        self.roots = tuple(p.resolve() if isinstance(p, Path) else p for p in settings.landing_paths)
        self.storage = home_of(settings).storage
        self.pending: dict[Location, float] = {}
        # (file, when it was seen): a file that arrives while a micro-batch runs keeps its own arrival time.
        self.arrivals: queue.Queue[tuple[Location, float]] = queue.Queue()
        self.lease: Lease | None = None
        self.started_at = time.time()
        self.batches = 0
        self.last_batch: dict[str, Any] | None = None
        self.last_scored: float | None = None  # scores once at start, then every score_interval_minutes
        # A micro-batch publishes the ChangeEvents of the batches refined before it (run_job's
        # OPENMETADATA_ALONGSIDE), at most every openmetadata_every_seconds: after one that refined
        # batches, theirs wait for a later run.
        self.openmetadata_behind = False
        self.openmetadata_started = -math.inf  # time.monotonic() of the last micro-batch that published them
        self.last_run_ended = time.monotonic()
        self.delivery: BackgroundDelivery | None = None
        self.kafka = KafkaFeed(settings, emit) if settings.ingest.kafka.enabled else None
        self.tracking = BackgroundTracking(settings) if settings.mlflow.enabled else None
        self.compaction = Compaction(settings, self.cfg.compact_every_batches, emit, self.cfg.compact_files_below_mb)
        # Tracking runs in the background (see BackgroundTracking): a micro-batch does not wait for MLflow.
        self.job_settings = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False))
        self.metrics = WatcherMetrics(settings, metrics_port, lambda: self.pending, lambda: self.kafka)

    def run(self) -> int:
        """Watch until stopped; return the exit code (0)."""
        for root in self.roots:
            if isinstance(root, Path):
                root.mkdir(parents=True, exist_ok=True)
        with watcher_lock(self.settings) as self.lease:
            self.metrics.start()
            notifier = threading.Thread(target=self._notify, name="watch-notify", daemon=True)
            notifier.start()
            session = WatchSession(self.settings)
            self.delivery = BackgroundDelivery(self.job_settings, lambda: session.spark, emit, observe=self.metrics.delivery)
            try:
                emit({"event": "started", "pid": os.getpid(), "landing": [str(r) for r in self.roots],
                      "polling": self.cfg.polling})
                self._scan(session)
                # A start resumes whatever an earlier (killed) watcher or run left between stages.
                self._micro_batch(session, [], openmetadata_now=True)
                self._loop(session)
                if self.openmetadata_behind:
                    # The last micro-batches' ChangeEvents, before exiting: a few seconds at most.
                    self._micro_batch(session, [], openmetadata_now=True)
            finally:
                self.delivery.close(timeout=_DELIVERY_STOP_SECONDS)
                self.metrics.stop()
                if self.kafka:
                    self.kafka.close()
                session.close()
                if self.tracking:
                    self.tracking.close()
                self._write_state()
        emit({"event": "stopped", "batches": self.batches})
        return 0

    def _loop(self, session: WatchSession) -> None:
        heartbeat = time.monotonic()
        while not self.stop.event.is_set():
            self._drain(timeout=self._wait_seconds())
            if self.stop.event.is_set():
                break
            if self.kafka:
                self.kafka.poll(session.spark)
            kafka_due = self.kafka is not None and self.kafka.due(self.cfg.max_wait_seconds)
            due = self._due() or kafka_due
            if due:
                self._micro_batch(session, self._take_batch() if self._due() else [], openmetadata_now=False)
            elif self._openmetadata_due():
                self._micro_batch(session, [], openmetadata_now=True)
            if due or not self.pending:
                # One table per turn: right after a micro-batch, or while no file waits.
                self.compaction.compact_next(session.spark)
            if time.monotonic() - heartbeat >= self.cfg.heartbeat_seconds:
                heartbeat = time.monotonic()
                touch_lock(self.lease)
                self._write_state()
            self._score_if_due(session)

    def _notify(self) -> None:
        if any(isinstance(root, ObjectLocation) for root in self.roots):
            self._poll_objects()
            return
        import watchfiles

        for changes in watchfiles.watch(
            *self.roots,
            stop_event=self.stop.event,
            force_polling=self.cfg.polling,
            poll_delay_ms=int(self.cfg.poll_interval_seconds * 1000),
            debounce=200,
            step=50,
            raise_interrupt=False,
        ):
            for change, name in changes:
                path = Path(name)
                if change != watchfiles.Change.deleted and is_complete_file(path, self.roots):
                    self.arrivals.put((path, time.time()))

    def _poll_objects(self) -> None:
        """Queue the objects that appear (or change) under the landing prefixes: object storage sends
        no file events, so its listings are compared every `watch.poll_interval_seconds`."""
        seen: dict[Location, str] = {}
        first = True
        while True:
            for root in self.roots:
                for stored in self.storage.list_files(root):
                    if seen.get(stored.location) != stored.version:
                        seen[stored.location] = stored.version
                        # What was there at start is the start scan's (`_scan`); later objects are new.
                        if not first and is_complete_file(stored.location, self.roots):
                            self.arrivals.put((stored.location, time.time()))
            first = False
            if self.stop.event.wait(self.cfg.poll_interval_seconds):
                return

    def _scan(self, session: WatchSession) -> None:
        """Queue the complete files of the landing folders that the ledger does not hold yet."""
        from pipelines.batch.landing.discovery import list_input_files
        from pipelines.batch.landing.model import LEDGER_TABLE
        from pipelines.runtime.io import read_table

        landed = {
            r.source_file
            for r in read_table(session.spark, self.settings, LEDGER_TABLE).select("source_file").distinct().collect()
        }
        # A landing prefix on object storage holds no objects yet until the first arrives.
        roots = [root for root in self.roots if isinstance(root, Path) or self.storage.exists(root)]
        for path, _ in list_input_files(roots) if roots else []:
            if str(path) not in landed and is_complete_file(path, self.roots):
                self.pending.setdefault(path, self._arrived_at(path))

    def _drain(self, timeout: float) -> None:
        try:
            path, seen_at = self.arrivals.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            return
        while True:
            if self.storage.stat(path) is not None:
                self.pending.setdefault(path, seen_at)
            try:
                path, seen_at = self.arrivals.get_nowait()
            except queue.Empty:
                return

    def _arrived_at(self, path: Location) -> float:
        stored = self.storage.stat(path)
        return stored.modified if stored else time.time()

    def _size(self, path: Location) -> int:
        stored = self.storage.stat(path)
        return stored.size if stored else 0

    def _openmetadata_due(self) -> bool:
        """Whether to publish the last micro-batch's ChangeEvents now: no file came for max_wait_seconds."""
        return (
            self.openmetadata_behind
            and not self.pending
            and time.monotonic() - self.last_run_ended >= self.cfg.max_wait_seconds
        )

    def _wait_seconds(self) -> float:
        if self.kafka:
            # The Kafka client fetches in the background; the loop moves its messages over this often.
            return min(_KAFKA_POLL_SECONDS, self._files_wait_seconds())
        return self._files_wait_seconds()

    def _files_wait_seconds(self) -> float:
        if not self.pending:
            # While nothing waits, queued compactions go on one table per turn.
            if self.compaction.queue:
                return 0.0
            if self.openmetadata_behind:
                due_in = self.last_run_ended + self.cfg.max_wait_seconds - time.monotonic()
                return min(self.cfg.heartbeat_seconds, due_in)
            return self.cfg.heartbeat_seconds
        oldest = min(self.pending.values())
        return min(self.cfg.heartbeat_seconds, oldest + self.cfg.max_wait_seconds - time.time())

    def _due(self) -> bool:
        if not self.pending:
            return False
        if len(self.pending) >= self.cfg.max_files or self._pending_bytes() >= self.cfg.max_bytes:
            return True
        return time.time() - min(self.pending.values()) >= self.cfg.max_wait_seconds

    def _pending_bytes(self) -> int:
        return sum(self._size(p) for p in self.pending)

    def _take_batch(self) -> list[Location]:
        taken, size = [], 0
        for path, _ in sorted(self.pending.items(), key=lambda item: item[1]):
            if taken and (len(taken) >= self.cfg.max_files or size + self._size(path) > self.cfg.max_bytes):
                break
            taken.append(path)
            size += self._size(path)
        return taken

    def _micro_batch(self, session: WatchSession, files: list[Location], openmetadata_now: bool) -> None:
        """Run one micro-batch of `files` (and the Kafka feed's messages).

        The ChangeEvents of the batches refined before it are published beside it when
        `openmetadata_now` is set, or when some wait and the last such publish began
        openmetadata_every_seconds ago or more.
        """
        arrived = {p: self.pending.get(p, time.time()) for p in files}
        started = time.monotonic()
        publish_openmetadata = openmetadata_now or (
            self.openmetadata_behind and started - self.openmetadata_started >= self.cfg.openmetadata_every_seconds
        )
        files = [p for p in files if self.storage.stat(p) is not None]
        messages, messages_at = self.kafka.take() if self.kafka else ([], None)
        quarantined: list[str] = []

        def attempt() -> RunSummary:
            stages = JOB_STAGES if files or messages else JOB_STAGES[1:]
            while True:
                try:
                    return run_job(
                        self.job_settings, stages, paths=files, spark=session.spark,
                        wait_seconds=_LOCK_WAIT_SECONDS, deliver=False, kafka_messages=messages,
                        openmetadata=OPENMETADATA_ALONGSIDE if publish_openmetadata else OPENMETADATA_LATER,
                    )
                except InputError:
                    bad = undetectable_files(files)
                    if not bad:
                        raise
                    for path in bad:
                        quarantined.append(str(self._quarantine(path)))
                        files.remove(path)
                    stages = JOB_STAGES if files or messages else JOB_STAGES[1:]

        def on_retry(number: int, exc: BaseException) -> None:
            emit({"event": "retry", "attempt": number, "error": error_text(exc)})
            session.reopen()

        try:
            summary = retry_transient(attempt, self.cfg.retry_attempts, self.cfg.retry_backoff_seconds, on_retry)
        except (ConcurrencyError, SourceUnavailable) as exc:
            # A run holds the lock, or a source does not answer: the same files and messages next time.
            held = self.kafka.back_off() if self.kafka and isinstance(exc, SourceUnavailable) else {}
            emit({"event": "waiting", "reason": str(exc), **held})
            return
        finally:
            if self.kafka and session.spark is not None:
                # What was taken and not landed (the lock was held, an error) is consumed again.
                self.kafka.settle(session.spark, messages)
        self.last_run_ended = time.monotonic()
        refined = any(r.batch_ids for r in summary.stages if r.stage == "refine")
        if publish_openmetadata:
            self.openmetadata_started = started
        self.openmetadata_behind = refined or (self.openmetadata_behind and not publish_openmetadata)
        for path in arrived:
            self.pending.pop(path, None)
        record = _batch_record(summary, arrived, len(files), quarantined)
        record["kafka_messages"] = len(messages)
        if messages_at is not None:
            record["lag_seconds"] = max(record["lag_seconds"], round(record["finished_at"] - messages_at, 3))
        if arrived or messages or any(r.batch_ids or r.rows_in for r in summary.stages):
            self.batches += 1
            self.last_batch = record
            emit({"event": "micro_batch", **self.last_batch})
            self.metrics.micro_batch(session.spark, summary, record)
            if self.delivery and (record["batch_ids"] or record["openmetadata_batch_ids"]):
                self.delivery.poke()
            if self.tracking:
                self.tracking.submit(summary)
            self.compaction.batch_done()
        self._write_state()

    def _quarantine(self, path: Location) -> Location:
        folder = self.settings.home / "quarantine" / "watch"
        target = folder / f"{time.strftime('%Y%m%dT%H%M%S')}-{path.name}"
        if isinstance(path, Path) and isinstance(target, Path):
            folder.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), target)
        else:
            # Object storage has no move: a copy, then the original removed.
            self.storage.write_bytes(target, self.storage.read_bytes(path))
            self.storage.delete(path)
        emit({"event": "quarantined", "file": str(path), "moved_to": str(target),
              "reason": "its kind cannot be detected (no MCL, MCP or usage record, not a JSON array)"})
        return target

    def _score_if_due(self, session: WatchSession) -> None:
        interval = self.settings.anomalies.score_interval_minutes * 60
        if self.last_scored is not None and time.monotonic() - self.last_scored < interval:
            return
        self.last_scored = time.monotonic()
        from pipelines.batch.anomalies import score_window

        try:
            result = score_window(session.spark, self.settings)
        except ConfigError as exc:
            # No registered model (yet): one line per interval, and the loop goes on.
            emit({"event": "anomaly_scoring_skipped", "reason": " ".join(str(exc).split())[:1000]})
            return
        emit({"event": "anomalies_scored", **_plain(result)})

    def _write_state(self) -> None:
        oldest = min(self.pending.items(), key=lambda item: item[1]) if self.pending else None
        write_state(
            self.settings,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at": self.started_at,
                "heartbeat_at": time.time(),
                "batches": self.batches,
                "last_batch": self.last_batch,
                "pending_files": len(self.pending),
                "oldest_unprocessed": {"path": str(oldest[0]), "arrived_at": oldest[1]} if oldest else None,
            },
        )


def _batch_record(
    summary: RunSummary, arrived: dict[Location, float], landed_files: int, quarantined: list[str]
) -> dict[str, Any]:
    stages = {r.stage: r for r in summary.stages}
    land = stages.get("land")
    now = time.time()
    return {
        "run_id": summary.run_id,
        "finished_at": now,
        "files": landed_files,
        "file_names": sorted(p.name for p in arrived),
        "quarantined_files": quarantined,
        "records": land.rows_out if land else 0,
        "records_quarantined": int(land.metrics.get("land.records_quarantined", 0)) if land else 0,
        "events": sum(summary.events_by_category.values()),
        "audit_rows": int(stages["publish"].metrics.get("publish_audit.rows_out", 0)) if "publish" in stages else 0,
        "seconds": {r.stage: r.seconds for r in summary.stages},
        "total_seconds": summary.seconds,
        "lag_seconds": round(now - min(arrived.values()), 3) if arrived else 0.0,
        "batch_ids": sorted({b for r in summary.stages if r.stage != OPENMETADATA_STAGE for b in r.batch_ids}),
        # The batches of earlier micro-batches whose ChangeEvents this one published (run_job's OPENMETADATA_ALONGSIDE).
        "openmetadata_batch_ids": sorted(stages[OPENMETADATA_STAGE].batch_ids if OPENMETADATA_STAGE in stages else ()),
    }


def _plain(result: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(result):
        return {k: v for k, v in dataclasses.asdict(result).items() if isinstance(v, (int, float, str, type(None)))}
    return {"result": str(result)}


def watch(settings: Settings, metrics_port: int | None = None) -> int:
    """Run the watcher of a home until SIGTERM/SIGINT.

    Args:
        settings: the lakehouse settings (landing folders, the watch section).
        metrics_port: serve Prometheus metrics on api.host at this port (default watch.metrics_port; None: none).

    Returns:
        The exit code: 0 after a signal.

    Raises:
        ConcurrencyError: when another watcher runs on the home.
    """
    stop = StopSignal()
    stop.install()
    return Watcher(settings, stop, settings.watch.metrics_port if metrics_port is None else metrics_port).run()
