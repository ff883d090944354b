"""The Kafka source against a real broker: same events as files, exactly once, quarantine, Avro, errors, status."""

from __future__ import annotations

import io
import json
import signal
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import fastavro
import pytest

from conf.errors import InputError
from conf.settings import CONF_DIR
from pipelines.orchestration.jobs import run_job
from pipelines.batch.kafka.client import TopicPartition
from pipelines.batch.kafka.offsets import next_offsets
from pipelines.batch.kafka.source import land_kafka
from pipelines.batch.kafka.status import kafka_status
from pipelines.bench.kafka import create_topic, loopback_broker, mcl_messages, produce
from pipelines.bench.processes import free_port, start_watch, stop, wait_for, watch_log_records
from tests.pipelines.batch.test_crash_resume import table_contents
from pipelines.runtime.io import read_table
from tests.conftest import FIXTURES, make_settings, register_fresh_tables
from tests.pipelines.batch.kafka.conftest import kafka_sets, kafka_settings
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.json_endpoints import JsonHandler

MCL_FIXTURE = FIXTURES / "history-small.mcl.jsonl"
# What identifies an event apart from where its record was read and in which batch.
EVENT_COLUMNS = ("event_id", "entity_urn", "category", "operation", "modifier", "actor", "event_time",
                 "aspect_name", "old_value", "new_value", "source_version")  # fmt: skip


def _events(spark, settings) -> list[tuple]:
    rows = read_table(spark, settings, "silver.entity_change_events").select(*EVENT_COLUMNS).collect()
    return sorted(tuple(r) for r in rows)


@pytest.fixture(scope="module")
def file_events(spark, tmp_path_factory) -> list[tuple]:
    """The events of the MCL fixture landed from its file."""
    settings = make_settings(tmp_path_factory.mktemp("from-file"))
    register_fresh_tables(spark, settings)
    run_job(settings, paths=[MCL_FIXTURE], spark=spark, deliver=False)
    events = _events(spark, settings)
    assert len(events) > 300, "the fixture history derived too few events to compare"
    return events


def test_next_offsets_count_only_committed_batches():
    rows = [("b1", "t", 0, 9), ("b2", "t", 0, 19), ("b3", "t", 0, 29), ("b1", "t", 1, 4)]
    assert next_offsets(rows, ["b1", "b2"]) == {TopicPartition("t", 0): 20, TopicPartition("t", 1): 5}


def test_a_topic_lands_the_events_of_the_same_history_landed_from_a_file_and_a_second_run_adds_none(
    spark, broker, file_events, tmp_path
):
    topic = "mcl-json"
    create_topic(broker, topic, 3)
    lines = MCL_FIXTURE.read_text().splitlines()
    assert produce(broker, topic, mcl_messages(lines)) == 374
    settings = kafka_settings(tmp_path, broker, {topic: "mcl"})
    register_fresh_tables(spark, settings)

    first = run_job(settings, paths=[], spark=spark, deliver=False)
    assert first.stages[0].rows_in == 374
    assert _events(spark, settings) == file_events
    snapshots = read_table(spark, settings, "bronze.aspect_snapshots")
    sources = {r.source_file for r in snapshots.select("source_file").distinct().collect()}
    assert sources <= {f"kafka://{topic}/{p}" for p in range(3)} and len(sources) == 3
    # Every offset of every partition is landed once (offsets are 0..n-1 per partition on a new topic).
    for row in snapshots.groupBy("source_file").agg({"line_number": "max", "*": "count"}).collect():
        assert row["max(line_number)"] == row["count(1)"] - 1

    second = run_job(settings, paths=[], spark=spark, deliver=False)
    assert second.stages[0].rows_in == 0 and not second.stages[0].batch_ids
    assert _events(spark, settings) == file_events

    status = kafka_status(settings)
    assert status["error"] is None
    assert sum(p["end"] for p in status["partitions"]) == 374
    assert all(p["lag"] == 0 for p in status["partitions"])
    produce(broker, topic, [(b"urn:li:corpuser:x", b'{"late": 1}')] * 2)
    assert sum(p["lag"] for p in kafka_status(settings)["partitions"]) == 2


