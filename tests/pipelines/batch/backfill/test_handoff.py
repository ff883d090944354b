"""The hand-off from a backfill to the Kafka source, on a real PostgreSQL holding DataHub's tables and a real
Kafka-protocol broker: a version read both ways yields one change event, and the consumer starts where no
version is missed. Each run ends with the change events of the same history landed from one MCL file."""

from __future__ import annotations

import json

import pytest

from pipelines.batch.backfill import committed_mark, run_backfill
from pipelines.batch.kafka.source import land_kafka
from pipelines.bench.kafka import create_topic, produce
from pipelines.orchestration.jobs import run_job
from pipelines.runtime.io import read_table
from tests.conftest import register_fresh_tables
from tests.pipelines.batch.backfill.conftest import clear, write_history, write_version
from tests.pipelines.batch.backfill.test_backfill import backfill_settings, events, from_files, history  # noqa: F401
from tests.pipelines.batch.kafka.conftest import broker, kafka_sets  # noqa: F401
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow


def timed_messages(lines: list[str]) -> list[tuple[bytes, bytes, int]]:
    """MCL lines as DataHub produces them: keyed by entity URN, timestamped when the version was written."""
    records = [json.loads(line) for line in lines]
    return [(r["entityUrn"].encode(), line.encode(), r["created"]["time"]) for r, line in zip(records, lines)]


def consumed(spark, settings) -> int:
    """How many messages the Kafka source consumed (landed, or dropped as a copy of a landed record)."""
    return sum(r.records for r in read_table(spark, settings, "bronze.kafka_offsets").select("records").collect())


@pytest.mark.parametrize("kept_from", ["a third in", "the backfill's end"])
def test_a_hand_off_yields_each_version_once(spark, databases, broker, history, from_files, kept_from, tmp_path,
                                             monkeypatch):  # fmt: skip
    lines = history[0]
    database = databases["postgres"]
    clear(database)
    backfilled = 2 * len(lines) // 3
    write_history(database, lines[:backfilled])
    # Overlapping: the topic still holds the last half of what the database holds, each of those arrives
    # twice; adjacent: the topic begins with the first version the database does not hold.
    first = len(lines) // 3 if kept_from == "a third in" else backfilled
    topic = f"handoff-from-{first}"
    create_topic(broker, topic, 3)
    produce(broker, topic, timed_messages(lines[first:]))
    settings = backfill_settings(tmp_path, database, monkeypatch, **dict(s.split("=", 1) for s in kafka_sets(broker, {topic: "mcl"})))
    register_fresh_tables(spark, settings)
    run_backfill(spark, settings)
    run_job(settings, ("refine",), spark=spark)
    land_kafka(spark, settings)  # the group has no offsets: from the topic's first message
    run_job(settings, ("refine",), spark=spark)
    assert events(spark, settings) == from_files
    assert consumed(spark, settings) == len(lines) - first


def test_a_hand_off_by_time_starts_each_partition_after_the_backfilled_versions(spark, databases, broker, history,
                                                                                from_files, tmp_path):  # fmt: skip
    lines = history[0]
    database = databases["postgres"]
    clear(database)
    backfilled = len(lines) // 2
    write_history(database, lines[:backfilled])
    # The topic holds the whole history: the hand-off must skip what the backfill read and nothing after.
    topic = "handoff-by-time"
    create_topic(broker, topic, 3)
    produce(broker, topic, timed_messages(lines))
    sets = [*database.settings_overrides(), *kafka_sets(broker, {topic: "mcl"}), "mlflow.enabled=false",
            f"ingest.backfill.handoff_topics=[{topic}]", "ingest.backfill.handoff_margin_seconds=0",
            "ingest.kafka.start_at=group_offsets"]  # fmt: skip
    result = run_cli(*[a for s in sets for a in ("--set", s)], "backfill", "--set-kafka-offsets", home=tmp_path,
                     env={"LAKEHOUSE_BACKFILL_PASSWORD": database.reader_password})  # fmt: skip
    assert "hand-off:" in result.stdout and "committed as consumer group" in result.stdout, result.stdout
    assert "retention removed" not in result.stdout
    from conf.settings import load_settings

    settings = load_settings("local", home=tmp_path, env={}, overrides=sets)
    register_fresh_tables(spark, settings)
    land_kafka(spark, settings)
    run_job(settings, ("refine",), spark=spark)
    assert events(spark, settings) == from_files
    # From the first message at the mark on: the versions after the backfill, and the one written at the mark.
    mark_ms = committed_mark(spark, settings) // 1000
    assert consumed(spark, settings) == sum(json.loads(line)["created"]["time"] >= mark_ms for line in lines)
    assert consumed(spark, settings) == len(lines) - backfilled + 1


def test_a_broker_that_does_not_answer_leaves_the_backfill_done_and_says_why(databases, tmp_path):
    from pipelines.bench.watch import free_port

    database = databases["postgres"]
    clear(database)
    with database.admin_connection() as conn:
        write_version(conn, "postgres", "urn:li:corpuser:handoff", "status", '{"removed": false}', None, 1700000000000,
                      "urn:li:corpuser:admin")  # fmt: skip
    sets = [*database.settings_overrides(), "mlflow.enabled=false", "ingest.kafka.timeout_seconds=1",
            f"ingest.kafka.bootstrap_servers=127.0.0.1:{free_port()}"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    env = {"LAKEHOUSE_BACKFILL_PASSWORD": database.reader_password}
    done = run_cli(*args, "backfill", home=tmp_path, env=env)
    assert "1 versions = 1 landed" in done.stdout and "offsets not found" in done.stdout, done.stdout
    assert "hand-off: the Kafka source must read MetadataChangeLog_Versioned_v1 from the messages of 2023-11-14T22:08:20.000+00:00" in done.stdout
    asked = run_cli(*args, "backfill", "--set-kafka-offsets", home=tmp_path, env=env, check=False)
    assert asked.returncode != 0 and "ingest.kafka.bootstrap_servers" in asked.stderr, asked.stderr
    assert "Traceback" not in asked.stderr
