"""Where consumption resumes: the last offset of each partition that a committed landing batch holds."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from conf.settings_sections import KafkaSettings
from pipelines.batch.kafka.client import TopicPartition, unreachable
from pipelines.batch.kafka.segments import OffsetRange
from pipelines.batch.landing.model import KAFKA_OFFSETS_TABLE
from pipelines.runtime.io import append, read_table
from pipelines.runtime.progress import committed_batches


def next_offsets(rows: Iterable[tuple[str, str, int, int]], committed: Iterable[str]) -> dict[TopicPartition, int]:
    """The offset to resume each partition from: one past the last offset a committed batch consumed.

    Args:
        rows: (batch_id, topic, partition, last_offset) of bronze.kafka_offsets.
        committed: the committed batch ids (rows of other batches are a landing that never finished).
    """
    done = set(committed)
    resume: dict[TopicPartition, int] = {}
    for batch_id, topic, partition, last_offset in rows:
        if batch_id in done:
            key = TopicPartition(topic, int(partition))
            resume[key] = max(resume.get(key, 0), int(last_offset) + 1)
    return resume


def committed_offsets(spark: SparkSession, settings: Settings) -> dict[TopicPartition, int]:
    """`next_offsets` of the home's bronze tables, read through the session."""
    rows = (
        read_table(spark, settings, KAFKA_OFFSETS_TABLE)
        .groupBy("batch_id", "topic", "kafka_partition")
        .agg(F.max("last_offset").alias("last_offset"))
        .collect()
    )
    return next_offsets(
        ((r.batch_id, r.topic, r.kafka_partition, r.last_offset) for r in rows), committed_batches(spark, settings)
    )


def write_offsets(
    spark: SparkSession, settings: Settings, ranges: Sequence[OffsetRange], batch_id: str, landed_at: datetime
) -> None:
    """Append a batch's offset ranges to bronze.kafka_offsets (before its ledger rows commit it)."""
    rows = [
        (batch_id, r.topic_partition.topic, r.topic_partition.partition, r.first_offset, r.last_offset, r.records,
         landed_at)
        for r in ranges
    ]
    offsets_df = spark.createDataFrame(
        rows,
        "batch_id string, topic string, kafka_partition int, first_offset bigint, last_offset bigint, "
        "records bigint, landed_at timestamp",
    )
    append(offsets_df, settings, KAFKA_OFFSETS_TABLE)


def start_offsets(
    consumer, kafka: KafkaSettings, partitions: Iterable[TopicPartition], resume: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Where each partition is read from: bronze's offset; for a partition bronze holds nothing of, 0 (the
    earliest message kept), or with `start_at: group_offsets` the consumer group's committed offset.

    The group's offset is where a hand-off after a backfill (`lakehouse backfill --set-kafka-offsets`, or
    the operator's own tools) set the group to start; it is read only when asked, as another home may
    have committed to the same group. An offset retention removed starts at the earliest message kept.

    Raises:
        SourceUnavailable: when the broker does not answer within `timeout_seconds`.
    """
    from confluent_kafka import KafkaException

    partitions = list(partitions)
    starts = {tp: resume[tp] for tp in partitions if tp in resume}
    unknown = [tp for tp in partitions if tp not in resume]
    if kafka.start_at != "group_offsets" or not unknown:
        return {**starts, **{tp: 0 for tp in unknown}}
    try:
        committed = consumer.committed([tp.to_client() for tp in unknown], timeout=kafka.timeout_seconds)
    except KafkaException as exc:
        raise unreachable(kafka, exc, consumer) from None
    for entry in committed:
        starts[TopicPartition(entry.topic, entry.partition)] = max(entry.offset, 0)
    return starts
