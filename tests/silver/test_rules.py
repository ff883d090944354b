"""BEHAVIOR.md section 2, rule by rule, on hand-made DataHub snapshot histories (one entity per rule).

All histories are refined together as one batch (once per engine); each test looks at its entity's
events. Expected events are written by hand: (source version, category, operation, entity urn,
modifier, parameters).
"""

from __future__ import annotations

import json

import pytest

from conf.errors import InputError
from gold.ece_documents import ece_document
from silver.events.owner import to_owner_events
from silver.sequencing import to_pairs, to_sequenced_batch, to_skipped_snapshots
from silver.state import to_empty_state
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows
from tests.silver.events_helpers import change_event_rows

T = 1700000000000
ALICE = "urn:li:corpuser:alice"
TECH = "urn:li:ownershipType:__system__technical_owner"
STEWARD = "urn:li:ownershipType:__system__data_steward"


def ds(name: str) -> str:
    return f"urn:li:dataset:(urn:li:dataPlatform:hive,{name},PROD)"


def field_urn(dataset: str, path: str) -> str:
    return f"urn:li:schemaField:({dataset},{path})"


def rec(urn, aspect, value, version, change_type="UPSERT", time=None, actor=ALICE):
    return mcl(urn, aspect, value, version=version, time=time or T + (version or 0), actor=actor, change_type=change_type)


def field(path, native="VARCHAR(64)", nullable=True, description=None, tags=(), terms=()):
    f = {"fieldPath": path, "nullable": nullable, "type": {"type": {"com.linkedin.schema.StringType": {}}},
         "nativeDataType": native, "recursive": False, "isPartOfKey": False}
    if description is not None:
        f["description"] = description
    if tags:
        f["globalTags"] = {"tags": [{"tag": t} for t in tags]}
    if terms:
        f["glossaryTerms"] = {"terms": [{"urn": t} for t in terms], "auditStamp": {"time": T, "actor": ALICE}}
    return f


def schema(*fields, hash_="h1", modified=T):
    return {"schemaName": "s", "platform": "urn:li:dataPlatform:hive", "version": 0, "hash": hash_,
            "lastModified": {"time": modified, "actor": ALICE},
            "platformSchema": {"com.linkedin.schema.OtherSchema": {"rawSchema": ""}}, "fields": list(fields)}


def owners(*pairs, modified=T):
    return {"owners": [{"owner": o, "type": t, **({"typeUrn": u} if u else {})} for o, t, u in pairs],
            "ownerTypes": {}, "lastModified": {"time": modified, "actor": ALICE}}


def tags(*urns):
    return {"tags": [{"tag": u} for u in urns]}


OWNER_TYPE = ds("owner_type")
DOMAIN = ds("domain_change")
SCHEMA = ds("schema_change")
FIELD_TAGS = ds("field_tags")
NOOP = ds("noop")
DUPS = ds("dups")
OOO = ds("out_of_order")
HARD = ds("hard_delete")
SOFT = ds("soft_delete")
DOCS = ds("docs")
DEPRECATED = ds("deprecated")
SP = ds("structured")
MCP = ds("mcp")
READD = ds("readd")
TERM = "urn:li:glossaryTerm:Finance.Revenue"
REQUEST = "urn:li:actionRequest:later"
REPEAT = ds("repeated_items")
SP_SET = ds("structured_set")
TWO_PROPERTIES = "urn:li:actionRequest:two-properties"
SEPARATORS = ds("line_separators")
NOTE = "urn:li:structuredProperty:note"
# Characters JSON writers leave unescaped and a regex `.` does not match on every engine.
ODD_TEXT = "a\u2028b\u2029c\u0085d"

DUP_RECORD = rec(DUPS, "globalTags", tags("urn:li:tag:A"), 1)

