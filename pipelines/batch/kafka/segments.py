"""Consumed messages as landing plans: one numbered copy per topic partition, bad values set aside."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from bronze.wire import json_line, raw_text, record_line
from conf.errors import InputError
from conf.settings_sections import KafkaSettings
from pipelines.batch.kafka.client import Message, TopicPartition
from pipelines.batch.landing.files import NumberedCopy
from pipelines.batch.landing.model import FilePlan


class OffsetRange(NamedTuple):
    """The offsets of one partition a batch consumed (first..last inclusive) and how many messages."""

    topic_partition: TopicPartition
    first_offset: int
    last_offset: int
    records: int


def message_decoder(kafka: KafkaSettings, avro_record: Callable[[bytes | None], dict] | None) -> Callable[[str, bytes | None], str]:
    """`decode(kind, value)`: one line of JSON text for landing, or InputError with the reason.

    MCL topics are read in the configured format (Avro records decoded by `avro_record`, a
    `registry.AvroDecoder`); usage events are JSON in every DataHub deployment.
    """

    def decode(kind: str, value: bytes | None) -> str:
        if kind == "mcl" and kafka.format == "avro":
            return record_line(avro_record(value))
        return json_line(value)

    return decode


def plan_segments(
    messages: Sequence[Message],
    kafka: KafkaSettings,
    decode: Callable[[str, bytes | None], str],
    folder: Path,
    max_record_bytes: int,
) -> tuple[list[FilePlan], list[OffsetRange]]:
    """Write each partition's messages as a numbered copy under `folder`; return its plans and offset ranges.

    Args:
        messages: the batch's messages (any order; at most one delivery of each offset).
        kafka: the Kafka settings (each topic's kind).
        decode: see `message_decoder`.
        folder: where the copies are written (the batch's scratch folder).
        max_record_bytes: how much of an undecodable value quarantine keeps.

    Returns:
        One plan per topic partition (kind mcl or usage, source kafka://<topic>/<partition>), and the
        offset range each covers.
    """
    kinds = kafka.consumed_topics
    folder.mkdir(parents=True, exist_ok=True)
    plans, ranges = [], []
    by_partition: dict[tuple[str, int], list[Message]] = {}
    for message in messages:
        by_partition.setdefault((message.topic, message.partition), []).append(message)
    for index, key in enumerate(sorted(by_partition)):
        topic_partition = TopicPartition(*key)
        # A partition's messages come in offset order; a retried batch may repeat some.
        batch = sorted({m.offset: m for m in by_partition[key]}.values(), key=lambda m: m.offset)
        kind = kinds[topic_partition.topic]
        path = folder / f"{index:05d}.txt"
        rejected: list[tuple[int, str, str]] = []
        written = 0
        with path.open("w", encoding="utf-8", newline="\n") as out:
            for message in batch:
                try:
                    line = decode(kind, message.value)
                except InputError as exc:
                    rejected.append((message.offset, raw_text(message.value)[:max_record_bytes], str(exc)))
                    continue
                out.write(f"{message.offset}\t{line}\n")
                written += 1
        plan = FilePlan(index=index, path=path, kind=kind, source_name=topic_partition.source)
        plan.numbered = NumberedCopy(lines=written, lines_read=written)
        plan.rejected = rejected
        plan.content_hash = _segment_hash(path)
        plans.append(plan)
        ranges.append(OffsetRange(topic_partition, batch[0].offset, batch[-1].offset, len(batch)))
    return plans, ranges


def _segment_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
