"""The history generator: deterministic, in DataHub's exact shapes, every edit kind, an honest manifest."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from bronze.formats import USAGE_EVENT_TYPES
from conf.errors import InputError
from bronze.formats import ACTION_REQUEST_TYPES
from datagen.history import generate_aspect_versions, generate_history, generate_usage_events
from datagen.manifest import GeneratorManifest
from tests.conftest import FIXTURES

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
URN = re.compile(r"^urn:li:[A-Za-z]+:.+$")
SPEC_USAGE_TYPES = {
    "EntityEvent", "CreateUserEvent", "UpdateUserEvent", "CreateAccessTokenEvent", "RevokeAccessTokenEvent",
    "CreatePolicyEvent", "UpdatePolicyEvent", "CreateIngestionSourceEvent", "UpdateIngestionSourceEvent",
    "DeleteEntityEvent", "UpdateAspectEvent", "LogInEvent", "FailedLogInEvent", "DeletePolicyEvent",
}
LOGIN_SOURCES = {"PASSWORD_RESET", "PASSWORD_LOGIN", "FALLBACK_LOGIN", "SIGN_UP_LINK_LOGIN", "GUEST_LOGIN",
                 "SSO_LOGIN", "OIDC_IMPLICIT_LOGIN"}
SECTION_2_ASPECTS = {"globalTags", "glossaryTerms", "domains", "ownership", "structuredProperties", "deprecation",
                     "schemaMetadata", "editableSchemaMetadata", "datasetProperties", "editableDatasetProperties",
                     "status"}
KEY_ASPECTS = {"datasetKey", "chartKey", "dashboardKey", "dataFlowKey", "dataJobKey", "glossaryTermKey",
               "domainKey", "tagKey", "corpUserKey", "corpGroupKey"}
# Maps of free keys (DataHub's `map<string, string>` fields): their keys are data, not structure.
FREE_MAPS = {"customProperties", "ownerTypes"}
# SchemaField members DataHub has that the fixture's schemas happen not to use, and the other type unions.
SCHEMA_FIELD_EXTRAS = {
    ".fields[].description",
    ".fields[].globalTags", ".fields[].globalTags.tags", ".fields[].globalTags.tags[].tag",
    ".fields[].glossaryTerms", ".fields[].glossaryTerms.terms", ".fields[].glossaryTerms.terms[].urn",
    ".fields[].glossaryTerms.terms[].actor", ".fields[].glossaryTerms.auditStamp",
    ".fields[].glossaryTerms.auditStamp.time", ".fields[].glossaryTerms.auditStamp.actor",
    ".fields[].type.type.com.linkedin.schema.ArrayType", ".fields[].type.type.com.linkedin.schema.ArrayType.nestedType",
    ".fields[].type.type.com.linkedin.schema.MapType", ".fields[].type.type.com.linkedin.schema.MapType.keyType",
    ".fields[].type.type.com.linkedin.schema.MapType.valueType", ".fields[].type.type.com.linkedin.schema.RecordType",
}


def shape(value: Any, path: str = "") -> set[str]:
    """Every key path of a JSON value (`.a.b`, lists as `[]`), not descending into free maps."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(f"{path}.{key}")
            if key not in FREE_MAPS:
                out |= shape(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            out |= shape(item, f"{path}[]")
    return out


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def fixture_records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def fixture_shapes() -> dict[str, set[str]]:
    shapes: dict[str, set[str]] = defaultdict(set)
    for record in fixture_records("history-small.mcl.jsonl"):
        for key in ("aspect", "previousAspectValue"):
            if key in record:
                shapes[record["aspectName"]] |= shape(json.loads(record[key]["value"]))
    return shapes


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> GeneratorManifest:
    """One mid-sized history with every input format and a visible share of malformed lines."""
    return generate_history(
        tmp_path_factory.mktemp("history"), entities=400, seed=11, usage_events=3000, action_requests=120,
        malformed_share=0.01, mcp_share=0.08, file_sink_share=0.05, part_size=4000, workers=2,
    )


def records_of(manifest: GeneratorManifest, kind: str, fmt: str = "mcl") -> list[dict[str, Any]]:
    """Parse every line the manifest lists as well-formed, in file order."""
    out = []
    for entry in manifest.files_of(kind):
        if entry.format != fmt:
            continue
        path = manifest.path_of(entry)
        if fmt == "file-sink":
            out.extend(json.loads(path.read_text()))
            continue
        bad = {m.line for m in entry.malformed}
        out.extend(json.loads(line) for n, line in enumerate(read_lines(path), 1) if n not in bad)
    return out


@pytest.fixture(scope="module")
def aspects(history: GeneratorManifest) -> list[dict[str, Any]]:
    return records_of(history, "aspects")


def versions_by_key(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """UPSERT records per (urn, aspect), in version order; of a version seen again, its latest observation."""
    by_key: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for record in records:
        if record["changeType"] == "UPSERT":
            versions = by_key[(record["entityUrn"], record["aspectName"])]
            version = int(record["systemMetadata"]["version"])
            seen = versions.get(version)
            if seen is None or seen["systemMetadata"]["lastObserved"] < record["systemMetadata"]["lastObserved"]:
                versions[version] = record
    return {key: [versions[v] for v in sorted(versions)] for key, versions in by_key.items()}


def value(record: dict[str, Any]) -> Any:
    return json.loads(record["aspect"]["value"])


# ---------------------------------------------------------------------------------------------


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes_whatever_the_workers_and_another_seed_differs(tmp_path: Path):
    options = dict(entities=120, usage_events=800, action_requests=20, malformed_share=0.02, mcp_share=0.1,
                   file_sink_share=0.1, part_size=600)
    generate_history(tmp_path / "a", seed=3, workers=1, **options)
    generate_history(tmp_path / "b", seed=3, workers=2, **options)
    generate_history(tmp_path / "c", seed=4, workers=2, **options)
    first, second, third = (tree_bytes(tmp_path / name) for name in "abc")
    assert len([p for p in first if p.startswith("aspects/")]) > 2  # several parts, written by two processes
    assert first == second
    common = first.keys() & third.keys()
    assert "aspects/part-00000.mcl.jsonl" in common and "usage/part-00000.jsonl" in common
    assert all(first[p] != third[p] for p in common)


def test_rerun_into_the_same_folder_replaces_the_earlier_run_and_foreign_folders_are_refused(tmp_path: Path):
    out = tmp_path / "out"
    generate_history(out, entities=30, seed=1, batches=2)
    before = tree_bytes(out)
    generate_history(out, entities=30, seed=1, batches=2)
    assert tree_bytes(out) == before
    generate_history(out, entities=30, seed=1)
    assert not any(p.startswith("batch-") for p in tree_bytes(out))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="out_dir"):
        generate_history(foreign, entities=30, seed=1)
    generate_history(foreign, entities=30, seed=1, overwrite=True)
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"entities": 5}, "entities: 5"),
        ({"malformed_share": 1.5}, "malformed_share: 1.5"),
        ({"batches": 0}, "batches: 0"),
        ({"mcp_share": 0.7, "file_sink_share": 0.5}, "mcp_share + file_sink_share"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, arguments: dict[str, Any], named: str):
    with pytest.raises(InputError, match=re.escape(named)):
        generate_history(tmp_path, **{"entities": 30, "seed": 1, **arguments})


