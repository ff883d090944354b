"""Parsing and validation of landed records as Spark Column expressions (bronze.records), on both engines."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from pyspark.sql import functions as F

from bronze.batches import filter_landable, filter_quarantined
from bronze.records import parse_snapshot_lines, parse_usage_lines, patch_problem
from conf.errors import InputError
from tests.bronze.record_inputs import ACTOR, DEFAULT_ACTOR, LIMIT, URN, lines_df, mcl, mcp, usage

pytestmark = pytest.mark.pure

CHANGE_TYPES_TEXT = "UPSERT, CREATE, CREATE_ENTITY, UPDATE, DELETE, PATCH, RESTATE"


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


def test_a_patch_document_is_checked_for_datahub_s_json_patch_shape(spark):
    generic = json.dumps({"arrayPrimaryKeys": {"tags": ["tag"]}, "patch": [{"op": "add", "path": "/tags/a", "value": {}}]})
    texts = [
        generic,
        json.dumps([{"op": "REMOVE", "path": "/description"}]),
        json.dumps([{"path": "/x"}]),
        json.dumps([{"op": "merge", "path": "/x"}]),
        json.dumps([{"op": "add", "path": "x"}]),
        json.dumps({"patch": "nope"}),
    ]
    rows = spark.createDataFrame([(t,) for t in texts], "v string").select(patch_problem(F.col("v")).alias("p")).collect()
    assert [r.p for r in rows] == [
        None,
        None,
        "aspect.value.patch.op: missing",
        "aspect.value.patch.op: 'merge' is not one of add, remove, replace, copy, move, test",
        "aspect.value.patch.path: 'x' does not start with '/'",
        "aspect.value: '{\"patch\": \"nope\"}' is not a JSON Patch (a list of operations, or {patch, arrayPrimaryKeys})",
    ]
