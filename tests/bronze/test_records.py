"""Validation and shaping of landed records as Spark Column expressions, on both engines."""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from bronze.records import (
    LINE_COLUMNS,
    drop_batch_duplicates,
    drop_landed_duplicates,
    filter_landable,
    filter_out_lines,
    filter_quarantined,
    line_offsets,
    order_partitions,
    parse_snapshot_lines,
    parse_usage_lines,
    to_duplicate_hashes,
    to_lines,
    to_numbered_lines,
    to_partition_summary,
    to_quarantine_rows,
    to_repeated_lines,
    with_line_numbers,
)
from conf.errors import InputError

pytestmark = pytest.mark.pure

ACTOR = "urn:li:corpuser:jdoe"
DEFAULT_ACTOR = "urn:li:corpuser:datahub"
URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
LIMIT = 1000
CHANGE_TYPES_TEXT = "UPSERT, CREATE, CREATE_ENTITY, UPDATE, DELETE, PATCH, RESTATE"


def mcl(**overrides) -> dict:
    """A good MCL record; overrides replace top-level keys (None removes one)."""
    record = {
        "entityType": "dataset",
        "entityUrn": URN,
        "changeType": "UPSERT",
        "aspectName": "status",
        "aspect": {"value": '{"removed": false}', "contentType": "application/json"},
        "systemMetadata": {"lastObserved": 1700000000500, "runId": "run-1", "version": "3"},
        "created": {"time": 1700000000000, "actor": ACTOR},
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not None}


def mcp(**overrides) -> dict:
    return mcl(**{"created": None, **overrides})


def usage(**overrides) -> dict:
    document = {"type": "LogInEvent", "actorUrn": ACTOR, "timestamp": 1700000000000, "loginSource": "passwordLogin"}
    document.update(overrides)
    return {k: v for k, v in document.items() if v is not None}


def lines_df(spark, lines: list[str], file_index: int = 0, source_file: str = "in.jsonl"):
    """Line rows numbered 1.. (as a reader that numbers lines gives them)."""
    rows = [(file_index, source_file, None, None, number, text) for number, text in enumerate(lines, 1)]
    return spark.createDataFrame(
        rows, "file_index int, source_file string, mid bigint, line_crc bigint, line_number bigint, value string"
    )


def reasons_by_line(staged_df) -> dict[int, str | None]:
    return {r.line_number: r.reason for r in staged_df.select("line_number", "reason").collect()}