HISTORY = [
    rec(OWNER_TYPE, "ownership", owners((ALICE, "TECHNICAL_OWNER", TECH)), 1),
    rec(OWNER_TYPE, "ownership", owners((ALICE, "DATA_STEWARD", STEWARD)), 2),
    rec(DOMAIN, "domains", {"domains": ["urn:li:domain:a"]}, 1),
    rec(DOMAIN, "domains", {"domains": ["urn:li:domain:b"]}, 2),
    rec(DOMAIN, "domains", {"domains": ["urn:li:domain:c", "urn:li:domain:b"]}, 3),
    rec(SCHEMA, "schemaMetadata", schema(field("id", "INT", nullable=False), field("name"), field("old_col", "TEXT")), 1),
    rec(SCHEMA, "schemaMetadata", schema(field("name"), field("id", "BIGINT", nullable=True), field("new_col", "TEXT")), 2),
    rec(FIELD_TAGS, "editableSchemaMetadata", {"editableSchemaFieldInfo": [
        {"fieldPath": "email", "globalTags": tags("urn:li:tag:PII"),
         "glossaryTerms": {"terms": [{"urn": "urn:li:glossaryTerm:Email"}]}}]}, 1),
    rec(FIELD_TAGS, "editableSchemaMetadata", {"editableSchemaFieldInfo": [
        {"fieldPath": "email", "globalTags": tags("urn:li:tag:PII", "urn:li:tag:Sensitive"),
         "glossaryTerms": {"terms": []}}]}, 2),
    rec(FIELD_TAGS, "schemaMetadata", schema(field("id", tags=["urn:li:tag:Key"], terms=["urn:li:glossaryTerm:Id"])), 1),
    rec(NOOP, "globalTags", tags("urn:li:tag:A", "urn:li:tag:B"), 1),
    rec(NOOP, "globalTags", tags("urn:li:tag:B", "urn:li:tag:A"), 2),
    rec(NOOP, "ownership", owners(("urn:li:corpuser:x", "TECHNICAL_OWNER", None)), 1),
    rec(NOOP, "ownership", owners(("urn:li:corpuser:x", "TECHNICAL_OWNER", None), modified=T + 99), 2),
    rec(NOOP, "schemaMetadata", schema(field("a"), field("b")), 1),
    rec(NOOP, "schemaMetadata", schema(field("b"), field("a"), hash_="h2", modified=T + 99), 2),
    rec(NOOP, "datasetProperties", {"description": "d", "customProperties": {}, "lastModified": {"time": T}}, 1),
    rec(NOOP, "datasetProperties", {"description": "d", "customProperties": {"k": "v"}, "lastModified": {"time": T + 9}}, 2),
    rec(NOOP, "deprecation", {"deprecated": True, "note": "n1", "actor": ALICE}, 1),
    rec(NOOP, "deprecation", {"deprecated": True, "note": "n2", "actor": ALICE}, 2),
    rec(NOOP, "status", {"removed": False}, 1),
    rec(NOOP, "status", {"removed": False}, 2),
    DUP_RECORD,
    DUP_RECORD,
    rec(OOO, "globalTags", tags("urn:li:tag:A", "urn:li:tag:C"), 3),
    rec(OOO, "globalTags", tags("urn:li:tag:A"), 1),
    rec(OOO, "globalTags", tags("urn:li:tag:A", "urn:li:tag:B"), 2),
    rec(HARD, "datasetKey", {"platform": "urn:li:dataPlatform:hive", "name": "hard_delete", "origin": "PROD"}, 1),
    rec(HARD, "globalTags", tags("urn:li:tag:A"), 1),
    rec(HARD, "status", {"removed": True}, 1),
    rec(HARD, "deprecation", {"deprecated": True, "note": "", "actor": ALICE}, 1),
    rec(HARD, "globalTags", None, 1, "DELETE", time=T + 50),
    rec(HARD, "status", None, 1, "DELETE", time=T + 51),
    rec(HARD, "deprecation", None, 1, "DELETE", time=T + 52),
    rec(HARD, "datasetKey", None, 1, "DELETE", time=T + 53),
    rec(SOFT, "status", {"removed": False}, 1),
    rec(SOFT, "status", {"removed": True}, 2),
    rec(SOFT, "status", {"removed": True}, 3),
    rec(SOFT, "status", {"removed": False}, 4),
    rec(DOCS, "editableDatasetProperties", {"description": ""}, 1),
    rec(DOCS, "editableDatasetProperties", {"description": "Curated"}, 2),
    rec(DOCS, "editableDatasetProperties", {"description": "Curated v2"}, 3),
    rec(DOCS, "editableDatasetProperties", {"created": {"time": T}}, 4),
    rec(DOCS, "schemaMetadata", schema(field("a", description="A col"), field("b", description="  ")), 1),
    rec(TERM, "glossaryTermInfo", {"name": "Revenue", "definition": "Money in", "termSource": "INTERNAL"}, 1),
    rec(DEPRECATED, "deprecation", {"deprecated": True, "note": "Replaced", "decommissionTime": 1703104308004, "actor": ALICE}, 1),
    rec(DEPRECATED, "deprecation", {"deprecated": False, "note": "", "actor": ALICE}, 2),
    rec(SP, "structuredProperties", {"properties": [
        {"propertyUrn": "urn:li:structuredProperty:sla", "values": [{"double": 730.0}]},
        {"propertyUrn": "urn:li:structuredProperty:cert", "values": [{"string": "urn:li:corpuser:x"}]}]}, 1),
    rec(SP, "structuredProperties", {"properties": [
        {"propertyUrn": "urn:li:structuredProperty:sla", "values": [{"double": 365.5}]},
        {"propertyUrn": "urn:li:structuredProperty:cert", "values": [{"string": "urn:li:corpuser:x"}]}]}, 2),
    rec(MCP, "globalTags", tags("urn:li:tag:A", "urn:li:tag:B"), None, time=T + 2),
    rec(MCP, "globalTags", tags("urn:li:tag:A"), None, time=T + 1),
    rec(READD, "globalTags", tags("urn:li:tag:A"), 1),
    rec(READD, "globalTags", None, 1, "DELETE", time=T + 10),
    rec(READD, "globalTags", tags("urn:li:tag:A"), 2, time=T + 20),
    rec(REQUEST, "actionRequestInfo", {"type": "TAG_ASSOCIATION", "resource": DOMAIN, "resourceType": "dataset",
                                        "params": {"tagProposal": {"tag": "urn:li:tag:A"}}}, 1),
    rec(REQUEST, "actionRequestInfo", {"type": "TAG_ASSOCIATION", "resource": DOMAIN, "resourceType": "dataset",
                                        "params": {"tagProposal": {"tag": "urn:li:tag:B"}}}, 2),
    rec(REQUEST, "actionRequestStatus", {"status": "COMPLETE", "result": "ACCEPTED"}, 1),
    # DataHub writes the key aspect of every new entity, action requests included.
    rec(REQUEST, "actionRequestKey", {"id": "later"}, 1),
    rec(REPEAT, "globalTags", tags("urn:li:tag:A", "urn:li:tag:A"), 1),
    rec(REPEAT, "ownership", owners(("urn:li:corpuser:x", "TECHNICAL_OWNER", None), ("urn:li:corpuser:x", "TECHNICAL_OWNER", None)), 1),
    rec(REPEAT, "schemaMetadata", schema(field("a"), field("a")), 1),
    rec(TWO_PROPERTIES, "actionRequestInfo", {
        "type": "STRUCTURED_PROPERTY_ASSOCIATION", "resource": DOMAIN, "resourceType": "dataset",
        "params": {"structuredPropertyProposal": {"structuredPropertyValues": [
            {"propertyUrn": NOTE, "values": [{"string": "x"}]},
            {"propertyUrn": "urn:li:structuredProperty:sla", "values": [{"double": 2.0}]}]}}}, 1),
    rec(SP_SET, "structuredProperties", {"properties": [
        {"propertyUrn": NOTE, "values": [{"string": "a"}, {"string": "b"}]}]}, 1),
    rec(SP_SET, "structuredProperties", {"properties": [
        {"propertyUrn": NOTE, "values": [{"string": "b"}, {"string": "a"}]}]}, 2),
    rec(SP_SET, "structuredProperties", {"properties": [
        {"propertyUrn": NOTE, "values": [{"string": "b"}, {"string": "a"}, {"string": "a"}]}]}, 3),
    rec(SP_SET, "structuredProperties", {"properties": [{"propertyUrn": NOTE, "values": [{"string": "b"}]}]}, 4),
    rec(SEPARATORS, "structuredProperties", {"properties": [
        {"propertyUrn": NOTE, "values": [{"string": "ok"}, {"string": ODD_TEXT}]}]}, 1),
    rec(SEPARATORS, "structuredProperties", {"properties": [
        {"propertyUrn": NOTE, "values": [{"string": "ok"}, {"string": ODD_TEXT + "e"}]}]}, 2),
]