def test_poison_messages_are_quarantined_with_their_offsets_and_the_others_land(spark, broker, tmp_path):
    topic = "mcl-poison"
    create_topic(broker, topic, 1)
    good = MCL_FIXTURE.read_text().splitlines()[:3]
    pretty = json.dumps(json.loads(good[2]), indent=2).encode()
    values = [good[0].encode(), b"not json at all", None, b"\xff\xfe{}", good[1].encode(), pretty]
    produce(broker, topic, [(b"k", v) for v in values])
    settings = kafka_settings(tmp_path, broker, {topic: "mcl"})
    register_fresh_tables(spark, settings)

    reports = land_kafka(spark, settings)

    assert [r.totals["records_read"] for r in reports] == [6]
    landed = read_table(spark, settings, "bronze.aspect_snapshots").select("source_file", "line_number").collect()
    assert sorted(r.line_number for r in landed) == [0, 4, 5]
    quarantined = {
        r.line_number: (r.source_file, r.reason)
        for r in read_table(spark, settings, "bronze.quarantine").collect()
    }
    assert sorted(quarantined) == [1, 2, 3]
    assert {source for source, _ in quarantined.values()} == {f"kafka://{topic}/0"}
    assert quarantined[1][1].startswith("record: 'not json at all' is not valid JSON")
    assert quarantined[2][1] == "value: empty (a tombstone) is not a record"
    assert quarantined[3][1].startswith("value: not UTF-8")
    offsets = read_table(spark, settings, "bronze.kafka_offsets").collect()
    assert [(r.topic, r.kafka_partition, r.first_offset, r.last_offset, r.records) for r in offsets] == [
        (topic, 0, 0, 5, 6)
    ]


class _Registry(JsonHandler):
    """A Schema Registry answering GET /schemas/ids/<id> from `schemas`."""

    content_type = "application/vnd.schemaregistry.v1+json"
    schemas: dict[int, str] = {}

    def do_GET(self):  # noqa: N802 - the handler's name in http.server
        schema_id = self.path.rsplit("/", 1)[-1]
        text = self.schemas.get(int(schema_id)) if schema_id.isdigit() else None
        if text:
            self.answer_json(200, {"schema": text})
        else:
            self.answer_json(404, {"error_code": 40403, "message": "Schema not found"})


def _avro_record(line: str, field_names: dict[str, set[str]]) -> dict:
    """A fixture MCL line as the Avro MetadataChangeLog record DataHub would produce for it."""
    record = json.loads(line)
    aspect = record.get("aspect")
    system = record.get("systemMetadata")
    return {
        "entityType": record["entityType"],
        "entityUrn": record.get("entityUrn"),
        "changeType": record["changeType"],
        "aspectName": record.get("aspectName"),
        "aspect": {"value": aspect["value"].encode(), "contentType": aspect["contentType"]} if aspect else None,
        "systemMetadata": {k: v for k, v in system.items() if k in field_names["SystemMetadata"]} if system else None,
        "created": record.get("created"),
    }


def test_avro_in_the_confluent_wire_format_lands_the_same_events_as_json(spark, broker, file_events, tmp_path):
    schema_text = (CONF_DIR / "schemas" / "MetadataChangeLog.avsc").read_text()
    schema = fastavro.parse_schema(json.loads(schema_text))
    # Id 8: a registered schema the Avro parser rejects (an unknown type).
    _Registry.schemas = {7: schema_text, 8: json.dumps({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})}
    registry = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=registry.serve_forever, daemon=True).start()
    system_fields = {f["name"] for f in json.loads(schema_text)["fields"][6]["type"][1]["fields"]}
    topic = "mcl-avro"
    create_topic(broker, topic, 2)

    def wire(record: dict, schema_id: int = 7) -> bytes:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, schema, record)
        return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()

    lines = MCL_FIXTURE.read_text().splitlines()
    messages = [(json.loads(line)["entityUrn"].encode(), wire(_avro_record(line, {"SystemMetadata": system_fields})))
                for line in lines]  # fmt: skip
    messages += [(b"bad", wire(_avro_record(lines[0], {"SystemMetadata": system_fields}), schema_id=99)),
                 (b"bad", wire(_avro_record(lines[0], {"SystemMetadata": system_fields}), schema_id=8)),
                 (b"bad", b'{"json": "in an avro topic"}')]  # fmt: skip
    produce(broker, topic, messages)
    settings = kafka_settings(
        tmp_path, broker, {topic: "mcl"}, "ingest.kafka.format=avro",
        f"ingest.kafka.schema_registry_url=http://127.0.0.1:{registry.server_port}",
    )  # fmt: skip
    register_fresh_tables(spark, settings)
    try:
        run_job(settings, paths=[], spark=spark, deliver=False)
    finally:
        registry.shutdown()

    assert _events(spark, settings) == file_events
    reasons = sorted(r.reason for r in read_table(spark, settings, "bronze.quarantine").collect())
    assert reasons[0].startswith("schema id 8: the registry's schema cannot be used (")
    assert reasons[1:] == [
        "schema id 99: not found in the Schema Registry at " f"http://127.0.0.1:{registry.server_port}",
        "value: magic byte 123 is not 0, so it is not in the Confluent wire format",
    ]