def test_a_good_mcl_record_is_typed(pure_spark):
    record = mcl()
    line = json.dumps(record)
    row = parse_snapshot_lines(lines_df(pure_spark, [line]), "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT).first()
    assert row.reason is None and row.blank is False and row.raw_text is None
    assert (row.entity_urn, row.entity_type, row.aspect_name, row.change_type) == (URN, "dataset", "status", "UPSERT")
    assert row.aspect_json == '{"removed": false}'
    assert (row.version, row.created_time, row.created_actor, row.run_id) == (3, 1700000000000, ACTOR, "run-1")
    assert json.loads(row.system_metadata) == record["systemMetadata"]
    assert row.source_kind == "mcl"
    expected_hash = hashlib.sha256(
        "\x1f".join(
            ["=mcl", f"={URN}", "=dataset", "=status", "=UPSERT", '={"removed": false}', "=3", "=1700000000000", f"={ACTOR}"]
        ).encode()
    ).hexdigest()
    assert row.record_hash == expected_hash


def test_mcp_and_file_sink_records_take_last_observed_and_the_default_actor(pure_spark):
    lines = [
        json.dumps(mcp()),
        json.dumps(mcp(systemMetadata={"lastObserved": 1700000000900}, entityType=None)),
        json.dumps(mcp(changeType="DELETE", aspect=None)),
        json.dumps(mcp(changeType="DELETE")),
    ]
    for kind in ("mcp", "file-sink"):
        rows = (
            parse_snapshot_lines(lines_df(pure_spark, lines), kind, default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT)
            .orderBy("line_number")
            .collect()
        )
        assert [r.reason for r in rows] == [None] * 4
        assert [(r.created_time, r.created_actor, r.version) for r in rows] == [
            (1700000000500, DEFAULT_ACTOR, 3),
            (1700000000900, DEFAULT_ACTOR, None),
            (1700000000500, DEFAULT_ACTOR, 3),
            (1700000000500, DEFAULT_ACTOR, 3),
        ]
        # The entity type comes from the urn when the record has none; DELETE lands without aspect text.
        assert rows[1].entity_type == "dataset"
        assert [r.aspect_json for r in rows] == ['{"removed": false}', '{"removed": false}', None, None]
        assert {r.source_kind for r in rows} == {kind}
    assert rows[0].record_hash != parse_snapshot_lines(
        lines_df(pure_spark, lines[:1]), "mcp", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT
    ).first().record_hash, "an MCP line and a file-sink element of the same write are two records"


def test_every_bad_mcl_record_gets_a_reason_naming_the_field_and_value(pure_spark):
    long_line = json.dumps(mcl(aspect={"value": json.dumps({"description": "x" * 1200})}))
    cases = {
        '{"entityUrn": "urn:li:corpuser:a", "aspectNa': r"record: '\{\"entityUrn\": \"urn:li:corpuser:a\", \"aspectNa' is not valid JSON",
        "not json at all": r"record: 'not json at all' is not valid JSON",
        "[1, 2]": r"record: '\[1, 2\]' is not a JSON object",
        json.dumps(mcl(entityUrn=None)): r"entityUrn: missing",
        json.dumps(mcl(entityUrn=None, aspectName=None)): r"entityUrn: missing",
        json.dumps(mcl(aspectName=None)): r"aspectName: missing",
        json.dumps(mcl(changeType=None)): r"changeType: missing",
        json.dumps(mcl(entityUrn="foo")): r"entityUrn: 'foo' is not urn:li:<type>:<id>",
        json.dumps(mcl(entityUrn="urn:li:dataset")): r"entityUrn: 'urn:li:dataset' is not urn:li:<type>:<id>",
        json.dumps(mcl(entityUrn="urn::dataset:x")): r"entityUrn: 'urn::dataset:x' is not urn:li:<type>:<id>",
        json.dumps(mcl(changeType="MERGE")): rf"changeType: 'MERGE' is not one of {CHANGE_TYPES_TEXT}",
        json.dumps(mcl(aspect=None)): r"aspect: missing \(changeType UPSERT\)",
        json.dumps(mcl(aspect={"contentType": "application/json"})): r"aspect.value: missing",
        json.dumps(mcl(aspect={"value": "N/A"})): r"aspect.value: 'N/A' is not valid JSON",
        json.dumps(mcl(aspect={"value": '{"removed": '})): r"aspect.value: '\{\"removed\": ' is not valid JSON",
        json.dumps(mcl(aspect={"value": "[1]"})): r"aspect.value: '\[1\]' is not a JSON object",
        json.dumps(mcl(aspect={"value": '{"removed": false} trailing, junk'})): (
            r"aspect.value: '\{\"removed\": false\} trailing, junk' has text after the JSON object"
        ),
        json.dumps(mcl(aspect={"value": '{"removed": "yes please"}'})): (
            r"aspect.value.removed: 'yes please' is not true or false \(status\)"
        ),
        json.dumps(mcl(aspectName="globalTags", aspect={"value": '{"tags": "broken"}'})): (
            r"aspect.value.tags: 'broken' is not a list \(globalTags\)"
        ),
        # JSON strings that look like the kind: the lookup shows them without their quotes.
        json.dumps(mcl(aspectName="globalTags", aspect={"value": '{"tags": "[abc]"}'})): (
            r"aspect.value.tags: '\[abc\]' is not a list \(globalTags\)"
        ),
        json.dumps(mcl(aspect={"value": '{"removed" : "true"}'})): r"aspect.value.removed: 'true' is not true or false \(status\)",
        json.dumps(mcl(aspectName="deprecation", aspect={"value": '{"deprecated": false, "decommissionTime": "123"}'})): (
            r"aspect.value.decommissionTime: '123' is not a whole number \(deprecation\)"
        ),
        json.dumps(mcl(aspect={"value": '{"removed": false}\u00a0'})): (
            r"aspect.value: '\{\"removed\": false\}\u00a0' has text after the JSON object"
        ),
        json.dumps(mcl(aspectName="deprecation", aspect={"value": '{"deprecated": true, "decommissionTime": "soon"}'})): (
            r"aspect.value.decommissionTime: 'soon' is not a whole number \(deprecation\)"
        ),
        json.dumps(mcl(aspectName="schemaMetadata", aspect={"value": '{"fields": {"fieldPath": "a"}}'})): (
            r"aspect.value.fields: '\{\"fieldPath\":( )?\"a\"\}' is not a list \(schemaMetadata\)"
        ),
        json.dumps(mcl(aspectName="")): r"aspectName: '' is empty",
        json.dumps(mcl(aspectName="  ")): r"aspectName: '  ' is empty",
        json.dumps(mcl(created=None)): r"created: missing \(an MCL record carries created.time and created.actor\)",
        json.dumps(mcl(created=5)): r"created: '5' is not an object \{time, actor\}",
        json.dumps(mcl(created={"actor": ACTOR})): r"created.time: missing",
        json.dumps(mcl(created={"time": "2023-11-14T22:13:20.000Z", "actor": ACTOR})): (
            r"created.time: '2023-11-14T22:13:20.000Z' is not an integer epoch-ms"
        ),
        json.dumps(mcl(created={"time": "1700000000000", "actor": ACTOR})): (
            r"created.time: '1700000000000' is not an integer epoch-ms"
        ),
        json.dumps(mcl(created={"time": 1700000000000.5, "actor": ACTOR})): (
            r"created.time: '(1700000000000\.5|1\.7000000000005E12)' is not an integer epoch-ms"
        ),
        json.dumps(mcl(created={"time": 1700000000000})): r"created.actor: missing",
        json.dumps(mcl(created={"time": 1700000000000, "actor": "jdoe"})): r"created.actor: 'jdoe' is not urn:li:<type>:<id>",
        json.dumps(mcl(systemMetadata={"version": "v2"})): r"systemMetadata.version: 'v2' is not a whole number",
        long_line: rf"record: {len(long_line.encode())} bytes is over ingest.max_record_bytes \(1000\); raw_text keeps the first 1000 characters",
    }
    good = [
        json.dumps(mcl()),
        json.dumps(mcl(changeType="DELETE", aspect=None)),
        json.dumps(mcl(systemMetadata=None)),
        # Fields no event reads, absent fields, JSON nulls and aspects without a schema all land.
        json.dumps(mcl(aspectName="globalTags", aspect={"value": '{"tags": null, "extra": [1, "x"]}'})),
        json.dumps(mcl(aspectName="deprecation", aspect={"value": '{"deprecated": false}  '})),
        # A text field of the same name inside another field is no misfit.
        json.dumps(mcl(aspectName="globalTags", aspect={"value": '{"tags": [{"tag": "urn:li:tag:A", "context": {"tags": "x"}}]}'})),
        json.dumps(mcl(aspectName="upstreamLineage", aspect={"value": '{"upstreams": "anything"}'})),
    ]
    lines = [*cases, *good, "", "   "]
    staged_df = parse_snapshot_lines(lines_df(pure_spark, lines), "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT)
    found = reasons_by_line(staged_df)
    for number, (line, pattern) in enumerate(cases.items(), 1):
        assert found[number] is not None and re.fullmatch(pattern, found[number]), (line, found[number])
    assert [found[len(cases) + i] for i in range(1, len(good) + 3)] == [None] * (len(good) + 2)
    rows = {r.line_number: r for r in staged_df.collect()}
    assert rows[len(cases) + len(good) + 1].blank and rows[len(cases) + len(good) + 2].blank and not rows[1].blank
    assert rows[1].raw_text == lines[0], "a quarantined record keeps its raw text"
    assert rows[len(cases)].raw_text == long_line[:LIMIT], "an oversized record keeps its first characters"
    assert filter_landable(staged_df).count() == len(good)
    assert filter_quarantined(staged_df).count() == len(cases)


def test_a_byte_order_mark_before_the_first_record_is_not_part_of_it(pure_spark, tmp_path: Path):
    path = tmp_path / "bom.mcl.jsonl"
    path.write_text("\ufeff" + json.dumps(mcl()) + "\n" + json.dumps(mcl(aspectName="globalTags", aspect={"value": "{}"})) + "\n", encoding="utf-8")
    read_df = to_lines(pure_spark.read.text(str(path)), 0, str(path))
    numbered_df = to_numbered_lines(lines_df(pure_spark, ["1\t\ufeff" + json.dumps(mcl())]).select("value"), 0, str(path))
    for staged_df in (read_df, numbered_df):
        staged = parse_snapshot_lines(staged_df, "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT).collect()
        assert [r.reason for r in staged] == [None] * len(staged) and staged[0].aspect_name == "status"


def test_bad_mcp_times_are_quarantined(pure_spark):
    cases = {
        json.dumps(mcp(systemMetadata=None)): (
            "systemMetadata: missing (an MCP record takes its time from systemMetadata.lastObserved)"
        ),
        json.dumps(mcp(systemMetadata={"runId": "r"})): "systemMetadata.lastObserved: missing",
        json.dumps(mcp(systemMetadata={"lastObserved": "2023-11-14T22:13:20.000Z"})): (
            "systemMetadata.lastObserved: '2023-11-14T22:13:20.000Z' is not an integer epoch-ms"
        ),
        # MCP records carry no created: a created block is not what their time comes from.
        json.dumps(mcp(created={"time": "yesterday"})): None,
    }
    staged_df = parse_snapshot_lines(
        lines_df(pure_spark, list(cases)), "mcp", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT
    )
    assert reasons_by_line(staged_df) == {n: reason for n, reason in enumerate(cases.values(), 1)}


def test_a_usage_document_is_typed_as_given(pure_spark):
    document = usage(
        entityUrn=URN,
        entityType="dataset",
        aspectName="ownership",
        eventSource="GRAPHQL",
        sourceIP="10.0.0.1",
        userAgent="Mozilla/5.0",
        traceId="abc",
        loginDenialReason=None,
        usageSource="backend",
        extra={"kept": "in raw_document"},
    )
    other = usage(type="FailedLogInEvent", telemetryTraceId="t-9", loginSource="PASSWORD_LOGIN", loginDenialReason="BAD")
    lines = [json.dumps(document), json.dumps(other)]
    rows = parse_usage_lines(lines_df(pure_spark, lines), max_record_bytes=LIMIT).orderBy("line_number").collect()
    assert [r.reason for r in rows] == [None, None]
    first, second = rows
    assert (first.event_type, first.actor_urn, first.timestamp) == ("LogInEvent", ACTOR, 1700000000000)
    assert (first.entity_urn, first.entity_type, first.aspect_name) == (URN, "dataset", "ownership")
    assert (first.event_source, first.source_ip, first.user_agent, first.trace_id) == (
        "GRAPHQL",
        "10.0.0.1",
        "Mozilla/5.0",
        "abc",
    )
    assert (first.login_source, first.usage_source, first.raw_document) == ("passwordLogin", "backend", lines[0])
    assert (second.trace_id, second.login_source, second.login_denial_reason) == ("t-9", "PASSWORD_LOGIN", "BAD")
    assert first.source_kind == "usage"


def test_every_bad_usage_document_gets_a_reason(pure_spark):
    cases = {
        '{"type": "LogInEvent", "actorUrn": ': r"record: '\{\"type\": \"LogInEvent\", \"actorUrn\": ' is not valid JSON",
        '"LogInEvent"': r"record: '\"LogInEvent\"' is not a JSON object",
        json.dumps(usage(type=None)): r"type: missing",
        json.dumps(usage(actorUrn=None)): r"actorUrn: missing",
        json.dumps(usage(timestamp=None)): r"timestamp: missing",
        json.dumps(usage(type="LoginEvent")): r"type: 'LoginEvent' is not a known usage event type",
        json.dumps(usage(actorUrn="jdoe")): r"actorUrn: 'jdoe' is not urn:li:<type>:<id>",
        json.dumps(usage(timestamp="2023-11-14T22:13:20.000Z")): (
            r"timestamp: '2023-11-14T22:13:20.000Z' is not an integer epoch-ms"
        ),
        json.dumps(usage(timestamp="soon")): r"timestamp: 'soon' is not an integer epoch-ms",
        json.dumps(usage(entityUrn="orders")): r"entityUrn: 'orders' is not urn:li:<type>:<id>",
        json.dumps(usage(userAgent="x" * 1000)): r"record: 1\d{3} bytes is over ingest.max_record_bytes \(1000\).*",
        json.dumps(usage(type="DeletePolicyEvent")): None,
        json.dumps(usage(type="UpdateAspectEvent", entityUrn=URN, aspectName="status")): None,
    }
    found = reasons_by_line(parse_usage_lines(lines_df(pure_spark, list(cases)), max_record_bytes=LIMIT))
    for number, (line, pattern) in enumerate(cases.items(), 1):
        if pattern is None:
            assert found[number] is None, (line, found[number])
        else:
            assert found[number] is not None and re.fullmatch(pattern, found[number]), (line, found[number])


def test_usage_hash_ignores_key_order_and_spacing_but_not_values(pure_spark):
    document = usage(sourceIP="10.0.0.1")
    lines = [
        json.dumps(document),
        json.dumps(dict(reversed(list(document.items()))), separators=(",", ":")),
        json.dumps(usage(sourceIP="10.0.0.2")),
        json.dumps(usage(sourceIP="")),
        json.dumps(usage(sourceIP=None)),
    ]
    hashes = [
        r.record_hash
        for r in parse_usage_lines(lines_df(pure_spark, lines), max_record_bytes=LIMIT).orderBy("line_number").collect()
    ]
    assert hashes[0] == hashes[1]
    assert len(set(hashes[1:])) == 4, "an empty string and a missing field are different records"


def test_bad_arguments_name_the_argument(pure_spark):
    df = lines_df(pure_spark, ["{}"])
    with pytest.raises(InputError, match=r"kind: 'usage' is not an aspect snapshot kind"):
        parse_snapshot_lines(df, "usage", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT)
    with pytest.raises(InputError, match=r"max_record_bytes: 0 must be a positive integer"):
        parse_usage_lines(df, max_record_bytes=0)


def test_line_numbers_of_a_text_read_follow_the_file(pure_spark, tmp_path: Path):
    lines = [json.dumps(usage(timestamp=1700000000000 + i, userAgent="a" * (i % 300))) for i in range(12000)]
    lines[10] = ""
    lines[7000] = "   "
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read_df = to_lines(pure_spark.read.text(str(path)), 3, str(path))
    assert read_df.columns == list(LINE_COLUMNS)
    # Staged once, as landing does: a second read of the text may split it differently.
    parse_usage_lines(read_df, max_record_bytes=LIMIT).write.parquet(str(tmp_path / "staged"))
    staged_df = pure_spark.read.parquet(str(tmp_path / "staged"))
    summary = to_partition_summary(staged_df).collect()
    assert {r.file_index for r in summary} == {3}
    assert (sum(r.rows for r in summary), sum(r.records_read for r in summary)) == (len(lines), len(lines) - 2)
    parts = [(r.partition, r.rows, r.first_crc, r.last_crc) for r in summary]
    order = order_partitions(parts, crc_reader(lines))
    rows = {p[0]: p[1] for p in parts}
    numbered_df = with_line_numbers(staged_df, line_offsets({3: [(p, rows[p]) for p in order]}))
    got = {r.line_number: (r.blank, r.timestamp) for r in numbered_df.select("line_number", "blank", "timestamp").collect()}
    expected = {n: (not text.strip(), json.loads(text)["timestamp"] if text.strip() else None) for n, text in enumerate(lines, 1)}
    assert got == expected


def crc_reader(lines: list[str]):
    """crc_at over in-memory lines, refusing to go back (as the file scanner does)."""
    asked = []

    def crc_at(number: int):
        assert not asked or number >= asked[-1], "crc_at went back"
        asked.append(number)
        return zlib.crc32(lines[number - 1].encode()) if number <= len(lines) else None

    return crc_at


def part(partition: int, lines: list[str], first: int, rows: int) -> tuple[int, int, int, int]:
    return (partition, rows, zlib.crc32(lines[first - 1].encode()), zlib.crc32(lines[first + rows - 2].encode()))


def test_order_partitions_puts_partitions_in_file_order_or_gives_up():
    lines = [f"line {n}" for n in range(1, 11)]
    # The engine numbered the second half of the file as partition 0.
    assert order_partitions([part(0, lines, 6, 5), part(1, lines, 1, 5)], crc_reader(lines)) == [1, 0]
    shuffled = [part(7, lines, 4, 2), part(2, lines, 1, 3), part(5, lines, 6, 5)]
    assert order_partitions(shuffled, crc_reader(lines)) == [2, 7, 5]
    # Same first line, told apart by the last one.
    tied = ["x", "a", "x", "b", "c"]
    assert order_partitions([part(0, tied, 3, 3), part(1, tied, 1, 2)], crc_reader(tied)) == [1, 0]
    same = ["x", "y", "x", "y"]
    assert order_partitions([part(0, same, 1, 2), part(1, same, 3, 2)], crc_reader(same)) is None
    # Partitions that do not tile the file: a line missing, a line too many, a foreign line.
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 4)], crc_reader(lines)) is None
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 5)], crc_reader(lines[:9] + ["line 10"])) == [0, 1]
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 4)], crc_reader(lines[:9])) == [0, 1]
    assert order_partitions([part(0, lines, 1, 5), (1, 5, zlib.crc32(b"other"), 0)], crc_reader(lines)) is None


