"""Landing Kafka messages: everything available now (`lakehouse run`), given messages (watch mode's feed),
and the per-partition status."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from conf.errors import InputError
from conf.settings import Settings
from conf.settings_sections import KafkaSettings
from pipelines.batch.kafka.client import (
    CONSUME_BATCH,
    Message,
    TopicPartition,
    end_offsets,
    open_consumer,
    topic_partitions,
    unreachable,
)
from pipelines.batch.kafka.offsets import committed_offsets, start_offsets, write_offsets
from pipelines.batch.kafka.registry import AvroDecoder
from pipelines.batch.kafka.segments import OffsetRange, message_decoder, plan_segments
from pipelines.batch.landing import LandingReport, ProgressCallback
from pipelines.batch.landing.batch import land_plans

log = logging.getLogger("lakehouse.kafka")



def land_kafka(
    spark: SparkSession,
    settings: Settings,
    messages: Sequence[Message] | None = None,
    progress: ProgressCallback | None = None,
) -> list[LandingReport]:
    """Land Kafka messages into bronze: the given ones, or (None) everything available now.

    Args:
        spark: the session (tables registered), under the run lock.
        settings: the lakehouse settings (ingest.kafka configured).
        messages: watch mode's consumed messages; None consumes every configured partition up to the end
            offset it had when the run started, in batches of at most max_records / max_bytes.
        progress: passed to landing.

    Returns:
        One report per landing batch (none when nothing was new).

    Raises:
        SourceUnavailable: a broker that does not answer within timeout_seconds, an unreachable Schema
            Registry (nothing of the batch in progress is committed).
        InputError: a client setting librdkafka rejects, a fatal client error.
    """
    kafka = settings.ingest.kafka
    decode = message_decoder(kafka, _registry(kafka))
    if messages is not None:
        report = land_messages(spark, settings, messages, decode, progress)
        return [report] if report else []
    consumer = open_consumer(kafka)
    try:
        partitions, missing = topic_partitions(consumer, kafka)
        if missing:
            log.warning("Kafka topics not on the broker, skipped: %s", ", ".join(missing))
        if not partitions:
            return []
        starts = start_offsets(consumer, kafka, partitions, committed_offsets(spark, settings))
        ends = end_offsets(consumer, kafka, starts)
        behind = {tp: offset for tp, offset in starts.items() if offset < ends[tp]}
        if not behind:
            return []
        # Assigning again starts each partition over at bronze's offset (the look at the ends read ahead).
        consumer.assign([tp.to_client(offset) for tp, offset in behind.items()])
        reports = []
        draining = set(behind)
        # The next batch is consumed while the engine lands this one (the client waits on the network).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-consume") as prefetch:
            upcoming = prefetch.submit(consume_batch, consumer, kafka, draining, ends)
            while upcoming is not None:
                chunk = upcoming.result()
                upcoming = prefetch.submit(consume_batch, consumer, kafka, draining, ends) if draining else None
                report = land_messages(spark, settings, chunk, decode, progress)
                if report:
                    reports.append(report)
                    commit_hint(consumer, committed_offsets(spark, settings))
        return reports
    finally:
        consumer.close()


def land_messages(
    spark: SparkSession,
    settings: Settings,
    messages: Sequence[Message],
    decode: Callable[[str, bytes | None], str],
    progress: ProgressCallback | None = None,
) -> LandingReport | None:
    """Land messages as one batch, leaving out offsets a committed batch already holds.

    Returns:
        The batch's report; None when every message was landed before.
    """
    resume = committed_offsets(spark, settings)
    fresh = [m for m in messages if m.offset >= resume.get(m.topic_partition, 0)]
    if not fresh:
        return None
    ranges: list[OffsetRange] = []

    def make_plans(scratch: Path, _hasher: Any) -> list:
        plans, found = plan_segments(
            fresh, settings.ingest.kafka, decode, scratch / "kafka", settings.ingest.max_record_bytes
        )
        ranges.extend(found)
        return plans

    def record_offsets(batch_id: str, landed_at: datetime) -> None:
        write_offsets(spark, settings, ranges, batch_id, landed_at)

    return land_plans(spark, settings, make_plans, progress=progress, before_commit=record_offsets)


def commit_hint(consumer, next_offsets: dict[TopicPartition, int]) -> None:
    """Commit the consumer group's offsets after a landing committed (for monitoring tools; never read back)."""
    from confluent_kafka import KafkaException

    if not next_offsets:
        return
    try:
        consumer.commit(offsets=[tp.to_client(o) for tp, o in next_offsets.items()], asynchronous=False)
    except KafkaException as exc:
        log.warning("consumer group offsets not committed (bronze holds them): %s", exc)


def consume_batch(
    consumer, kafka: KafkaSettings, draining: set[TopicPartition], ends: dict[TopicPartition, int]
) -> list[Message]:
    """Consume one batch (max_records / max_bytes) from the draining partitions, none at or past its end.

    A partition leaves `draining`, and is paused, at the offset before its end (as `end_offsets` saw it
    when the run started) or at an end-of-partition event (the last offsets may hold no message: a
    transaction marker, a compacted record).

    Raises:
        SourceUnavailable: when nothing arrives for timeout_seconds while partitions are still behind.
        InputError: a fatal client error.
    """
    from confluent_kafka import KafkaError

    chunk: list[Message] = []
    size = 0
    last_progress = time.monotonic()
    while draining and len(chunk) < kafka.max_records and size < kafka.max_bytes:
        received = consumer.consume(min(CONSUME_BATCH, kafka.max_records - len(chunk)), timeout=1.0)
        if received:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > kafka.timeout_seconds:
            behind = ", ".join(sorted(tp.source for tp in draining))
            raise unreachable(kafka, TimeoutError(f"no message arrived from {behind}"), consumer)
        for record in received:
            tp = TopicPartition(record.topic(), record.partition())
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    _finish(consumer, draining, tp)
                    continue
                if error.fatal() or not error.retriable():
                    raise InputError(f"ingest.kafka: {tp.source}: {error.str()}")
                continue
            offset = record.offset()
            if tp not in draining or offset >= ends[tp]:
                continue
            value = record.value()
            chunk.append(Message(tp.topic, tp.partition, offset, value))
            size += len(value) if value else 0
            if offset >= ends[tp] - 1:
                _finish(consumer, draining, tp)
    return chunk


def _finish(consumer, draining: set[TopicPartition], tp: TopicPartition) -> None:
    if tp in draining:
        draining.discard(tp)
        consumer.pause([tp.to_client()])



def _registry(kafka: KafkaSettings) -> AvroDecoder | None:
    if kafka.format != "avro":
        return None
    return AvroDecoder(kafka)
