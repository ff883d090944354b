"""Prometheus metrics of the pipeline: what the watcher's micro-batches land, quarantine, write and deliver.

The watcher keeps one `PipelineMetrics` (its own registry) when started with `--metrics-port`: counters
and histograms are fed once per micro-batch and per delivery round, and the gauges of what still waits
(files, Kafka messages) are read from the running watcher at scrape time. `HomeCollector` reads what any
process can see of a home (the watcher's state file, the last chain verification) and is served by
`lakehouse serve` too. Labels are bounded sets (stages, input kinds, ECE categories, reason fields,
subscription names, Kafka partitions): never an URN, a path or a batch id.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from conf.errors import ConfigError, error_text
from conf.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.batch.jobs import RunSummary
    from pipelines.batch.kafka.feed import KafkaFeed
    from pipelines.subscriptions.delivery import Outcome

# Micro-batches take from a fraction of a second (a few records) to minutes (a backlog after a restart).
STAGE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
LAG_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# A quarantine reason is "<field>: <what is wrong with the value>"; the label is the field, or `other`.
_REASON_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,47}$")
OTHER_REASON = "other"
log = logging.getLogger("lakehouse.metrics")


def reason_label(reason: str | None) -> str:
    """The bounded label of a quarantine reason: the field it names (`entityUrn`, `record`, ...), or `other`."""
    field = (reason or "").split(":", 1)[0].strip()
    return field if _REASON_FIELD.match(field) else OTHER_REASON


class PipelineMetrics:
    """The watcher's counters and histograms, registered in `registry`.

    Args:
        registry: where the metrics are registered (the watcher's own registry).
    """

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.micro_batches = Counter(
            "lakehouse_micro_batches_total", "Micro-batches that landed, refined or published something.",
            registry=registry,
        )  # fmt: skip
        self.micro_batch_seconds = Histogram(
            "lakehouse_micro_batch_seconds", "Wall time of a micro-batch, all stages.",
            buckets=STAGE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.stage_seconds = Histogram(
            "lakehouse_micro_batch_stage_seconds", "Wall time of one stage of a micro-batch.",
            ["stage"], buckets=STAGE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.publish_lag = Histogram(
            "lakehouse_publish_lag_seconds",
            "From the arrival of a micro-batch's oldest file or message to the end of its publish.",
            buckets=LAG_BUCKETS, registry=registry,
        )  # fmt: skip
        self.last_micro_batch = Gauge(
            "lakehouse_last_micro_batch_timestamp_seconds", "When the last micro-batch that did something ended.",
            registry=registry,
        )  # fmt: skip
        self.records_landed = Counter(
            "lakehouse_records_landed_total", "Records landed in bronze, by input kind.", ["kind"], registry=registry
        )
        self.records_quarantined = Counter(
            "lakehouse_records_quarantined_total",
            "Records written to bronze.quarantine, by the field their reason names.", ["reason"], registry=registry,
        )  # fmt: skip
        self.duplicates_skipped = Counter(
            "lakehouse_records_duplicate_total", "Valid records skipped as already landed.", registry=registry
        )
        self.files_quarantined = Counter(
            "lakehouse_files_quarantined_total", "Files moved aside whole: their kind cannot be detected.",
            registry=registry,
        )  # fmt: skip
        self.events_written = Counter(
            "lakehouse_events_written_total", "Entity Change Events written to silver, by category.", ["category"],
            registry=registry,
        )  # fmt: skip
        self.audit_rows = Counter(
            "lakehouse_audit_rows_written_total", "Rows published to gold.audit_events.", registry=registry
        )
        self.webhook_events = Counter(
            "lakehouse_webhook_events_total", "Webhook events by outcome (delivered, dead_lettered).",
            ["subscription", "outcome"], registry=registry,
        )  # fmt: skip
        self.webhook_posts = Counter(
            "lakehouse_webhook_posts_total", "Webhook POSTs sent (first tries and retries).", ["subscription"],
            registry=registry,
        )  # fmt: skip
        self.webhook_retries = Counter(
            "lakehouse_webhook_retries_total", "Webhook POSTs retried after a failure.", ["subscription"],
            registry=registry,
        )  # fmt: skip
        self.webhook_dead_letters = Counter(
            "lakehouse_webhook_dead_letters_total", "Webhook events dead-lettered (refused for good).",
            ["subscription"], registry=registry,
        )  # fmt: skip
        self.webhook_backlog = Gauge(
            "lakehouse_webhook_backlog_events", "Events selected and not delivered yet, after the last delivery round.",
            ["subscription"], registry=registry,
        )  # fmt: skip
        self.webhook_failing = Gauge(
            "lakehouse_webhook_failing", "1 while a subscription is failing or paused, after its last delivery round.",
            ["subscription"], registry=registry,
        )  # fmt: skip

    def observe_micro_batch(self, spark: SparkSession, settings: Settings, summary: RunSummary, record: Mapping[str, Any]) -> None:
        """Count what one micro-batch did: its stage times, records by kind and reason, events, lag.

        Args:
            spark: the watcher's session (reads the quarantine reasons, only when records were quarantined).
            settings: the lakehouse settings.
            summary: the micro-batch's run summary.
            record: its `micro_batch` log record (lag, quarantined files).
        """
        self.micro_batches.inc()
        self.micro_batch_seconds.observe(summary.seconds)
        self.last_micro_batch.set(record.get("finished_at") or time.time())
        if record.get("files") or record.get("kafka_messages"):
            self.publish_lag.observe(float(record.get("lag_seconds") or 0.0))
        for report in summary.stages:
            self.stage_seconds.labels(report.stage).observe(report.seconds)
        land = next((r for r in summary.stages if r.stage == "land"), None)
        if land is not None:
            for key, value in land.metrics.items():
                kind = key.removeprefix("land.records_landed.")
                if kind != key and value:
                    self.records_landed.labels(kind).inc(value)
            if land.metrics.get("land.duplicates_skipped"):
                self.duplicates_skipped.inc(land.metrics["land.duplicates_skipped"])
            if land.metrics.get("land.records_quarantined"):
                for reason, count in quarantine_reasons(spark, settings, land.batch_ids).items():
                    self.records_quarantined.labels(reason).inc(count)
        self.files_quarantined.inc(len(record.get("quarantined_files") or ()))
        for category, count in summary.events_by_category.items():
            self.events_written.labels(category).inc(count)
        self.audit_rows.inc(int(record.get("audit_rows") or 0))

    def observe_delivery(self, spark: SparkSession, settings: Settings, outcome: Outcome) -> None:
        """Count one delivery round of one subscription; after one that POSTed, read its backlog again."""
        name = outcome.name
        self.webhook_events.labels(name, "delivered").inc(outcome.delivered)
        self.webhook_events.labels(name, "dead_lettered").inc(outcome.dead_lettered)
        self.webhook_posts.labels(name).inc(outcome.posts)
        self.webhook_retries.labels(name).inc(outcome.retries)
        self.webhook_dead_letters.labels(name).inc(outcome.dead_lettered)
        self.webhook_failing.labels(name).set(1 if outcome.state in ("failing", "paused") else 0)
        if outcome.posts or outcome.state in ("failing", "paused"):
            from pipelines.subscriptions.status import subscription_status

            for row in subscription_status(spark, settings, [name]):
                self.webhook_backlog.labels(name).set(row["pending"])


def quarantine_reasons(spark: SparkSession, settings: Settings, batch_ids: Iterable[str]) -> dict[str, int]:
    """Records quarantined by `batch_ids`, by reason label (the field the reason names)."""
    from pyspark.sql import functions as F

    from pipelines.batch.landing.model import QUARANTINE_TABLE
    from pipelines.runtime.io import read_table

    batches = list(batch_ids)
    if not batches:
        return {}
    rows = (
        read_table(spark, settings, QUARANTINE_TABLE)
        .filter(F.col("batch_id").isin(batches))
        .groupBy("reason")
        .count()
        .collect()
    )
    counts: dict[str, int] = {}
    for row in rows:
        label = reason_label(row.reason)
        counts[label] = counts.get(label, 0) + int(row["count"])
    return counts


class WaitingCollector(Collector):
    """What a running watcher has not processed yet, read at scrape time: files, Kafka messages, lag.

    Args:
        pending: returns the waiting files and when each arrived (epoch seconds).
        kafka: returns the watcher's Kafka feed (None without Kafka).
    """

    def __init__(self, pending: Callable[[], Mapping[Any, float]], kafka: Callable[[], KafkaFeed | None]):
        self._pending = pending
        self._kafka = kafka

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        pending = dict(self._pending())
        feed = self._kafka()
        oldest = GaugeMetricFamily(
            "lakehouse_oldest_unprocessed_age_seconds",
            "Age of the oldest file or Kafka message the watcher holds and has not landed (0: none).",
            labels=["source"],
        )
        oldest.add_metric(["files"], round(now - min(pending.values()), 3) if pending else 0.0)
        first_at = feed.first_at if feed is not None else None
        oldest.add_metric(["kafka"], round(now - first_at, 3) if first_at else 0.0)
        yield oldest
        lag = GaugeMetricFamily(
            "lakehouse_freshness_lag_seconds",
            "How long the oldest unprocessed file or message has waited (0: the watcher has caught up).",
        )
        lag.add_metric([], max(sample.value for sample in oldest.samples))
        yield lag
        up = GaugeMetricFamily("lakehouse_watcher_up", "1 while a watcher runs on the home (its heartbeat is fresh).")
        up.add_metric([], 1)
        yield up
        waiting = GaugeMetricFamily("lakehouse_pending_files", "Complete files waiting for a micro-batch.")
        waiting.add_metric([], len(pending))
        yield waiting
        yield kafka_lag_family(feed)


def kafka_lag_family(feed: KafkaFeed | None) -> GaugeMetricFamily:
    """Messages on the broker not landed yet, per topic partition: high watermark - next offset + buffered.

    The high watermark is the client's cached one (updated with every fetch): no broker round trip.
    """
    family = GaugeMetricFamily(
        "lakehouse_kafka_lag_messages", "Messages of a topic partition not landed in bronze yet.",
        labels=["topic", "partition"],
    )  # fmt: skip
    consumer = feed.consumer if feed is not None else None
    if consumer is None:
        return family
    buffered: dict[Any, int] = {}
    for message in list(feed.buffer):
        buffered[message.topic_partition] = buffered.get(message.topic_partition, 0) + 1
    for tp, next_offset in dict(feed.next_offset).items():
        try:
            _low, high = consumer.get_watermark_offsets(tp.to_client(), cached=True)
        except Exception:  # noqa: BLE001 - a consumer closed meanwhile, or a partition not fetched yet
            continue
        if high is None or high < 0:
            continue
        family.add_metric([tp.topic, str(tp.partition)], max(high - next_offset, 0) + buffered.get(tp, 0))
    return family


class WatcherMetrics:
    """A watcher's metrics and their endpoint; without a port every method does nothing.

    A micro-batch is counted from one background thread, so the watch loop never waits for it (the
    quarantine reasons are a query). A failure to count is logged and never stops the watcher.

    Args:
        settings: the lakehouse settings (api.host is where the endpoint listens).
        port: the TCP port of the endpoint (None: no metrics).
        pending: returns the watcher's waiting files and when each arrived.
        kafka: returns the watcher's Kafka feed (None without Kafka).

    Raises:
        ConfigError: when the port is not a TCP port.
    """

    def __init__(
        self,
        settings: Settings,
        port: int | None,
        pending: Callable[[], Mapping[Any, float]],
        kafka: Callable[[], KafkaFeed | None],
    ):
        self.settings = settings
        self.port = port
        self.pipeline: PipelineMetrics | None = None
        self._stop: Callable[[], None] | None = None
        self._counting: ThreadPoolExecutor | None = None
        if port is None:
            return
        if not 0 < port < 65536:
            raise ConfigError(f"--metrics-port: {port!r} is not a TCP port (1..65535)")
        self.registry = CollectorRegistry(auto_describe=True)
        self.pipeline = PipelineMetrics(self.registry)
        self._counting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watch-metrics")
        self.registry.register(WaitingCollector(pending, kafka))
        self.registry.register(HomeCollector(settings, watcher_state=False))
        ProcessCollector(registry=self.registry)

    def start(self) -> None:
        """Start serving http://api.host:port/metrics."""
        if self.pipeline is not None and self._stop is None:
            self._stop = start_metrics_server(self.registry, self.settings.api.host, self.port)

    def stop(self) -> None:
        """Count what is queued, then stop the endpoint (before the watcher closes its session)."""
        if self._counting is not None:
            self._counting.shutdown(wait=True)
        if self._stop is not None:
            self._stop()
            self._stop = None

    def micro_batch(self, spark: SparkSession, summary: RunSummary, record: Mapping[str, Any]) -> None:
        """Count a micro-batch (PipelineMetrics.observe_micro_batch)."""
        if self.pipeline is not None and self._counting is not None:
            self._counting.submit(self._guarded, self.pipeline.observe_micro_batch, spark, self.settings, summary, record)

    def delivery(self, spark: SparkSession, outcome: Outcome) -> None:
        """Count a delivery round (PipelineMetrics.observe_delivery)."""
        if self.pipeline is not None:
            self._guarded(self.pipeline.observe_delivery, spark, self.settings, outcome)

    @staticmethod
    def _guarded(count: Callable[..., None], *args: Any) -> None:
        try:
            count(*args)
        except Exception as exc:  # noqa: BLE001 - metrics are best effort: the pipeline goes on
            log.warning("metrics not updated: %s", error_text(exc))


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
        from pipelines.batch.watch_status import watch_status

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

    from pipelines.batch.audit_chain import CHAIN_TABLE
    from pipelines.runtime.io import read_table

    newest = read_table(spark, settings, CHAIN_TABLE).agg(F.max("recorded_at_ms").alias("at")).collect()[0].at
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
    if not 0 < port < 65536:
        raise ConfigError(f"--metrics-port: {port!r} is not a TCP port (1..65535)")
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"--metrics-port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
