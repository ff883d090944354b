"""A real Kafka-protocol broker (Tansu, memory storage) on a loopback port for the Kafka source's tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from conf.settings import Settings, load_settings
from pipelines.bench.kafka import loopback_broker

DATAHUB_TOPICS = ("MetadataChangeLog_Versioned_v1", "MetadataChangeLog_Timeseries_v1", "DataHubUsageEvent_v1")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a broker started for the test module and stopped after it."""
    with loopback_broker(tmp_path_factory.mktemp("broker")) as bootstrap:
        yield bootstrap


def kafka_sets(bootstrap: str, topics: dict[str, str], *more: str) -> list[str]:
    """`--set` values consuming only `topics` (topic: kind) from `bootstrap`."""
    return [
        f"ingest.kafka.bootstrap_servers={bootstrap}",
        *(f"ingest.kafka.topics.{t}=none" for t in DATAHUB_TOPICS),
        *(f"ingest.kafka.topics.{t}={kind}" for t, kind in topics.items()),
        *more,
    ]


def kafka_settings(home: Path, bootstrap: str, topics: dict[str, str], *more: str) -> Settings:
    """Local-profile settings on `home` consuming `topics` (MLflow off)."""
    settings = load_settings("local", home=home, env={}, overrides=["mlflow.enabled=false", *kafka_sets(bootstrap, topics, *more)])
    return dataclasses.replace(settings)