_ROWS: dict[str, list[dict]] = {}


@pytest.fixture
def rows(pure_spark, request) -> list[dict]:
    engine = request.node.callspec.params["pure_spark"]
    if engine not in _ROWS:
        _ROWS[engine] = change_event_rows(pure_spark, HISTORY)
    return _ROWS[engine]


def events_of(rows, urn):
    """(source version, category, operation, entity urn, modifier, parameters) of the events of one written entity."""
    return sorted(
        (r["source_version"], r["category"], r["operation"], r["entity_urn"], r["modifier"], r["parameters"] or {})
        for r in rows
        if r["aspect_entity_urn"] == urn
    )


def sort(events):
    return sorted(events)


@pytest.mark.pure
def test_owner_type_change_is_remove_plus_add_with_the_type_urn(rows):
    assert events_of(rows, OWNER_TYPE) == sort([
        (1, "OWNER", "ADD", OWNER_TYPE, ALICE, {"ownerUrn": ALICE, "ownerType": "TECHNICAL_OWNER", "ownerTypeUrn": TECH}),
        (2, "OWNER", "REMOVE", OWNER_TYPE, ALICE, {"ownerUrn": ALICE, "ownerType": "TECHNICAL_OWNER", "ownerTypeUrn": TECH}),
        (2, "OWNER", "ADD", OWNER_TYPE, ALICE, {"ownerUrn": ALICE, "ownerType": "DATA_STEWARD", "ownerTypeUrn": STEWARD}),
    ])