def test_well_formed_lines_have_the_fixture_key_structure(history, aspects, fixture_shapes):
    fixture = fixture_records("history-small.mcl.jsonl")
    top_keys = {(r["changeType"], "previousAspectValue" in r): set(r) for r in fixture}
    system_keys = {frozenset(r["systemMetadata"]) for r in fixture}
    assert aspects
    for record in aspects:
        assert set(record) == top_keys[(record["changeType"], "previousAspectValue" in record)]
        assert frozenset(record["systemMetadata"]) in system_keys
        assert set(record["created"]) == {"time", "actor"} and isinstance(record["created"]["time"], int)
        assert record["systemMetadata"]["version"].isdigit()
        if "aspect" in record:
            assert set(record["aspect"]) == {"value", "contentType"}
        if "previousAspectValue" in record:
            json.loads(record["previousAspectValue"]["value"])
        if record["aspectName"] in fixture_shapes and "aspect" in record:
            allowed = fixture_shapes[record["aspectName"]] | (
                SCHEMA_FIELD_EXTRAS if record["aspectName"] == "schemaMetadata" else set())
            extra = shape(value(record)) - allowed
            assert not extra, (record["aspectName"], extra)
    assert set(fixture_shapes) <= {r["aspectName"] for r in aspects}


def test_mcp_and_file_sink_records_have_the_fixture_shapes(history):
    mcp_fixture = fixture_records("history-small.mcp.jsonl")
    sink_fixture = json.loads((FIXTURES / "history-small.file-sink.json").read_text())
    mcp_keys = {frozenset(r) for r in mcp_fixture}
    mcp_system = {frozenset(r["systemMetadata"]) for r in mcp_fixture}
    mcp = records_of(history, "aspects", "mcp")
    sink = records_of(history, "aspects", "file-sink")
    assert mcp and sink
    for record in mcp:
        assert frozenset(record) in mcp_keys and frozenset(record["systemMetadata"]) in mcp_system
    for record in sink:
        assert set(record) == set(sink_fixture[0]) and set(record["aspect"]) == {"json"}
        assert set(record["systemMetadata"]) == set(sink_fixture[0]["systemMetadata"])
        assert record["changeType"] == "UPSERT"  # DataHub's file sink carries no DELETE records
    # The file-sink file is DataHub's layout: an array of 4-space indented objects.
    entry = next(f for f in history.files if f.format == "file-sink")
    text = history.path_of(entry).read_text()
    assert text.startswith("[\n{\n    \"entityType\": ") and text.endswith("\n}\n]")
    # An entity's history is in one format only.
    urns = [{r["entityUrn"] for r in records_of(history, "aspects", fmt)} for fmt in ("mcl", "mcp", "file-sink")]
    assert not (urns[0] & urns[1]) and not (urns[0] & urns[2]) and not (urns[1] & urns[2])