def test_an_unreachable_broker_is_a_clear_error_within_the_timeout(tmp_path):
    started = time.monotonic()
    result = run_cli(
        *("--set", "mlflow.enabled=false"),
        *[part for setting in kafka_sets("127.0.0.1:9", {"t": "mcl"}, "ingest.kafka.timeout_seconds=3")
          for part in ("--set", setting)],
        "run", "--no-progress", home=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ingest.kafka.bootstrap_servers: '127.0.0.1:9' did not answer within 3 s" in result.stderr
    assert time.monotonic() - started < 60


def test_status_shows_each_partition_lag(broker, tmp_path):
    topic = "status-only"
    create_topic(broker, topic, 2)
    produce(broker, topic, [(b"a", b"{}")] * 3)
    result = run_cli(
        *[part for setting in ["mlflow.enabled=false", *kafka_sets(broker, {topic: "mcl"})] for part in ("--set", setting)],
        "status", "--json", home=tmp_path,
    )  # fmt: skip
    partitions = json.loads(result.stdout)["kafka"]["partitions"]
    assert [(p["topic"], p["partition"], p["committed"]) for p in partitions] == [(topic, 0, 0), (topic, 1, 0)]
    assert sum(p["lag"] for p in partitions) == 3


def test_a_bad_client_setting_is_named(tmp_path, broker):
    settings = kafka_settings(tmp_path, broker, {"t": "mcl"}, "ingest.kafka.client.no.such.property=1")
    with pytest.raises(InputError, match="ingest.kafka.client"):
        land_kafka(None, settings)


@pytest.mark.slow
def test_a_watcher_killed_mid_batch_lands_every_message_once_after_a_restart(spark, broker, tmp_path):
    topic = "watch-kill"
    create_topic(broker, topic, 2)
    produce(broker, topic, mcl_messages(MCL_FIXTURE.read_text().splitlines()))
    sets = kafka_sets(broker, {topic: "mcl"})
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    run_cli(*[part for s in ["mlflow.enabled=false", *sets] for part in ("--set", s)], "run", "--no-progress", home=clean)
    log = tmp_path / "watch.log"
    # Killed after the batch's rows and offsets are written, before the ledger rows that commit it.
    crashed = start_watch(killed, log, {"LAKEHOUSE_CRASH_AT": "land.after_data"}, *sets)
    assert crashed.wait(180) == -signal.SIGKILL, log.read_text()
    restarted = start_watch(killed, log, None, *sets)
    try:
        wait_for(lambda: any(b.get("kafka_messages") for b in watch_log_records(log, "micro_batch")), 180,
                 "the restarted watcher to land the messages")  # fmt: skip
    finally:
        assert stop(restarted) == 0, log.read_text()
    expected, actual = table_contents(spark, clean), table_contents(spark, killed)
    assert expected["silver.entity_change_events"], "the clean run derived no events"
    for key in expected:
        if key.startswith("ops.") or key in ("bronze.kafka_offsets", "bronze.landed_files"):
            continue  # run ids and batch groupings differ; the offsets are checked below
        assert actual[key] == expected[key], f"{key} differs after a kill mid-batch"
    settings = make_settings(killed)
    from pipelines.batch.kafka.status import bronze_offsets

    assert sum(bronze_offsets(settings).values()) == 374


@pytest.mark.slow
def test_a_watcher_waits_for_a_broker_that_is_down_and_consumes_once_it_is_up(tmp_path):
    port = free_port()
    topic = "late-broker"
    sets = kafka_sets(f"127.0.0.1:{port}", {topic: "mcl"}, "ingest.kafka.timeout_seconds=2")
    log = tmp_path / "watch.log"
    watcher = start_watch(tmp_path / "home", log, None, *sets)
    try:
        retries = wait_for(lambda: len(watch_log_records(log, "kafka_unavailable")) >= 2 and
                           watch_log_records(log, "kafka_unavailable"), 120, "two failed attempts")  # fmt: skip
        assert [r["retry_in_seconds"] for r in retries[:2]] == [1.0, 2.0]
        assert "ingest.kafka.bootstrap_servers" in retries[0]["error"]
        assert watcher.poll() is None, "the watcher stopped while the broker was down"
        with loopback_broker(tmp_path / "broker", port) as bootstrap:
            create_topic(bootstrap, topic, 1)
            produce(bootstrap, topic, mcl_messages(MCL_FIXTURE.read_text().splitlines()[:10]))
            batch = wait_for(lambda: [b for b in watch_log_records(log, "micro_batch") if b.get("kafka_messages")],
                             120, "the messages to land")  # fmt: skip
    finally:
        assert stop(watcher) == 0, log.read_text()
    assert batch[0]["kafka_messages"] == 10 and batch[0]["records"] == 10


def test_a_batch_run_stops_each_partition_at_the_end_it_saw_when_it_started(broker, tmp_path):
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from pipelines.batch.kafka.client import end_offsets, open_consumer
    from pipelines.batch.kafka.source import consume_batch

    topic = "cut-off"
    create_topic(broker, topic, 1)
    produce(broker, topic, [(b"k", b'{"n": %d}' % i) for i in range(6)])
    settings = kafka_settings(tmp_path, broker, {topic: "mcl"})
    consumer = open_consumer(settings.ingest.kafka)
    try:
        tp = TopicPartition(topic, 0)
        ends = end_offsets(consumer, settings.ingest.kafka, {tp: 0})
        assert ends == {tp: 6}
        produce(broker, topic, [(b"k", b'{"late": %d}' % i) for i in range(4)])  # produced after the start
        consumer.assign([KafkaTopicPartition(topic, 0, 2)])
        draining = {tp}
        chunk = consume_batch(consumer, settings.ingest.kafka, draining, ends)
    finally:
        consumer.close()
    assert [m.offset for m in chunk] == [2, 3, 4, 5]
    assert draining == set()


@pytest.mark.slow
def test_a_watcher_holds_messages_back_while_the_schema_registry_is_down_then_lands_them(broker, tmp_path):
    schema_text = (CONF_DIR / "schemas" / "MetadataChangeLog.avsc").read_text()
    schema = fastavro.parse_schema(json.loads(schema_text))
    system_fields = {f["name"] for f in json.loads(schema_text)["fields"][6]["type"][1]["fields"]}
    topic = "avro-registry-down"
    create_topic(broker, topic, 1)
    lines = MCL_FIXTURE.read_text().splitlines()[:5]
    bodies = []
    for line in lines:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, schema, _avro_record(line, {"SystemMetadata": system_fields}))
        bodies.append((b"k", b"\x00\x00\x00\x00\x07" + body.getvalue()))
    produce(broker, topic, bodies)
    port = free_port()
    sets = kafka_sets(broker, {topic: "mcl"}, "ingest.kafka.format=avro",
                      f"ingest.kafka.schema_registry_url=http://127.0.0.1:{port}", "ingest.kafka.timeout_seconds=2")
    log = tmp_path / "watch.log"
    watcher = start_watch(tmp_path / "home", log, None, *sets)
    registry = None
    try:
        waits = wait_for(lambda: len(watch_log_records(log, "waiting")) >= 2 and watch_log_records(log, "waiting"),
                         120, "two held-back micro-batches")  # fmt: skip
        assert [w["retry_in_seconds"] for w in waits[:2]] == [1.0, 2.0]
        assert "ingest.kafka.schema_registry_url" in waits[0]["reason"]
        _Registry.schemas = {7: schema_text}
        registry = ThreadingHTTPServer(("127.0.0.1", port), _Registry)
        threading.Thread(target=registry.serve_forever, daemon=True).start()
        landed = wait_for(lambda: [b for b in watch_log_records(log, "micro_batch") if b.get("kafka_messages")],
                          120, "the held-back messages to land")  # fmt: skip
    finally:
        code = stop(watcher)
        if registry:
            registry.shutdown()
    assert code == 0, log.read_text()
    assert landed[0]["kafka_messages"] == 5 and landed[0]["records"] == 5 and landed[0]["records_quarantined"] == 0


