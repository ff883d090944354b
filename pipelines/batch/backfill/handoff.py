"""The hand-off from a backfill to the Kafka source: where on the MCL topics the consumer must start.

A version reaches the lakehouse from the database and from the topic as the same record (see
docs/onboarding.md, "A version's identity"): refine keeps the first copy and skips the other, so reading a
topic from before the backfill's mark costs reading only. What must not happen is a gap: the consumer
must start at or before the first message of a version the backfill did not read. Every such version has
a `createdon` after the mark, and its MCL a Kafka timestamp at or after its `createdon` (DataHub writes the
row, then produces the MCL), so the first offset at or after the mark, less a margin for clocks, is such a
start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from conf.settings import Settings
from pipelines.batch.kafka.client import TimeOffset, TopicPartition, offsets_at_time, open_consumer, topic_partitions, unreachable


@dataclass(frozen=True)
class Handoff:
    """Where the Kafka source must start after a backfill: a time, and the offsets it gives."""

    time_ms: int
    offsets: dict[TopicPartition, TimeOffset]
    missing_topics: tuple[str, ...] = ()

    @property
    def gaps(self) -> list[TopicPartition]:
        """Partitions whose oldest kept message is after the hand-off time: retention may have removed versions."""
        return [tp for tp, found in sorted(self.offsets.items()) if not found.continuous]

    def as_dict(self) -> dict:
        """The hand-off as JSON-ready values."""
        return {
            "handoff_time_ms": self.time_ms,
            "handoff_time": format_ms(self.time_ms),
            "partitions": [
                {"source": tp.source, "offset": found.offset, "continuous": found.continuous}
                for tp, found in sorted(self.offsets.items())
            ],
            "missing_topics": list(self.missing_topics),
        }


def handoff_time_ms(mark_us: int, margin_seconds: float) -> int:
    """The time (ms) the consumer must start at after a backfill whose high-water mark is `mark_us`."""
    return mark_us // 1000 - int(margin_seconds * 1000)


def format_ms(time_ms: int) -> str:
    """A time in ms as ISO 8601 UTC text."""
    return datetime.fromtimestamp(time_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def find_handoff(settings: Settings, mark_us: int) -> Handoff:
    """The hand-off offsets of the hand-off topics (`ingest.backfill.handoff_topics`) for a backfill's mark.

    Raises:
        SourceUnavailable: the broker does not answer within `ingest.kafka.timeout_seconds`.
        InputError: a client setting librdkafka rejects.
    """
    kafka = settings.ingest.kafka
    time_ms = handoff_time_ms(mark_us, settings.ingest.backfill.handoff_margin_seconds)
    consumer = open_consumer(kafka, {"queued.max.messages.kbytes": 1024, "fetch.max.bytes": 1048576})
    try:
        partitions, missing = topic_partitions(consumer, kafka)
        wanted = set(settings.ingest.backfill.handoff_topics)
        chosen = [tp for tp in partitions if tp.topic in wanted]
        offsets = offsets_at_time(consumer, kafka, chosen, time_ms) if chosen else {}
    finally:
        consumer.close()
    absent = tuple(sorted(wanted & set(missing)))
    return Handoff(time_ms, offsets, absent)


def commit_handoff(settings: Settings, handoff: Handoff) -> None:
    """Commit the hand-off offsets as the consumer group's (`ingest.kafka.group_id`) offsets.

    The Kafka source starts a partition that bronze holds nothing of at its group's offset; a partition
    bronze holds is left where bronze says.

    Raises:
        SourceUnavailable: the broker does not take the commit.
    """
    from confluent_kafka import KafkaException

    kafka = settings.ingest.kafka
    if not handoff.offsets:
        return
    consumer = open_consumer(kafka)
    try:
        consumer.commit(
            offsets=[tp.to_client(found.offset) for tp, found in sorted(handoff.offsets.items())], asynchronous=False
        )
    except KafkaException as exc:
        raise unreachable(kafka, exc, consumer) from None
    finally:
        consumer.close()

