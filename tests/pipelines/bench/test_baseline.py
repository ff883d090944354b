"""The one-process Python baseline of refine on a hand-written MCL history: every expected change is
counted by hand from the history below, not taken from the pipeline."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.bench.baseline import derive_changes, derive_event_ids

D = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"


def mcl(aspect: str, version: int, value: dict | None, change_type: str = "UPSERT", urn: str = D) -> str:
    record = {
        "entityType": "dataset",
        "entityUrn": urn,
        "changeType": change_type,
        "aspectName": aspect,
        "systemMetadata": {"lastObserved": 1700000000000 + version, "runId": "r", "version": str(version)},
        "created": {"time": 1700000000000 + version, "actor": "urn:li:corpuser:ana"},
    }
    if value is not None:
        record["aspect"] = {"value": json.dumps(value), "contentType": "application/json"}
    return json.dumps(record)


def field(path: str, native: str, **extra) -> dict:
    return {"fieldPath": path, "nativeDataType": native, "nullable": False, **extra}


FIRST_BATCH = [
    mcl("datasetKey", 1, {"platform": "urn:li:dataPlatform:hive", "name": "db.orders", "origin": "PROD"}),
    mcl("globalTags", 1, {"tags": [{"tag": "urn:li:tag:t1"}, {"tag": "urn:li:tag:t2"}]}),
    mcl("globalTags", 2, {"tags": [{"tag": "urn:li:tag:t2"}, {"tag": "urn:li:tag:t3"}]}),
    # A second copy of version 2 with other content: the first copy to arrive counts.
    mcl("globalTags", 2, {"tags": [{"tag": "urn:li:tag:t9"}]}),
    "this line is not a record",
    mcl("ownership", 1, {"owners": [{"owner": "urn:li:corpuser:u1", "type": "DATAOWNER"}, {"owner": "urn:li:corpuser:u2"}]}),
    mcl("schemaMetadata", 1, {"fields": [
        field("a", "int", globalTags={"tags": [{"tag": "urn:li:tag:pii"}]}),
        field("b", "string", description="B col"),
    ]}),
    mcl("status", 1, {"removed": False}),
    mcl("datasetProperties", 1, {"description": "   "}),
]

SECOND_BATCH = [
    # Older than the state's version 2: late, no events.
    mcl("globalTags", 1, {"tags": [{"tag": "urn:li:tag:t7"}]}),
    mcl("schemaMetadata", 2, {"fields": [field("a", "bigint"), field("c", "string")]}),
    mcl("status", 2, {"removed": True}),
    mcl("ownership", 2, None, change_type="DELETE"),
    mcl("structuredProperties", 1, {"properties": [{"propertyUrn": "urn:li:structuredProperty:sla", "values": [{"double": 30}]}]}),
    # The same set of values, listed twice: no change.
    mcl("structuredProperties", 2, {"properties": [
        {"propertyUrn": "urn:li:structuredProperty:sla", "values": [{"double": 30.0}, {"double": 30}]},
    ]}),
    mcl("datasetKey", 2, None, change_type="DELETE"),
    # Deleting status would reinstate, but a DELETE of a non-key aspect keeps only REMOVE events.
    mcl("status", 3, None, change_type="DELETE"),
]


def field_urn(path: str) -> str:
    return f"urn:li:schemaField:({D},{path})"


EXPECTED = {
    (D, "LIFECYCLE", "CREATE", None),
    (D, "TAG", "ADD", "urn:li:tag:t1"),
    (D, "TAG", "ADD", "urn:li:tag:t2"),
    (D, "TAG", "REMOVE", "urn:li:tag:t1"),
    (D, "TAG", "ADD", "urn:li:tag:t3"),
    (D, "OWNER", "ADD", "urn:li:corpuser:u1"),
    (D, "OWNER", "ADD", "urn:li:corpuser:u2"),
    (D, "TECHNICAL_SCHEMA", "ADD", field_urn("a")),
    (D, "TECHNICAL_SCHEMA", "ADD", field_urn("b")),
    (field_urn("a"), "TAG", "ADD", "urn:li:tag:pii"),
    (field_urn("b"), "DOCUMENTATION", "ADD", None),
    (D, "TECHNICAL_SCHEMA", "MODIFY", field_urn("a")),
    (D, "TECHNICAL_SCHEMA", "REMOVE", field_urn("b")),
    (D, "TECHNICAL_SCHEMA", "ADD", field_urn("c")),
    (field_urn("a"), "TAG", "REMOVE", "urn:li:tag:pii"),
    (field_urn("b"), "DOCUMENTATION", "REMOVE", None),
    (D, "LIFECYCLE", "SOFT_DELETE", None),
    (D, "OWNER", "REMOVE", "urn:li:corpuser:u1"),
    (D, "OWNER", "REMOVE", "urn:li:corpuser:u2"),
    (D, "STRUCTURED_PROPERTY", "ADD", "urn:li:structuredProperty:sla"),
    (D, "LIFECYCLE", "HARD_DELETE", None),
}


@pytest.fixture
def batches(tmp_path: Path) -> list[Path]:
    paths = []
    for index, lines in enumerate((FIRST_BATCH, SECOND_BATCH)):
        path = tmp_path / f"batch-{index}.mcl.jsonl"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def test_the_changes_are_the_hand_counted_ones(batches):
    changes = [(change[0], change[1], change[2], change[3]) for _, change in derive_changes([[b] for b in batches])]
    assert len(changes) == len(EXPECTED) == 21
    assert set(changes) == EXPECTED


def test_parameters_follow_the_event_catalog(batches):
    params = {(c[1], c[2], c[3]): c[4] for _, c in derive_changes([[b] for b in batches])}
    assert params[("OWNER", "ADD", "urn:li:corpuser:u2")] == {
        "ownerUrn": "urn:li:corpuser:u2", "ownerType": "CUSTOM", "ownerTypeUrn": None
    }
    assert params[("STRUCTURED_PROPERTY", "ADD", "urn:li:structuredProperty:sla")] == {
        "propertyUrn": "urn:li:structuredProperty:sla", "propertyValues": "[30.0]"
    }
    assert params[("TECHNICAL_SCHEMA", "MODIFY", field_urn("a"))] == {
        "fieldUrn": field_urn("a"), "fieldPath": "a", "nullable": "false", "modificationCategory": "TYPE_CHANGE"
    }


def test_read_as_one_batch_the_late_version_is_a_duplicate_copy(batches):
    # Read as one batch, tags version 1 of the second file is the key's first version again (a copy of
    # it arrived first, so the t7 copy is a duplicate) and nothing is late; the events are the same.
    result = derive_event_ids([batches])
    assert len(result.event_ids) == 21 and result.records == 16 and result.skipped_lines == 1


def test_an_event_id_hashes_the_event_identity(batches):
    create = "\u001f".join([D, D, "datasetKey", "v0000000000000000001.0", "LIFECYCLE", "CREATE", "\u2400", "\u2400"])
    tag = "\u001f".join(
        [D, D, "globalTags", "v0000000000000000002.0", "TAG", "ADD", "urn:li:tag:t3", '{"tagUrn":"urn:li:tag:t3"}']
    )
    ids = derive_event_ids([[b] for b in batches]).event_ids
    for identity in (create, tag):
        assert hashlib.sha256(identity.encode()).hexdigest() in ids


def test_the_module_runs_as_a_script_and_writes_the_ids(batches, tmp_path):
    ids_path = tmp_path / "ids.txt"
    completed = subprocess.run(
        [sys.executable, "-m", "pipelines.bench.baseline", *map(str, batches), "--ids-out", str(ids_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    reported = json.loads(completed.stdout)
    assert {k: reported[k] for k in ("records", "skipped_lines", "events")} == {"records": 16, "skipped_lines": 1, "events": 21}
    lines = ids_path.read_text().splitlines()
    assert len(lines) == 21 and lines == sorted(lines)


def test_a_missing_input_is_refused(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "pipelines.bench.baseline", str(tmp_path / "nothing")],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 2 and "nothing" in completed.stderr