def test_every_section_2_aspect_and_every_entity_type_appears(history, aspects):
    names = {r["aspectName"] for r in aspects}
    assert SECTION_2_ASPECTS | KEY_ASPECTS <= names
    assert {r["entityType"] for r in aspects} == {
        "dataset", "chart", "dashboard", "dataFlow", "dataJob", "glossaryTerm", "domain", "tag", "corpuser",
        "corpGroup"}
    assert history.entities["dataset"] > history.entities["chart"] > 0


def test_versions_count_up_per_aspect_like_datahub(aspects):
    observations: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in aspects:
        if record["changeType"] == "UPSERT":
            key = (record["entityUrn"], record["aspectName"])
            observations[key][int(record["systemMetadata"]["version"])].append(record)
    reobserved = 0
    for key, by_version in observations.items():
        assert sorted(by_version) == list(range(1, len(by_version) + 1)), key
        for version in by_version:
            # Duplicates are the same line; other observations of a version are re-observations (same value).
            by_version[version].sort(key=lambda r: r["systemMetadata"]["lastObserved"])
            first, *again = by_version[version]
            for later in again:
                assert later["aspect"] == first["aspect"]
                if later["systemMetadata"] != first["systemMetadata"]:
                    assert later["previousAspectValue"] == first["aspect"]
                    reobserved += 1
        assert "previousAspectValue" not in by_version[1][0]
        for version in range(2, len(by_version) + 1):
            older, newer = by_version[version - 1][-1], by_version[version][0]
            assert newer["previousAspectValue"]["value"] == older["aspect"]["value"]
            assert newer["previousSystemMetadata"] == older["systemMetadata"]
            assert newer["systemMetadata"]["lastRunId"] == older["systemMetadata"]["runId"]
            assert newer["created"]["time"] > older["created"]["time"]
    assert reobserved
    for record in aspects:
        if record["changeType"] == "DELETE":
            last = observations[(record["entityUrn"], record["aspectName"])]
            last = last[max(last)][-1]
            # DataHub repeats the version of the value it deletes.
            assert record["systemMetadata"]["version"] == last["systemMetadata"]["version"]
            assert record["previousAspectValue"] == last["aspect"]
            assert record["previousSystemMetadata"] == last["systemMetadata"]


