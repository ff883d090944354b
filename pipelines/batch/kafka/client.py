"""The Kafka consumer of a lakehouse: its configuration, the topic partitions and end offsets, and the
one error an unreachable broker gives."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from conf.errors import InputError, SourceUnavailable
from conf.settings_sections import KafkaSettings

SOURCE_SCHEME = "kafka://"
# Messages asked of the client per consume call.
CONSUME_BATCH = 10_000


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int

    @property
    def source(self) -> str:
        """The name its records carry as bronze `source_file`."""
        return f"{SOURCE_SCHEME}{self.topic}/{self.partition}"

    def to_client(self, offset: int | None = None):
        """The client's TopicPartition for this partition (at `offset`, when given)."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        if offset is None:
            return KafkaTopicPartition(self.topic, self.partition)
        return KafkaTopicPartition(self.topic, self.partition, offset)


class Message(NamedTuple):
    """One consumed message: where it is and its value (None for a tombstone)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition the message is in."""
        return TopicPartition(self.topic, self.partition)


def consumer_config(kafka: KafkaSettings) -> dict[str, Any]:
    """The librdkafka configuration: the client settings passed through, then what landing relies on.

    Offsets come from bronze (assigned explicitly) and are committed by hand after each landing, so
    auto-commit is off; end-of-partition events tell a batch run when a partition is drained.
    """
    return {
        **dict(kafka.client),
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": kafka.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }


def open_consumer(kafka: KafkaSettings, overrides: dict[str, Any] | None = None):
    """A consumer for the configured broker (nothing is assigned yet).

    Args:
        kafka: the Kafka settings.
        overrides: librdkafka properties set last (e.g. a small prefetch for a consumer that only looks).

    Raises:
        InputError: a client property librdkafka rejects, with its message.
    """
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer({**consumer_config(kafka), **(overrides or {})})
    except KafkaException as exc:
        raise InputError(f"ingest.kafka.client: {exc.args[0].str() if exc.args else exc}") from None


def topic_partitions(consumer, kafka: KafkaSettings) -> tuple[list[TopicPartition], list[str]]:
    """The partitions of the configured topics the broker has, and the configured topics it lacks.

    Raises:
        SourceUnavailable: when no broker answers within `timeout_seconds`, naming the servers.
    """
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(timeout=kafka.timeout_seconds)
    except KafkaException as exc:
        raise unreachable(kafka, exc) from None
    found, missing = [], []
    for topic in kafka.consumed_topics:
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            missing.append(topic)
            continue
        found.extend(TopicPartition(topic, p) for p in sorted(described.partitions))
    return found, missing


def end_offsets(consumer, kafka: KafkaSettings, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Each partition's end offset (the offset its next message will get), as a fetch from it reports.

    The partitions are assigned at `positions` and fetched from until each has answered once: the end a
    fetch reports is current on every Kafka-protocol broker, where a separate ListOffsets request is not
    kept current by all of them. The consumer is left assigned.

    Raises:
        SourceUnavailable: when a partition has not answered within `timeout_seconds`.
    """
    from confluent_kafka import KafkaError

    consumer.assign([tp.to_client(offset) for tp, offset in positions.items()])
    waiting = set(positions)
    deadline = time.monotonic() + kafka.timeout_seconds
    while waiting and time.monotonic() < deadline:
        for record in consumer.consume(1000, timeout=0.5):
            error = record.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                waiting.discard(TopicPartition(record.topic(), record.partition()))
    if waiting:
        raise unreachable(kafka, TimeoutError(f"no answer from {', '.join(sorted(tp.source for tp in waiting))}"))
    ends = {}
    for tp in positions:
        _, high = consumer.get_watermark_offsets(tp.to_client(), cached=True)
        ends[tp] = high
    return ends


def unreachable(kafka: KafkaSettings, exc: BaseException) -> SourceUnavailable:
    """The error for a broker that does not answer: the servers, the time waited and the client's reason."""
    reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
    return SourceUnavailable(
        f"ingest.kafka.bootstrap_servers: {kafka.bootstrap_servers!r} did not answer within "
        f"{kafka.timeout_seconds:g} s ({reason})"
    )
