"""Prometheus metrics any process can read of a home: the watcher's state file, the run in progress, the
last chain verification, and the endpoint that serves a registry.

`HomeCollector` is served by `lakehouse serve` and by the watcher (whose own counters are
`pipelines.orchestration.metrics`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from conf.errors import ConfigError
from conf.settings import Settings
from conf.tables import AUDIT_CHAIN
from conf.values import check_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class HomeCollector(Collector):
    """What any process can read of a home at scrape time: the watcher's state file and the last verification.

    Served by `lakehouse serve` (beside a watcher it shows the watcher's freshness) and by the watcher.

    Args:
        settings: the lakehouse settings (home).
        watcher_state: include the watcher's state (serve); the watcher reports its own live state instead.
    """

    def __init__(self, settings: Settings, watcher_state: bool = True):
        self.settings = settings
        self.watcher_state = watcher_state

    def collect(self) -> Iterator[Metric]:
        if self.watcher_state:
            yield from self._watcher()
        yield from verification_families(read_verification(self.settings))
        yield from run_step_families(self.settings)

    def _watcher(self) -> Iterator[Metric]:
        from pipelines.runtime.watch_status import watch_status

        status = watch_status(self.settings)
        up = GaugeMetricFamily("lakehouse_watcher_up", "1 while a watcher runs on the home (its heartbeat is fresh).")
        up.add_metric([], 1 if status["running"] else 0)
        yield up
        if status["freshness_lag_seconds"] is not None:
            lag = GaugeMetricFamily(
                "lakehouse_freshness_lag_seconds",
                "How long the oldest unprocessed file has waited (0: the watcher has caught up).",
            )
            lag.add_metric([], status["freshness_lag_seconds"])
            yield lag
        pending = GaugeMetricFamily("lakehouse_pending_files", "Complete files waiting for a micro-batch.")
        pending.add_metric([], status["pending_files"] or 0)
        yield pending
        last = status.get("last_batch") or {}
        if last.get("finished_at"):
            finished = GaugeMetricFamily(
                "lakehouse_last_micro_batch_timestamp_seconds", "When the last micro-batch that did something ended."
            )
            finished.add_metric([], float(last["finished_at"]))
            yield finished


def run_step_families(settings: Settings) -> Iterator[Metric]:
    """The run in progress on the home (its run lock's lease): how long it, its stage and its step have run.

    The families are declared without a run too (no samples), so rules that name them always find them.
    """
    from pipelines.runtime.lock import run_in_progress

    run = run_in_progress(settings)
    running = GaugeMetricFamily("lakehouse_run_running", "1 while a pipeline run holds the home's run lock.")
    running.add_metric([], 0 if run is None else 1)
    seconds = GaugeMetricFamily("lakehouse_run_seconds", "How long the run in progress has run.")
    # A step's time that keeps growing is a query that does not come back.
    step = GaugeMetricFamily(
        "lakehouse_run_step_seconds", "How long the run's current step has run (step '-': the stage as a whole).",
        labels=["stage", "step"],
    )  # fmt: skip
    if run is not None and run["seconds"] is not None:
        seconds.add_metric([], run["seconds"])
        if run["stage"] is not None:
            in_step = run["step"] is not None
            step.add_metric([run["stage"], run["step"] if in_step else "-"], run["step_seconds"] if in_step else run["stage_seconds"])
    yield from (running, seconds, step)


def verification_path(settings: Settings) -> Path:
    """Where the last `lakehouse verify` of a home records its outcome."""
    return settings.local_home / "_status" / "verify.json"


def record_verification(settings: Settings, ok: bool, links: int, last_batch_at_ms: int | None) -> None:
    """Record a verification's outcome for the metrics (replaced atomically).

    Args:
        settings: the lakehouse settings (home).
        ok: whether every link and linked batch verified.
        links: the chain's length.
        last_batch_at_ms: when the newest linked batch was linked (epoch ms), None for an empty chain.
    """
    path = verification_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    scratch.write_text(json.dumps({"ok": ok, "verified_at": time.time(), "links": links,
                                   "last_batch_at_ms": last_batch_at_ms}))  # fmt: skip
    os.replace(scratch, path)


def last_linked_at_ms(spark: SparkSession, settings: Settings) -> int | None:
    """When the newest batch of the audit chain was linked (epoch ms), None for an empty chain."""
    from pyspark.sql import functions as F

    from pipelines.runtime.io import read_table

    newest = read_table(spark, settings, AUDIT_CHAIN).agg(F.max("recorded_at_ms").alias("at")).collect()[0].at
    return None if newest is None else int(newest)


def read_verification(settings: Settings) -> dict[str, Any]:
    """The last recorded verification ({} when none ran or the file is unreadable)."""
    try:
        return json.loads(verification_path(settings).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def verification_families(verification: Mapping[str, Any]) -> Iterator[Metric]:
    """The chain verification gauges (nothing before the first verification)."""
    if not verification:
        return
    ok = GaugeMetricFamily("lakehouse_chain_verify_ok", "1 when the last `lakehouse verify` found the chain intact.")
    ok.add_metric([], 1 if verification.get("ok") else 0)
    yield ok
    at = GaugeMetricFamily("lakehouse_chain_verify_timestamp_seconds", "When the last `lakehouse verify` ran.")
    at.add_metric([], float(verification.get("verified_at") or 0))
    yield at
    links = GaugeMetricFamily("lakehouse_chain_links", "Links in the chain at the last verification.")
    links.add_metric([], float(verification.get("links") or 0))
    yield links
    if verification.get("last_batch_at_ms"):
        batch = GaugeMetricFamily(
            "lakehouse_chain_last_verified_batch_timestamp_seconds",
            "When the newest batch the last verification checked was linked into the chain.",
        )
        batch.add_metric([], verification["last_batch_at_ms"] / 1000)
        yield batch


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> Callable[[], None]:
    """Serve `registry` in the Prometheus text format on http://host:port/metrics from a daemon thread.

    Returns:
        A function that stops the server.

    Raises:
        ConfigError: when the port is not a TCP port or cannot be bound.
    """
    check_port("--metrics-port", port)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"--metrics-port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