def test_hard_deletes_remove_every_aspect_then_the_key(aspects):
    deletes: dict[str, list[str]] = defaultdict(list)
    for record in aspects:
        if record["changeType"] == "DELETE":
            deletes[record["entityUrn"]].append(record["aspectName"])
    live = defaultdict(set)
    for (urn, aspect) in versions_by_key(aspects):
        live[urn].add(aspect)
    assert len(deletes) >= 3
    for urn, names in deletes.items():
        assert names[-1].endswith("Key") and names[-1] in KEY_ASPECTS
        assert set(names) == live[urn] and len(names) == len(set(names))


def test_the_history_holds_every_kind_of_edit(aspects):
    kinds: Counter[str] = Counter()
    lines = Counter(json.dumps(r, sort_keys=True) for r in aspects)
    kinds["duplicate"] = sum(1 for n in lines.values() if n > 1)
    newest: dict[tuple[str, str], int] = {}
    first_seen: set[tuple[str, str, int]] = set()
    observed: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    for record in aspects:
        if record["changeType"] != "UPSERT":
            continue
        key, version = (record["entityUrn"], record["aspectName"]), int(record["systemMetadata"]["version"])
        observed[(*key, version)].add(record["systemMetadata"]["lastObserved"])
        if (*key, version) in first_seen:
            continue  # a replayed line, not a late one
        first_seen.add((*key, version))
        if version < newest.get(key, 0):
            kinds["out_of_order"] += 1
        newest[key] = max(version, newest.get(key, 0))
    # Ingestion saw the same value again: the same version observed at another time.
    kinds["reobserve"] = sum(1 for times in observed.values() if len(times) > 1)
    for (urn, aspect), versions in versions_by_key(aspects).items():
        for older, newer in zip(versions, versions[1:]):
            before, after = value(older), value(newer)
            if aspect == "ownership":
                old_types = {o["owner"]: o["type"] for o in before["owners"]}
                new_types = {o["owner"]: o["type"] for o in after["owners"]}
                if any(o in old_types and old_types[o] != t for o, t in new_types.items()):
                    kinds["owner_type_change"] += 1
                if sorted(map(str, before["owners"])) == sorted(map(str, after["owners"])):
                    kinds["noop"] += 1
            if aspect == "schemaMetadata":
                old_fields = {f["fieldPath"]: f for f in before["fields"]}
                new_fields = {f["fieldPath"]: f for f in after["fields"]}
                kinds["field_add"] += bool(new_fields.keys() - old_fields.keys())
                kinds["field_remove"] += bool(old_fields.keys() - new_fields.keys())
                kinds["field_retype"] += any(old_fields[p]["nativeDataType"] != f["nativeDataType"]
                                             for p, f in new_fields.items() if p in old_fields)
                kinds["schema_field_tag"] += any("globalTags" in f for f in after["fields"])
                kinds["schema_field_term"] += any("glossaryTerms" in f for f in after["fields"])
                kinds["schema_field_description"] += any("description" in f for f in after["fields"])
                if old_fields == new_fields and before["hash"] != after["hash"]:
                    kinds["noop"] += 1
            if aspect == "editableSchemaMetadata":
                for info in after["editableSchemaFieldInfo"]:
                    kinds["editable_field_tag"] += "globalTags" in info
                    kinds["editable_field_term"] += "glossaryTerms" in info
                    kinds["editable_field_description"] += "description" in info
            if aspect == "status" and before["removed"] and not after["removed"]:
                kinds["restore"] += 1
            if aspect == "status" and not before["removed"] and after["removed"]:
                kinds["soft_delete"] += 1
            if aspect == "deprecation" and before["deprecated"] != after["deprecated"]:
                kinds["deprecation_flip"] += 1
            if aspect == "domains" and before["domains"] and after["domains"] and before != after:
                kinds["domain_change"] += 1
            if aspect in ("editableDatasetProperties", "datasetProperties") and before.get("description") and \
                    not after.get("description"):
                kinds["description_emptied"] += 1
            if aspect == "globalTags":
                old, new = {t["tag"] for t in before["tags"]}, {t["tag"] for t in after["tags"]}
                kinds["tag_add"] += bool(new - old)
                kinds["tag_remove"] += bool(old - new)
                kinds["noop"] += old == new
            if aspect == "glossaryTerms":
                old, new = {t["urn"] for t in before["terms"]}, {t["urn"] for t in after["terms"]}
                kinds["term_add"] += bool(new - old)
                kinds["term_remove"] += bool(old - new)
            if aspect == "structuredProperties":
                old = {p["propertyUrn"]: p["values"] for p in before["properties"]}
                new = {p["propertyUrn"]: p["values"] for p in after["properties"]}
                kinds["property_add"] += bool(new.keys() - old.keys())
                kinds["property_remove"] += bool(old.keys() - new.keys())
                kinds["property_modify"] += any(old[p] != v for p, v in new.items() if p in old)
    for record in aspects:
        if record["aspectName"] == "deprecation" and "aspect" in record and value(record)["deprecated"]:
            assert value(record)["note"] and value(record)["decommissionTime"] > record["created"]["time"]
    expected = {"duplicate", "out_of_order", "reobserve", "owner_type_change", "noop", "field_add", "field_remove",
                "field_retype", "schema_field_tag", "schema_field_term", "schema_field_description",
                "editable_field_tag", "editable_field_term", "editable_field_description", "restore", "soft_delete",
                "deprecation_flip", "domain_change", "description_emptied", "tag_add", "tag_remove", "term_add",
                "term_remove", "property_add", "property_remove", "property_modify"}
    assert {k for k in expected if kinds[k] > 0} == expected, kinds