@pytest.mark.pure
def test_domain_change_is_remove_old_plus_add_new_and_domains_compare_as_a_set(rows):
    assert events_of(rows, DOMAIN) == sort([
        (1, "DOMAIN", "ADD", DOMAIN, "urn:li:domain:a", {"domainUrn": "urn:li:domain:a"}),
        (2, "DOMAIN", "REMOVE", DOMAIN, "urn:li:domain:a", {"domainUrn": "urn:li:domain:a"}),
        (2, "DOMAIN", "ADD", DOMAIN, "urn:li:domain:b", {"domainUrn": "urn:li:domain:b"}),
        (3, "DOMAIN", "ADD", DOMAIN, "urn:li:domain:c", {"domainUrn": "urn:li:domain:c"}),
    ])


@pytest.mark.pure
def test_field_retype_is_modify_type_change_and_a_rename_is_remove_plus_add(rows):
    def schema_event(version, operation, path, nullable, **extra):
        urn = field_urn(SCHEMA, path)
        return (version, "TECHNICAL_SCHEMA", operation, SCHEMA, urn,
                {"fieldUrn": urn, "fieldPath": path, "nullable": nullable, **extra})

    assert events_of(rows, SCHEMA) == sort([
        schema_event(1, "ADD", "id", "false"),
        schema_event(1, "ADD", "name", "true"),
        schema_event(1, "ADD", "old_col", "true"),
        schema_event(2, "MODIFY", "id", "false", modificationCategory="TYPE_CHANGE"),
        schema_event(2, "REMOVE", "old_col", "true"),
        schema_event(2, "ADD", "new_col", "true"),
    ])


