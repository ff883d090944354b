"""The Kafka consumer of a lakehouse: its configuration, the topic partitions and end offsets, and the
one error an unreachable broker gives."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from conf.errors import ConfigError, InputError, SourceUnavailable
from conf.settings_sections import KafkaSecurity, KafkaSettings
from pipelines.runtime.secrets import read_secret

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


def consumer_config(kafka: KafkaSettings, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The librdkafka configuration: the client settings passed through, the security settings with their
    secrets, then what landing relies on.

    Offsets come from bronze (assigned explicitly) and are committed by hand after each landing, so
    auto-commit is off; end-of-partition events tell a batch run when a partition is drained.

    Raises:
        ConfigError: a secret file that cannot be read, or SASL without its password (naming the setting).
    """
    return {
        **dict(kafka.client),
        **security_config(kafka.security, env),
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": kafka.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }


def security_config(security: KafkaSecurity, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The librdkafka properties of `ingest.kafka.security`: protocol, SASL (the password read now), TLS files.

    Raises:
        ConfigError: a secret file that cannot be read, or SASL without its password (naming the setting).
    """
    config = {"security.protocol": security.protocol}
    if security.uses_sasl:
        key = "ingest.kafka.security"
        secret = read_secret(f"{key}.password_file", security.password_file, f"{key}.password_env", security.password_env, env)
        if not secret:
            what = "client secret" if security.sasl_mechanism == "OAUTHBEARER" else "password"
            raise ConfigError(f"{key}: no {what} for {security.sasl_mechanism}: set {security.password_env} or {key}.password_file")
        config["sasl.mechanism"] = security.sasl_mechanism or ""
        if security.sasl_mechanism == "OAUTHBEARER":
            config.update({
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": security.username or "",
                "sasl.oauthbearer.client.secret": secret,
                "sasl.oauthbearer.token.endpoint.url": security.oauth_token_endpoint or "",
            })  # fmt: skip
            if security.oauth_scope:
                config["sasl.oauthbearer.scope"] = security.oauth_scope
        else:
            config.update({"sasl.username": security.username or "", "sasl.password": secret})
    files = {"ssl.ca.location": security.tls_ca_file, "ssl.certificate.location": security.tls_cert_file,
             "ssl.key.location": security.tls_key_file}  # fmt: skip
    config.update({name: str(Path(path).expanduser()) for name, path in files.items() if path})
    return config


@functools.cache
def _listening_consumer_class():
    from confluent_kafka import Consumer

    class ListeningConsumer(Consumer):
        """A consumer that keeps the authentication failure its client reported (it is reported only so)."""

        auth_error: str | None = None

    return ListeningConsumer


def open_consumer(kafka: KafkaSettings, overrides: dict[str, Any] | None = None, env: Mapping[str, str] = os.environ):
    """A consumer for the configured broker (nothing is assigned yet).

    Args:
        kafka: the Kafka settings.
        overrides: librdkafka properties set last (e.g. a small prefetch for a consumer that only looks).
        env: where secrets named by variable are read.

    Raises:
        InputError: a client property librdkafka rejects, with its message.
        ConfigError: a secret that cannot be read.
    """
    from confluent_kafka import KafkaError, KafkaException

    heard: list[str] = []

    def on_error(error) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            heard.append(error.str())

    try:
        consumer = _listening_consumer_class()({**consumer_config(kafka, env), **(overrides or {}), "error_cb": on_error})
    except KafkaException as exc:
        raise InputError(f"ingest.kafka.client: {exc.args[0].str() if exc.args else exc}") from None
    consumer.heard = heard
    return consumer


def topic_partitions(consumer, kafka: KafkaSettings) -> tuple[list[TopicPartition], list[str]]:
    """The partitions of the configured topics the broker has, and the configured topics it lacks.

    Raises:
        SourceUnavailable: when no broker answers within `timeout_seconds`, naming the servers.
    """
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(timeout=kafka.timeout_seconds)
    except KafkaException as exc:
        consumer.poll(0)  # serves the client's error events (nothing is assigned yet: no message is taken)
        raise unreachable(kafka, exc, consumer) from None
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
        raise unreachable(kafka, TimeoutError(f"no answer from {', '.join(sorted(tp.source for tp in waiting))}"), consumer)
    ends = {}
    for tp in positions:
        _, high = consumer.get_watermark_offsets(tp.to_client(), cached=True)
        ends[tp] = high
    return ends


def unreachable(kafka: KafkaSettings, exc: BaseException, consumer=None) -> SourceUnavailable | ConfigError:
    """The error for a broker that does not answer: the servers, the time waited and the client's reason; or,
    when the broker refused the consumer's login, a ConfigError naming the security settings."""
    heard = getattr(consumer, "heard", None)
    if heard:
        security = kafka.security
        return ConfigError(
            f"ingest.kafka.security: {kafka.bootstrap_servers!r} refused the {security.sasl_mechanism or security.protocol} "
            f"login of {security.username!r} ({heard[-1]})"
        )
    reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
    return SourceUnavailable(
        f"ingest.kafka.bootstrap_servers: {kafka.bootstrap_servers!r} did not answer within "
        f"{kafka.timeout_seconds:g} s ({reason})"
    )


class TimeOffset(NamedTuple):
    """Where a partition's messages from a time on start, as found by reading them."""

    offset: int  # the first offset whose message is at or after the time; the end when none is
    timestamp_ms: int | None  # that message's timestamp (None at the end)
    continuous: bool  # a message before the time was read, or the partition starts at offset 0: none was lost


def offsets_at_time(consumer, kafka: KafkaSettings, partitions: list[TopicPartition], time_ms: int) -> dict[TopicPartition, TimeOffset]:
    """Each partition's first offset whose message timestamp is at or after `time_ms`, read from the messages.

    The broker's ListOffsets answer (`offsets_for_times`) is where reading starts, one message early, and the
    messages from there are read until one is at or after the time: a broker whose time index answers too
    early costs reading, never a wrong answer. A partition whose oldest kept message is already after the
    time is not `continuous` (retention may have removed messages after the time). The consumer is left
    assigned.

    Raises:
        SourceUnavailable: when a partition has not answered within `timeout_seconds`.
    """
    from confluent_kafka import KafkaError, KafkaException

    try:
        hints = consumer.offsets_for_times([tp.to_client(time_ms) for tp in partitions], timeout=kafka.timeout_seconds)
    except KafkaException as exc:
        raise unreachable(kafka, exc, consumer) from None
    starts = {TopicPartition(h.topic, h.partition): max(h.offset - 1, 0) if h.offset >= 0 else 0 for h in hints}
    consumer.assign([tp.to_client(offset) for tp, offset in starts.items()])
    found: dict[TopicPartition, TimeOffset] = {}
    older_seen = {tp: False for tp in starts}
    last_seen = dict(starts)
    deadline = time.monotonic() + kafka.timeout_seconds
    while len(found) < len(starts) and time.monotonic() < deadline:
        for record in consumer.consume(1000, timeout=0.5):
            tp = TopicPartition(record.topic(), record.partition())
            if tp in found:
                continue
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    end = max(record.offset(), last_seen[tp])
                    found[tp] = TimeOffset(end, None, older_seen[tp] or end == 0)
                continue
            last_seen[tp] = record.offset() + 1
            stamp = record.timestamp()[1]
            if stamp < time_ms:
                older_seen[tp] = True
                continue
            found[tp] = TimeOffset(record.offset(), stamp, older_seen[tp] or record.offset() == 0)
    if len(found) < len(starts):
        waiting = ", ".join(sorted(tp.source for tp in starts if tp not in found))
        raise unreachable(kafka, TimeoutError(f"no answer from {waiting}"), consumer)
    return found