def test_structured_property_values_use_datahub_unions(aspects):
    unions = Counter()
    for record in aspects:
        if record["aspectName"] == "structuredProperties" and "aspect" in record:
            for prop in value(record)["properties"]:
                for item in prop["values"]:
                    assert len(item) == 1
                    (kind, raw), = item.items()
                    unions[kind] += 1
                    assert isinstance(raw, str if kind == "string" else float)
    assert unions["string"] and unions["double"]


def classify_mcl(line: str) -> tuple[str, str] | None:
    """The field a landing would reject this MCL/MCP line for, or None for a good line."""
    try:
        record = json.loads(line)
    except ValueError:
        return ("json", "malformed_json")
    for name in ("entityUrn", "aspectName", "changeType"):
        if name not in record:
            return (name, "missing")
    if not URN.match(record["entityUrn"]):
        return ("entityUrn", "bad_urn")
    if "aspect" in record:
        try:
            json.loads(record["aspect"]["value"])
        except ValueError:
            return ("aspect.value", "not_json")
    if "created" in record and not isinstance(record["created"]["time"], int):
        return ("created.time", "not_epoch_ms")
    if not isinstance(record["systemMetadata"]["lastObserved"], int):
        return ("systemMetadata.lastObserved", "not_epoch_ms")
    return None