@pytest.mark.pure
def test_field_tags_and_terms_are_events_on_the_schema_field(rows):
    email, key = field_urn(FIELD_TAGS, "email"), field_urn(FIELD_TAGS, "id")

    def on_field(version, category, operation, urn, path, modifier, name):
        return (version, category, operation, urn, modifier, {"fieldPath": path, "parentUrn": FIELD_TAGS, name: modifier})

    assert events_of(rows, FIELD_TAGS) == sort([
        on_field(1, "TAG", "ADD", email, "email", "urn:li:tag:PII", "tagUrn"),
        on_field(1, "GLOSSARY_TERM", "ADD", email, "email", "urn:li:glossaryTerm:Email", "termUrn"),
        on_field(2, "TAG", "ADD", email, "email", "urn:li:tag:Sensitive", "tagUrn"),
        on_field(2, "GLOSSARY_TERM", "REMOVE", email, "email", "urn:li:glossaryTerm:Email", "termUrn"),
        (1, "TECHNICAL_SCHEMA", "ADD", FIELD_TAGS, key, {"fieldUrn": key, "fieldPath": "id", "nullable": "true"}),
        on_field(1, "TAG", "ADD", key, "id", "urn:li:tag:Key", "tagUrn"),
        on_field(1, "GLOSSARY_TERM", "ADD", key, "id", "urn:li:glossaryTerm:Id", "termUrn"),
    ])
    field_rows = [r for r in rows if r["aspect_entity_urn"] == FIELD_TAGS and r["category"] != "TECHNICAL_SCHEMA"]
    assert {(r["entity_type"], r["aspect_entity_type"]) for r in field_rows} == {("schemaField", "dataset")}


