"""MCE snapshots (`proposedSnapshot`) split into one MCP record per aspect, on real DataHub output."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import datahub.metadata.schema_classes as schema_classes

from bronze.aspect_classes import ASPECT_NAMES_BY_CLASS, TIMESERIES_ASPECTS
from bronze.formats import FILE_SINK, MCE, MCP, detect_kind, iter_json_array
from bronze.snapshots import aspect_name_of, expand_snapshot_line, snapshot_proposals, to_rest_form

PRODUCERS = Path(__file__).resolve().parents[1] / "fixtures" / "datahub_producers"
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:sqlite,main.orders,PROD)"


def fixture_mces() -> list[dict]:
    return [json.loads(line) for line in (PRODUCERS / "snapshots.mce.jsonl").read_text().splitlines()]


def test_the_aspect_class_table_is_datahub_s():
    installed = {}
    timeseries = set()
    for _, cls in inspect.getmembers(schema_classes, inspect.isclass):
        name = getattr(cls, "ASPECT_NAME", None)
        if name and hasattr(cls, "RECORD_SCHEMA"):
            installed[cls.RECORD_SCHEMA.fullname.removeprefix("com.linkedin.pegasus2avro.")] = name
            if getattr(cls, "ASPECT_TYPE", None) == "timeseries":
                timeseries.add(name)
    assert ASPECT_NAMES_BY_CLASS == installed
    assert TIMESERIES_ASPECTS == timeseries and "datasetProfile" in timeseries
    assert aspect_name_of("com.linkedin.pegasus2avro.schema.SchemaMetadata") == "schemaMetadata"
    assert aspect_name_of("com.linkedin.schema.SchemaMetadata") == "schemaMetadata"
    assert aspect_name_of("com.linkedin.schema.Nope") is None


def test_both_spellings_of_a_real_mce_give_the_same_aspect_records():
    avro, rest = fixture_mces()
    assert "com.linkedin.pegasus2avro.metadata.snapshot.DatasetSnapshot" in avro["proposedSnapshot"]
    assert "com.linkedin.metadata.snapshot.DatasetSnapshot" in rest["proposedSnapshot"]
    from_avro, from_rest = snapshot_proposals(avro), snapshot_proposals(rest)
    assert from_avro == from_rest
    records = [json.loads(text) for text, reason in from_avro if reason is None]
    assert [r["aspectName"] for r in records] == ["status", "datasetProperties", "schemaMetadata"]
    assert {r["entityUrn"] for r in records} == {ORDERS}
    assert {r["changeType"] for r in records} == {"UPSERT"}
    assert all(r["systemMetadata"] == avro["systemMetadata"] for r in records)
    schema = json.loads(records[2]["aspect"]["value"])
    # Union keys in the REST form, as DataHub's emitter sends them (and MCPs carry them).
    assert schema["fields"][0]["type"] == {"type": {"com.linkedin.schema.NumberType": {}}}
    assert [f["fieldPath"] for f in schema["fields"]] == ["id", "amount", "note"]


def test_an_unknown_aspect_class_is_named_and_the_other_aspects_land():
    mce = fixture_mces()[0]
    body = mce["proposedSnapshot"]["com.linkedin.pegasus2avro.metadata.snapshot.DatasetSnapshot"]
    body["aspects"].insert(1, {"com.linkedin.pegasus2avro.common.Teleport": {"to": "mars"}})
    body["aspects"].append(["not", "an", "aspect"])
    results = snapshot_proposals(mce)
    reasons = [reason for _, reason in results if reason]
    assert reasons == [
        f"proposedSnapshot.aspects[1]: 'com.linkedin.pegasus2avro.common.Teleport' is not a DataHub aspect class ({ORDERS})",
        "proposedSnapshot.aspects[4]: '[\"not\", \"an\", \"aspect\"]' is not one {<aspect class>: {...}} object",
    ]
    assert json.loads(results[1][0]) == {"com.linkedin.pegasus2avro.common.Teleport": {"to": "mars"}}
    assert [json.loads(t)["aspectName"] for t, reason in results if reason is None] == [
        "status", "datasetProperties", "schemaMetadata"]
    assert snapshot_proposals({"proposedSnapshot": {}})[0][1].startswith("proposedSnapshot: '{}' is not one")
    no_urn = {"proposedSnapshot": {"com.linkedin.metadata.snapshot.DatasetSnapshot": {"aspects": []}}}
    assert snapshot_proposals(no_urn)[0][1] == "proposedSnapshot.urn: missing (metadata.snapshot.DatasetSnapshot)"


def test_the_rest_form_renames_avro_union_keys_drops_nulls_and_resolves_aliased_unions():
    value = {"a": None, "t": {"com.linkedin.pegasus2avro.schema.StringType": {}},
             "cost": {"fieldDiscriminator": "costCode", "costCode": "x", "costId": None}, "l": [{"b": None, "c": 1}]}
    assert to_rest_form(value) == {"t": {"com.linkedin.schema.StringType": {}}, "cost": {"costCode": "x"}, "l": [{"c": 1}]}


def test_kinds_of_the_real_forms_and_the_file_sink_array_splits_its_mce():
    heads = {name: (PRODUCERS / name).read_text().splitlines() for name in
             ("sqlite-run1.file-sink.json", "snapshots.mce.jsonl", "patches.mcp.jsonl")}
    assert detect_kind(heads["sqlite-run1.file-sink.json"]) == FILE_SINK
    assert detect_kind(heads["snapshots.mce.jsonl"]) == MCE
    assert detect_kind(heads["patches.mcp.jsonl"]) == MCP
    text = (PRODUCERS / "sqlite-run1.file-sink.json").read_text()
    items = list(iter_json_array([text], max_element_chars=1 << 20))
    elements = json.loads(text)
    mce_index = next(i for i, e in enumerate(elements) if "proposedSnapshot" in e)
    # One record per MCP element, three for the MCE's aspects, all good, each MCE aspect on the MCE's line.
    assert len(items) == len(elements) + 2 and all(item.reason is None for item in items)
    mce_items = items[mce_index : mce_index + 3]
    assert len({item.line for item in mce_items}) == 1
    assert [json.loads(item.text)["aspectName"] for item in mce_items] == ["status", "datasetProperties", "schemaMetadata"]
    # A JSON line that is no MCE passes through as it is, to the record checks.
    assert expand_snapshot_line('{"entityUrn": "x"}') == [('{"entityUrn": "x"}', None)]
    assert expand_snapshot_line('{"proposedSnapshot": broken') == [('{"proposedSnapshot": broken', None)]