def classify_usage(line: str) -> tuple[str, str] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return ("json", "malformed_json")
    for name in ("type", "actorUrn", "timestamp"):
        if name not in record:
            return (name, "missing")
    if record["type"] not in SPEC_USAGE_TYPES:
        return ("type", "unknown_type")
    if not isinstance(record["timestamp"], int):
        return ("timestamp", "not_epoch_ms")
    return None


def test_malformed_lines_are_exactly_those_in_the_manifest(history):
    reasons = Counter()
    for entry in history.files:
        if entry.format == "file-sink":
            assert not entry.malformed
            continue
        classify = classify_usage if entry.kind == "usage" else classify_mcl
        found = {n: problem for n, line in enumerate(read_lines(history.path_of(entry)), 1)
                 if (problem := classify(line)) is not None}
        assert found == {m.line: (m.field, m.reason) for m in entry.malformed}, entry.path
        reasons.update(f"{entry.kind}:{m.field}:{m.reason}" for m in entry.malformed)
    for expected in ("aspects:json:malformed_json", "aspects:entityUrn:missing", "aspects:aspectName:missing",
                     "aspects:changeType:missing", "aspects:entityUrn:bad_urn", "aspects:aspect.value:not_json",
                     "aspects:created.time:not_epoch_ms", "usage:actorUrn:missing", "usage:type:missing",
                     "usage:timestamp:missing", "usage:type:unknown_type", "usage:timestamp:not_epoch_ms"):
        assert reasons[expected] > 0, expected
    assert any(reason.startswith("action_requests:") for reason in reasons)


def test_manifest_counts_match_the_files(history, tmp_path: Path):
    start, end = history.parameters["start_ms"], history.parameters["end_ms"]
    for entry in history.files:
        path = history.path_of(entry)
        assert path.stat().st_size == entry.bytes
        assert start <= entry.first_time_ms <= entry.last_time_ms < end
        if entry.format == "file-sink":
            assert len(json.loads(path.read_text())) == entry.lines == entry.records == entry.aspect_versions
            continue
        lines = read_lines(path)
        assert len(lines) == entry.lines == entry.records + len(entry.malformed)
        if entry.kind == "aspects":
            assert entry.aspect_versions == entry.records
            good = [json.loads(x) for n, x in enumerate(lines, 1) if n not in {m.line for m in entry.malformed}]
            assert dict(Counter(r["aspectName"] for r in good)) == entry.aspects
            assert entry.deletes == sum(r["changeType"] == "DELETE" for r in good)
            assert entry.first_time_ms == min(r["created"].get("time", 0) if "created" in r else
                                              r["systemMetadata"]["lastObserved"] for r in good)
        if entry.kind == "usage":
            assert entry.usage_events == entry.records
    totals = history.totals
    assert totals["usage_events"] == 3000 and totals["action_requests"] == 120
    assert GeneratorManifest.load(history.out_dir).to_json() == history.to_json()
    assert json.loads((history.out_dir / "manifest.json").read_text())["totals"] == totals