@pytest.mark.pure
def test_semantic_no_op_rewrites_emit_nothing(rows):
    a, b = field_urn(NOOP, "a"), field_urn(NOOP, "b")
    x = "urn:li:corpuser:x"
    assert events_of(rows, NOOP) == sort([
        (1, "TAG", "ADD", NOOP, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (1, "TAG", "ADD", NOOP, "urn:li:tag:B", {"tagUrn": "urn:li:tag:B"}),
        (1, "OWNER", "ADD", NOOP, x, {"ownerUrn": x, "ownerType": "TECHNICAL_OWNER"}),
        (1, "TECHNICAL_SCHEMA", "ADD", NOOP, a, {"fieldUrn": a, "fieldPath": "a", "nullable": "true"}),
        (1, "TECHNICAL_SCHEMA", "ADD", NOOP, b, {"fieldUrn": b, "fieldPath": "b", "nullable": "true"}),
        (1, "DOCUMENTATION", "ADD", NOOP, None, {"description": "d"}),
        (1, "DEPRECATION", "MODIFY", NOOP, "DEPRECATED", {"status": "DEPRECATED", "note": "n1"}),
    ])


@pytest.mark.pure
def test_a_snapshot_replayed_in_the_batch_emits_once_and_is_recorded_as_duplicate(rows, pure_spark):
    assert events_of(rows, DUPS) == [(1, "TAG", "ADD", DUPS, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"})]
    batch_df = bronze_df(pure_spark, to_bronze_rows([DUP_RECORD, DUP_RECORD], "b000"))
    skipped = to_skipped_snapshots(to_sequenced_batch(batch_df, to_empty_state(batch_df))).collect()
    assert [(s.entity_urn, s.reason, s.line_number) for s in skipped] == [(DUPS, "DUPLICATE", 2)]


@pytest.mark.pure
def test_out_of_order_versions_are_ordered_by_version(rows):
    assert events_of(rows, OOO) == sort([
        (1, "TAG", "ADD", OOO, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (2, "TAG", "ADD", OOO, "urn:li:tag:B", {"tagUrn": "urn:li:tag:B"}),
        (3, "TAG", "REMOVE", OOO, "urn:li:tag:B", {"tagUrn": "urn:li:tag:B"}),
        (3, "TAG", "ADD", OOO, "urn:li:tag:C", {"tagUrn": "urn:li:tag:C"}),
    ])


@pytest.mark.pure
def test_hard_delete_removes_content_and_deleting_status_or_deprecation_is_not_a_flip(rows):
    assert events_of(rows, HARD) == sort([
        (1, "LIFECYCLE", "CREATE", HARD, None, {}),
        (1, "TAG", "ADD", HARD, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (1, "LIFECYCLE", "SOFT_DELETE", HARD, None, {}),
        (1, "DEPRECATION", "MODIFY", HARD, "DEPRECATED", {"status": "DEPRECATED"}),
        (1, "TAG", "REMOVE", HARD, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (1, "LIFECYCLE", "HARD_DELETE", HARD, None, {}),
    ])
    hard_delete = [r for r in rows if r["aspect_entity_urn"] == HARD and r["operation"] == "HARD_DELETE"][0]
    assert hard_delete["event_time"] == T + 53 and hard_delete["old_value"] is not None


@pytest.mark.pure
def test_soft_delete_and_reinstate_come_from_flips_of_removed(rows):
    assert events_of(rows, SOFT) == sort([
        (2, "LIFECYCLE", "SOFT_DELETE", SOFT, None, {}),
        (4, "LIFECYCLE", "REINSTATE", SOFT, None, {}),
    ])


@pytest.mark.pure
def test_descriptions_empty_counts_as_none_and_fields_carry_path_and_parent(rows):
    a = field_urn(DOCS, "a")
    b = field_urn(DOCS, "b")
    assert events_of(rows, DOCS) == sort([
        (2, "DOCUMENTATION", "ADD", DOCS, None, {"description": "Curated"}),
        (3, "DOCUMENTATION", "MODIFY", DOCS, None, {"description": "Curated v2"}),
        (4, "DOCUMENTATION", "REMOVE", DOCS, None, {"description": "Curated v2"}),
        (1, "TECHNICAL_SCHEMA", "ADD", DOCS, a, {"fieldUrn": a, "fieldPath": "a", "nullable": "true"}),
        (1, "TECHNICAL_SCHEMA", "ADD", DOCS, b, {"fieldUrn": b, "fieldPath": "b", "nullable": "true"}),
        (1, "DOCUMENTATION", "ADD", a, None, {"description": "A col", "fieldPath": "a", "parentUrn": DOCS}),
    ])
    assert events_of(rows, TERM) == [(1, "DOCUMENTATION", "ADD", TERM, None, {"description": "Money in"})]
    values = {r["operation"]: (r["old_value"], r["new_value"]) for r in rows
              if r["entity_urn"] == DOCS and r["category"] == "DOCUMENTATION"}
    assert values == {"ADD": (None, '"Curated"'), "MODIFY": ('"Curated"', '"Curated v2"'), "REMOVE": ('"Curated v2"', None)}


@pytest.mark.pure
def test_deprecation_flip_carries_note_and_decommission_time_when_set(rows):
    assert events_of(rows, DEPRECATED) == sort([
        (1, "DEPRECATION", "MODIFY", DEPRECATED, "DEPRECATED",
         {"status": "DEPRECATED", "note": "Replaced", "decommissionTime": "1703104308004"}),
        (2, "DEPRECATION", "MODIFY", DEPRECATED, "ACTIVE", {"status": "ACTIVE"}),
    ])
    flip = [r for r in rows if r["aspect_entity_urn"] == DEPRECATED and r["modifier"] == "DEPRECATED"][0]
    assert ece_document(flip)["parameters"]["decommissionTime"] == 1703104308004


@pytest.mark.pure
def test_structured_property_doubles_are_json_numbers_and_a_value_change_is_modify(rows):
    sla, cert = "urn:li:structuredProperty:sla", "urn:li:structuredProperty:cert"
    assert events_of(rows, SP) == sort([
        (1, "STRUCTURED_PROPERTY", "ADD", SP, sla, {"propertyUrn": sla, "propertyValues": "[730.0]"}),
        (1, "STRUCTURED_PROPERTY", "ADD", SP, cert, {"propertyUrn": cert, "propertyValues": '["urn:li:corpuser:x"]'}),
        (2, "STRUCTURED_PROPERTY", "MODIFY", SP, sla, {"propertyUrn": sla, "propertyValues": "[365.5]"}),
    ])


@pytest.mark.pure
def test_structured_property_values_compare_as_a_set(rows):
    assert events_of(rows, SP_SET) == sort([
        (1, "STRUCTURED_PROPERTY", "ADD", SP_SET, NOTE, {"propertyUrn": NOTE, "propertyValues": '["a","b"]'}),
        (4, "STRUCTURED_PROPERTY", "MODIFY", SP_SET, NOTE, {"propertyUrn": NOTE, "propertyValues": '["b"]'}),
    ])


@pytest.mark.pure
def test_values_with_line_separators_stay_whole_json(rows):
    events = sorted((r for r in rows if r["aspect_entity_urn"] == SEPARATORS), key=lambda r: r["source_version"])
    assert [(r["source_version"], r["operation"]) for r in events] == [(1, "ADD"), (2, "MODIFY")]
    assert [json.loads(r["parameters"]["propertyValues"]) for r in events] == [["ok", ODD_TEXT], ["ok", ODD_TEXT + "e"]]
    assert json.loads(events[1]["old_value"]) == {"propertyUrn": NOTE, "values": [{"string": "ok"}, {"string": ODD_TEXT}]}


@pytest.mark.pure
def test_snapshots_without_version_are_ordered_by_created_time(rows):
    assert [(r["event_time"], r["modifier"]) for r in sorted(
        (r for r in rows if r["aspect_entity_urn"] == MCP), key=lambda r: r["event_time"])] == [
        (T + 1, "urn:li:tag:A"), (T + 2, "urn:li:tag:B")]


@pytest.mark.pure
def test_an_aspect_written_again_after_its_delete_is_diffed_against_empty(rows):
    assert events_of(rows, READD) == sort([
        (1, "TAG", "ADD", READD, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (1, "TAG", "REMOVE", READD, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (2, "TAG", "ADD", READD, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
    ])


@pytest.mark.pure
def test_only_the_first_version_of_an_action_request_emits(rows):
    # One CREATE, from actionRequestInfo: the request's key aspect does not add a second one.
    request_events = [r for r in rows if r["aspect_entity_urn"] == REQUEST]
    assert [(r["aspect_name"], r["source_version"], r["operation"], (r["parameters"] or {}).get("tagUrn"))
            for r in request_events] == [("actionRequestInfo", 1, "CREATE", "urn:li:tag:A")]  # fmt: skip


@pytest.mark.pure
def test_a_structured_property_request_lists_every_assignment(rows):
    [event] = [r for r in rows if r["aspect_entity_urn"] == TWO_PROPERTIES]
    assert json.loads(event["parameters"]["structuredProperties"]) == [
        {"propertyUrn": NOTE, "values": ["x"]}, {"propertyUrn": "urn:li:structuredProperty:sla", "values": [2.0]}]


@pytest.mark.pure
def test_an_item_listed_twice_is_one_change(rows):
    a, x = field_urn(REPEAT, "a"), "urn:li:corpuser:x"
    assert events_of(rows, REPEAT) == sort([
        (1, "TAG", "ADD", REPEAT, "urn:li:tag:A", {"tagUrn": "urn:li:tag:A"}),
        (1, "OWNER", "ADD", REPEAT, x, {"ownerUrn": x, "ownerType": "TECHNICAL_OWNER"}),
        (1, "TECHNICAL_SCHEMA", "ADD", REPEAT, a, {"fieldUrn": a, "fieldPath": "a", "nullable": "true"}),
    ])


@pytest.mark.pure
def test_event_ids_are_unique_and_change_sets_group_one_aspect_version(rows):
    assert len({r["event_id"] for r in rows}) == len(rows)
    by_change_set = {}
    for r in rows:
        by_change_set.setdefault(r["change_set_id"], set()).add((r["aspect_entity_urn"], r["aspect_name"], r["source_order_key"]))
    assert all(len(keys) == 1 for keys in by_change_set.values())


@pytest.mark.pure
def test_owner_category_can_be_ownership(pure_spark):
    batch_df = bronze_df(pure_spark, to_bronze_rows([rec(OWNER_TYPE, "ownership", owners((ALICE, "TECHNICAL_OWNER", None)), 1)], "b0"))
    pairs_df = to_pairs(to_sequenced_batch(batch_df, to_empty_state(batch_df)))
    assert [(r.category, r.operation) for r in to_owner_events(pairs_df, "OWNERSHIP").collect()] == [("OWNERSHIP", "ADD")]
    with pytest.raises(InputError, match="OWNERS"):
        to_owner_events(pairs_df, "OWNERS")
