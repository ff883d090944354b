"""Watch mode's Kafka feed: one consumer for the watcher's lifetime, buffering messages between micro-batches."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from conf.settings import Settings
from pipelines.batch.kafka.client import CONSUME_BATCH, Message, TopicPartition, open_consumer, topic_partitions
from pipelines.batch.kafka.offsets import committed_offsets, start_offsets
from pipelines.batch.kafka.source import commit_hint

# How often the topics are looked up again (a partition added to a topic is consumed from its start).
_METADATA_REFRESH_SECONDS = 30.0
_EMPTY_REFRESH_SECONDS = 5.0
# After an unreachable broker, the next attempt waits this long, doubling up to the maximum.
_RETRY_FIRST_SECONDS = 1.0
_RETRY_MAX_SECONDS = 60.0
_REPORT_EVERY_SECONDS = 30.0
# A buffer that received nothing for this long is landed without waiting for watch.max_wait_seconds.
QUIET_SECONDS = 0.5


class KafkaFeed:
    """Consumes the configured topics into a bounded buffer that each micro-batch takes.

    Offsets come from bronze: at the start, after the broker comes back, and whenever a micro-batch did
    not land what it took (the partitions are sought back to what bronze committed), so a message is
    landed once whatever fails in between.

    Args:
        settings: the lakehouse settings (ingest.kafka configured).
        emit: writes one structured log record (watch mode's event log).
    """

    def __init__(self, settings: Settings, emit: Callable[[dict[str, Any]], None]):
        self.settings = settings
        self.kafka = settings.ingest.kafka
        self.emit = emit
        self.consumer = None
        self.buffer: list[Message] = []
        self.buffer_bytes = 0
        self.first_at: float | None = None  # when the oldest buffered message was consumed
        self.last_at: float | None = None  # when the newest was
        self.next_offset: dict[TopicPartition, int] = {}
        self.start_offset: dict[TopicPartition, int] = {}  # where each partition was first read from
        self._refresh_at = 0.0
        self._retry_at = 0.0
        self._retry_seconds = _RETRY_FIRST_SECONDS
        self._reported: dict[str, float] = {}
        self._hold_until = 0.0

    def poll(self, spark: SparkSession) -> None:
        """Move what the client has fetched into the buffer (never blocks), connecting first if needed."""
        if self.consumer is None and not self._connect(spark):
            return
        if time.monotonic() >= self._refresh_at:
            try:
                self._assign_new(spark)
            except Exception as exc:  # noqa: BLE001 - broker (SourceUnavailable) or engine errors: try again later
                self._report({"event": "kafka_unavailable", "error": str(exc)})
        while len(self.buffer) < self.kafka.max_records and self.buffer_bytes < self.kafka.max_bytes:
            received = self.consumer.consume(min(CONSUME_BATCH, self.kafka.max_records - len(self.buffer)), timeout=0)
            if not received:
                return
            for record in received:
                if record.error() is not None:
                    self._client_error(record.error())
                    continue
                tp = TopicPartition(record.topic(), record.partition())
                if record.offset() < self.next_offset.get(tp, 0):
                    continue  # before where bronze says to resume: already landed
                value = record.value()
                self.buffer.append(Message(tp.topic, tp.partition, record.offset(), value))
                self.buffer_bytes += len(value) if value else 0
                self.next_offset[tp] = record.offset() + 1
                self.last_at = time.time()
                if self.first_at is None:
                    self.first_at = self.last_at

    def due(self, max_wait_seconds: float) -> bool:
        """Whether the buffer should be landed now: full, its oldest message waited max_wait_seconds, or
        no message arrived for QUIET_SECONDS (a producer's burst is over: waiting longer only adds lag)."""
        if not self.buffer or time.monotonic() < self._hold_until:
            return False
        now = time.time()
        full = len(self.buffer) >= self.kafka.max_records or self.buffer_bytes >= self.kafka.max_bytes
        waited = now - (self.first_at or now) >= max_wait_seconds
        return full or waited or now - (self.last_at or now) >= QUIET_SECONDS

    def take(self) -> tuple[list[Message], float | None]:
        """The buffered messages and when the oldest arrived; the buffer is empty afterwards."""
        taken, first_at = self.buffer, self.first_at
        self.buffer, self.buffer_bytes, self.first_at, self.last_at = [], 0, None, None
        return taken, first_at

    def back_off(self) -> dict[str, float]:
        """Hold the buffer back after a micro-batch a source did not answer (1 s, doubling up to 60 s)."""
        self._hold_until = time.monotonic() + self._retry_seconds
        held = {"retry_in_seconds": self._retry_seconds}
        self._retry_seconds = min(self._retry_seconds * 2, _RETRY_MAX_SECONDS)
        return held

    def settle(self, spark: SparkSession, taken: list[Message]) -> None:
        """After a micro-batch: commit the group's hint, and seek back any partition bronze does not hold to
        the end of what was taken (a micro-batch that was skipped or failed)."""
        if self.consumer is None or not taken:
            return
        try:
            resume = committed_offsets(spark, self.settings)
        except Exception as exc:  # noqa: BLE001 - the engine's errors are not one family
            # Offsets unknown: a new consumer starts again from what bronze holds once it can be read.
            self.emit({"event": "kafka_restart", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"})
            self.close()
            return
        handed: dict[TopicPartition, int] = {}
        for message in taken:
            handed[message.topic_partition] = max(handed.get(message.topic_partition, 0), message.offset + 1)
        starts = {tp: resume.get(tp, self.start_offset.get(tp, 0)) for tp in handed}
        behind = {tp: starts[tp] for tp, end in handed.items() if starts[tp] < end}
        if behind:
            self._seek(behind)
        elif time.monotonic() >= self._hold_until:
            self._retry_seconds = _RETRY_FIRST_SECONDS
        commit_hint(self.consumer, {tp: resume[tp] for tp in handed if tp in resume})

    def close(self) -> None:
        """Close the consumer (its group membership is left; offsets live in bronze)."""
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def _connect(self, spark: SparkSession) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        try:
            self.consumer = open_consumer(self.kafka)
            self.next_offset = {}
            self._assign_new(spark)
        except Exception as exc:  # noqa: BLE001 - broker (SourceUnavailable) or engine errors: try again later
            self.close()
            self._retry_at = time.monotonic() + self._retry_seconds
            self.emit({"event": "kafka_unavailable", "error": str(exc), "retry_in_seconds": self._retry_seconds})
            self._retry_seconds = min(self._retry_seconds * 2, _RETRY_MAX_SECONDS)
            return False
        self._retry_seconds = _RETRY_FIRST_SECONDS
        return True

    def _assign_new(self, spark: SparkSession) -> None:
        """Assign the partitions not assigned yet, each from where bronze says to resume."""
        partitions, _missing = topic_partitions(self.consumer, self.kafka)
        # Until a topic exists there is nothing to wait for: look again soon.
        self._refresh_at = time.monotonic() + (_METADATA_REFRESH_SECONDS if partitions else _EMPTY_REFRESH_SECONDS)
        new = [tp for tp in partitions if tp not in self.next_offset]
        if not new:
            return
        starts = start_offsets(self.consumer, self.kafka, new, committed_offsets(spark, self.settings))
        self.next_offset.update(starts)
        self.start_offset.update(starts)
        self.consumer.incremental_assign([tp.to_client(self.next_offset[tp]) for tp in new])
        self.emit({"event": "kafka_assigned", "partitions": {tp.source: self.next_offset[tp] for tp in new}})

    def _report(self, record: dict[str, Any]) -> None:
        """Emit a client problem once per _REPORT_EVERY_SECONDS (the client retries on its own meanwhile)."""
        now = time.monotonic()
        if now - self._reported.get(record["error"], -_REPORT_EVERY_SECONDS) >= _REPORT_EVERY_SECONDS:
            self._reported[record["error"]] = now
            self.emit(record)

    def _seek(self, offsets: dict[TopicPartition, int]) -> None:
        kept = [m for m in self.buffer if m.topic_partition not in offsets]
        self.buffer = kept
        self.buffer_bytes = sum(len(m.value) for m in kept if m.value)
        self.first_at = self.first_at if kept else None
        self.last_at = self.last_at if kept else None
        for tp, offset in offsets.items():
            self.next_offset[tp] = offset
            self.consumer.seek(tp.to_client(offset))

    def _client_error(self, error) -> None:
        from confluent_kafka import KafkaError

        if error.code() == KafkaError._PARTITION_EOF:
            return
        self._report({"event": "kafka_error", "error": error.str(), "retriable": error.retriable()})
        if error.fatal():
            # A fatal client error ends this consumer; a new one starts from bronze's offsets.
            self.close()
            self._retry_at = time.monotonic() + self._retry_seconds