def test_the_lag_per_partition_counts_what_is_not_landed_and_drops_to_0_once_landed(spark, broker, tmp_path):
    from pipelines.batch.kafka.feed import KafkaFeed
    from pipelines.orchestration.metrics import WaitingCollector, kafka_lag_family

    topic = "lag-metrics"
    create_topic(broker, topic, 2)
    lines = MCL_FIXTURE.read_text().splitlines()[:20]
    assert produce(broker, topic, mcl_messages(lines)) == 20
    settings = kafka_settings(tmp_path, broker, {topic: "mcl"})
    register_fresh_tables(spark, settings)
    feed = KafkaFeed(settings, lambda record: None)
    try:
        def polled() -> bool:
            feed.poll(spark)
            return len(feed.buffer) == 20

        wait_for(polled, 60, "the feed to fetch the 20 messages")

        def lag() -> dict[str, float]:
            return {s.labels["partition"]: s.value for s in kafka_lag_family(feed).samples if s.labels["topic"] == topic}

        assert sum(lag().values()) == 20 and set(lag()) == {"0", "1"}
        time.sleep(0.01)  # the oldest buffered message then has waited at least this long
        waiting = {m.name: m for m in WaitingCollector(dict, lambda: feed).collect()}
        (kafka_age,) = [s.value for s in waiting["lakehouse_oldest_unprocessed_age_seconds"].samples if s.labels["source"] == "kafka"]
        assert kafka_age > 0
        messages, _ = feed.take()
        run_job(settings, ("land",), paths=[], spark=spark, deliver=False, kafka_messages=messages)
        feed.settle(spark, messages)
        assert lag() == {"0": 0, "1": 0}
    finally:
        feed.close()
