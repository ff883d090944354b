"""Prometheus metrics of the watcher: what its micro-batches land, quarantine, write and deliver.

The watcher keeps one `PipelineMetrics` (its own registry) when started with `--metrics-port`: counters
and histograms are fed once per micro-batch and per delivery round, and the gauges of what still waits
(files, Kafka messages) are read from the running watcher at scrape time. Labels are bounded sets
(stages, input kinds, ECE categories, reason fields, subscription names, Kafka partitions): never an
URN, a path or a batch id.
"""

from __future__ import annotations

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from conf.errors import error_text
from conf.settings import Settings
from conf.tables import QUARANTINE
from conf.values import check_port
from pipelines.runtime.metrics import HomeCollector, start_metrics_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.batch.kafka.feed import KafkaFeed
    from pipelines.orchestration.jobs import RunSummary
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

    from pipelines.runtime.io import read_table

    batches = list(batch_ids)
    if not batches:
        return {}
    rows = (
        read_table(spark, settings, QUARANTINE)
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
        check_port("--metrics-port", port)
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