def test_line_offsets_count_the_lines_before_each_partition():
    offsets = line_offsets({0: [(1, 5), (0, 3), (3, 2)], 2: [(0, 4)]})
    assert offsets == {1: 0, 0: 5, 3: 8, 2 * 2**31: 0}


def test_line_numbers_are_found_among_many_files_and_partitions(pure_spark):
    # 7 files of 3 partitions each: 21 offsets, so every branch of the lookup is taken.
    sizes = {(f, p): 10 + 7 * f + p for f in (0, 2, 3, 5, 8, 9, 13) for p in range(3)}
    ordered = {f: [(p, sizes[(f, p)]) for p in (2, 0, 1)] for f in {f for f, _ in sizes}}
    rows, expected = [], {}
    for (f, p), size in sizes.items():
        before = sum(sizes[(f, q)] for q in (2, 0, 1)[: (2, 0, 1).index(p)])
        for within in (0, size - 1):
            mid = (p << 33) + within
            rows.append((f, mid, None))
            expected[(f, mid)] = before + within + 1
    rows.append((5, 7, 1234))  # converted input keeps its own number
    expected[(5, 7)] = 1234
    staged_df = pure_spark.createDataFrame(rows, "file_index int, mid bigint, line_number bigint")
    numbered = with_line_numbers(staged_df, line_offsets(ordered)).collect()
    assert {(r.file_index, r.mid): r.line_number for r in numbered} == expected