def test_usage_events_cover_every_type_with_realistic_fields(history, aspects):
    events = records_of(history, "usage", "usage")
    users = {r["entityUrn"] for r in aspects if r["aspectName"] == "corpUserKey"}
    keys = {"type", "actorUrn", "timestamp", "entityUrn", "entityType", "aspectName", "eventSource", "sourceIP",
            "userAgent", "traceId", "loginSource", "loginDenialReason", "usageSource"}
    assert {e["type"] for e in events} == SPEC_USAGE_TYPES == set(USAGE_EVENT_TYPES)
    assert len(events) == 3000
    start, end = history.parameters["start_ms"], history.parameters["end_ms"]
    assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
    spellings = set()
    for event in events:
        assert set(event) <= keys
        assert event["actorUrn"] in users
        assert start <= event["timestamp"] < end
        assert event["eventSource"] in {"RESTLI", "OPENAPI", "GRAPHQL", "SSO_SCIM"}
        if event["type"] in ("LogInEvent", "FailedLogInEvent"):
            source = event["loginSource"]
            spellings.add("upper" if source.isupper() else "camel")
            assert (source if source.isupper() else re.sub(r"([A-Z])", r"_\1", source).upper()) in LOGIN_SOURCES
            assert ("loginDenialReason" in event) == (event["type"] == "FailedLogInEvent")
            assert "entityUrn" not in event
        else:
            assert URN.match(event["entityUrn"]) and event["entityType"] == event["entityUrn"].split(":")[2]
            assert event["aspectName"]
    assert spellings == {"upper", "camel"}
    ips = {e["sourceIP"] for e in events}
    assert any(":" in ip for ip in ips) and any(re.fullmatch(r"\d+\.\d+\.\d+\.\d+", ip) for ip in ips)
    assert any(e["userAgent"].startswith("Mozilla/5.0") for e in events)
    assert any(re.fullmatch(r"[0-9a-f]{32}", e.get("traceId", "")) for e in events)


def test_action_requests_cover_every_type_with_datahub_param_nesting(history):
    requests = records_of(history, "action_requests")
    assert {r["entityType"] for r in requests} == {"actionRequest"}
    infos = versions_by_key([r for r in requests if r["aspectName"] == "actionRequestInfo"])
    assert len(infos) == 120
    nesting = {
        "TAG_ASSOCIATION": ("tagProposal", "tag"),
        "TERM_ASSOCIATION": ("glossaryTermProposal", "glossaryTerm"),
        "DOMAIN_ASSOCIATION": ("domainProposal", "domains"),
        "OWNER_ASSOCIATION": ("ownerProposal", "owners"),
        "CREATE_GLOSSARY_TERM": ("createGlossaryTermProposal", "name"),
        "UPDATE_DESCRIPTION": ("updateDescriptionProposal", "description"),
        "STRUCTURED_PROPERTY_ASSOCIATION": ("structuredPropertyProposal", "structuredPropertyValues"),
    }
    seen = set()
    for versions in infos.values():
        info = value(versions[0])
        assert {"type", "resourceType", "params", "created", "createdBy"} <= set(info)
        outer, inner = nesting[info["type"]]
        assert list(info["params"]) == [outer] and inner in info["params"][outer]
        seen.add(info["type"])
        if info["type"] == "OWNER_ASSOCIATION":
            assert set(info["params"][outer]["owners"][0]) == {"owner", "type", "typeUrn"}
        if info["type"] == "CREATE_GLOSSARY_TERM":
            assert info["params"][outer]["parentNode"].startswith("urn:li:glossaryNode:") and "resource" not in info
        else:
            assert URN.match(info["resource"]) and info["resource"].split(":")[2] == info["resourceType"]
        if info["type"] == "DOMAIN_ASSOCIATION":
            assert isinstance(info["params"][outer]["domains"], list)
        if info["type"] == "STRUCTURED_PROPERTY_ASSOCIATION":
            assert {"propertyUrn", "values"} == set(info["params"][outer]["structuredPropertyValues"][0])
        assert info["created"] == versions[0]["created"]["time"]
    assert seen == set(ACTION_REQUEST_TYPES)
    assert any(len(v) > 1 for v in infos.values())
    statuses = [value(r) for r in requests if r["aspectName"] == "actionRequestStatus"]
    assert {s["status"] for s in statuses} == {"PENDING", "COMPLETED"}
    assert {s["result"] for s in statuses if "result" in s} == {"ACCEPTED", "REJECTED"}


def test_aspect_versions_split_into_equal_time_ordered_batches_that_continue_the_history(tmp_path: Path):
    manifest = generate_aspect_versions(tmp_path, versions=6000, seed=5, batches=3, part_size=2500)
    assert 4800 <= manifest.totals["aspect_versions"] <= 7200
    assert manifest.totals["usage_events"] == 0 and manifest.totals["malformed"] == 0
    sizes = [sum(f.records for f in manifest.files_of("aspects", b)) for b in range(3)]
    assert max(sizes) - min(sizes) <= 3 * len(manifest.files_of("aspects", 0))
    assert all(f.path.startswith(f"batch-{f.batch:05d}/aspects/part-") for f in manifest.files)
    first_batch: dict[tuple[str, str], int] = {}
    continued = 0
    for batch in range(3):
        records = [json.loads(line) for f in manifest.files_of("aspects", batch)
                   for line in read_lines(manifest.path_of(f))]
        for r in records:
            key = (r["entityUrn"], r["aspectName"])
            if batch == 0:
                first_batch.setdefault(key, int(r["systemMetadata"]["version"]))
            elif key in first_batch and int(r["systemMetadata"]["version"]) > first_batch[key]:
                continued += 1
        if batch:
            assert min(f.first_time_ms for f in manifest.files_of("aspects", batch)) > min(
                f.first_time_ms for f in manifest.files_of("aspects", batch - 1))
    assert continued > 100


def test_usage_events_alone_use_the_given_actors_and_window(tmp_path: Path):
    actors = ["urn:li:corpuser:ops1", "urn:li:corpuser:ops2", "urn:li:corpuser:datahub"]
    manifest = generate_usage_events(tmp_path, events=500, seed=2, start_ms=1_710_000_000_000,
                                     end_ms=1_710_086_400_000, actors=actors, batches=2, gzip=True)
    events = [json.loads(line) for f in manifest.files for line in read_lines(manifest.path_of(f))]
    assert len(events) == 500 and manifest.totals["usage_events"] == 500
    assert {e["actorUrn"] for e in events} <= set(actors)
    assert all(1_710_000_000_000 <= e["timestamp"] < 1_710_086_400_000 for e in events)
    assert [f.path for f in manifest.files] == ["batch-00000/usage/part-00000.jsonl.gz",
                                                "batch-00001/usage/part-00001.jsonl.gz"]
    with pytest.raises(InputError, match="actors"):
        generate_usage_events(tmp_path / "x", events=5, seed=2, start_ms=1, end_ms=2, actors=["jdoe"])


def test_gzip_output_holds_the_same_lines(tmp_path: Path):
    plain = generate_history(tmp_path / "plain", entities=40, seed=9)
    zipped = generate_history(tmp_path / "zipped", entities=40, seed=9, gzip=True)
    for a, b in zip(plain.files, zipped.files):
        assert b.path == a.path + ".gz"
        assert read_lines(zipped.path_of(b)) == read_lines(plain.path_of(a))
    again = generate_history(tmp_path / "again", entities=40, seed=9, gzip=True)
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "zipped")
    assert again.totals == zipped.totals


def test_cli_generate_runs_as_a_real_process(tmp_path: Path):
    out = tmp_path / "landing"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    result = subprocess.run([LAKEHOUSE, "--home", str(tmp_path / "home"), "generate", "--out", str(out),
                             "--entities", "20", "--seed", "1", "--start", "2024-03-01T00:00:00Z", "--days", "3"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    manifest = GeneratorManifest.load(out)
    assert manifest.parameters["start_ms"] == 1_709_251_200_000 and manifest.parameters["entities"] == 20
    assert (out / "aspects" / "part-00000.mcl.jsonl").is_file() and (out / "usage" / "part-00000.jsonl").is_file()
    assert (out / "action_requests" / "part-00000.mcl.jsonl").is_file()
    assert "aspect versions" in result.stdout
    bad = subprocess.run([LAKEHOUSE, "generate", "--out", str(tmp_path / "bad"), "--entities", "3", "--seed", "1"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "entities: 3" in bad.stderr and "Traceback" not in bad.stderr