def test_numbered_lines_keep_the_reader_line_numbers(pure_spark):
    text_df = pure_spark.createDataFrame([("17\t" + json.dumps(mcp()),), ("40\t[1]",)], "value string")
    staged_df = parse_snapshot_lines(
        to_numbered_lines(text_df, 1, "sink.json"), "file-sink", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT
    )
    rows = {r.line_number: r for r in with_line_numbers(staged_df, {}).collect()}
    assert set(rows) == {17, 40}
    assert rows[17].reason is None and rows[17].source_file == "sink.json" and rows[17].file_index == 1
    assert rows[40].reason == "record: '[1]' is not a JSON object" and rows[40].raw_text == "[1]"


def test_duplicates_keep_the_first_occurrence_and_landed_ones_are_dropped(pure_spark):
    rows = [
        (1, 5, "h1"),
        (0, 9, "h1"),
        (0, 2, "h2"),
        (0, 4, "h1"),
        (1, 1, "h3"),
    ]
    landable_df = pure_spark.createDataFrame(rows, "file_index int, line_number bigint, record_hash string")
    assert sorted(r.record_hash for r in to_duplicate_hashes(landable_df).collect()) == ["h1"]
    first = {(r.file_index, r.line_number, r.record_hash) for r in drop_batch_duplicates(landable_df).collect()}
    assert first == {(0, 4, "h1"), (0, 2, "h2"), (1, 1, "h3")}
    repeated = sorted((r.file_index, r.line_number) for r in to_repeated_lines(landable_df).collect())
    assert repeated == [(0, 9), (1, 5)]
    listed = {(r.file_index, r.line_number, r.record_hash) for r in filter_out_lines(landable_df, repeated).collect()}
    assert listed == first
    assert filter_out_lines(landable_df, []).count() == 5
    unnumbered_df = pure_spark.createDataFrame([(0, None, "h4")], "file_index int, line_number bigint, record_hash string")
    assert filter_out_lines(landable_df.unionByName(unnumbered_df), repeated).count() == 4
    landed_df = pure_spark.createDataFrame([("h2", 1), ("h9", 2)], "record_hash string, other int")
    left = sorted(r.record_hash for r in drop_landed_duplicates(landable_df, landed_df).collect())
    assert left == ["h1", "h1", "h1", "h3"]


def test_quarantine_rows_name_the_field_and_carry_the_batch(pure_spark):
    rejected_df = pure_spark.createDataFrame(
        [("{x", "a.json", 3, "file-sink", "record: malformed JSON in the file-sink array"),
         ('{"a": 1}', "b.jsonl", 8, "mcl", "created.time: 'x' is not an integer epoch-ms")],
        "raw_text string, source_file string, line_number bigint, source_kind string, reason string",
    )
    at = datetime(2026, 1, 2, 23, 59, tzinfo=timezone.utc)
    rows = to_quarantine_rows(rejected_df, "b-7", at).orderBy("line_number").collect()
    assert [r.field for r in rows] == ["record", "created.time"]
    assert [r.kind for r in rows] == ["file-sink", "mcl"]
    assert {(r.batch_id, r.land_date) for r in rows} == {("b-7", date(2026, 1, 2))}
    # Timestamps come back as naive local times of this process.
    assert rows[0].quarantined_at == at.astimezone().replace(tzinfo=None)
