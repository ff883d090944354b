"""Golden test: every sample event of the ECE V1 catalog, reproduced from snapshots written for it.

The expected documents are the catalog's samples, copied by hand from
shared/spec/datahub-entity-change-event-v1.md; `version: 0` is added where a sample omits it
(BEHAVIOR.md: always emit it). The inputs are DataHub MCL records: one dataset whose history passes
through every dataset sample, and one action request per proposal type.
"""

from __future__ import annotations

import json

import pytest

from tests.silver.bronze_rows import mcl
from tests.silver.events_helpers import change_event_rows, documents

DATASET = "urn:li:dataset:abc"
T = 1649953100653
JDOE = "urn:li:corpuser:jdoe"
RESOURCE = "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)"
T_REQUEST = 1234567890


def _dataset(aspect: str, value, version: int, change_type: str = "UPSERT"):
    return mcl(DATASET, aspect, value, version=version, time=T, actor=JDOE, change_type=change_type)


def _field(path: str) -> dict:
    return {
        "fieldPath": path,
        "nullable": False,
        "type": {"type": {"com.linkedin.schema.StringType": {}}},
        "nativeDataType": "VARCHAR(64)",
        "recursive": False,
        "isPartOfKey": False,
    }


def _schema(*fields: dict) -> dict:
    return {
        "schemaName": "abc",
        "platform": "urn:li:dataPlatform:hive",
        "version": 0,
        "hash": "",
        "platformSchema": {"com.linkedin.schema.OtherSchema": {"rawSchema": ""}},
        "fields": list(fields),
    }


def _prop(*values: str) -> dict:
    return {"properties": [{"propertyUrn": "urn:li:structuredProperty:prop1", "values": [{"string": v} for v in values]}]}


DATASET_HISTORY = [
    _dataset("datasetKey", {"platform": "urn:li:dataPlatform:hive", "name": "abc", "origin": "PROD"}, 1),
    _dataset("globalTags", {"tags": [{"tag": "urn:li:tag:PII"}]}, 1),
    _dataset("globalTags", {"tags": []}, 2),
    _dataset("glossaryTerms", {"terms": [{"urn": "urn:li:glossaryTerm:ExampleNode.ExampleTerm"}], "auditStamp": {"time": T, "actor": JDOE}}, 1),
    _dataset("glossaryTerms", {"terms": [], "auditStamp": {"time": T, "actor": JDOE}}, 2),
    _dataset("domains", {"domains": ["urn:li:domain:ExampleDomain"]}, 1),
    _dataset("domains", {"domains": []}, 2),
    _dataset("ownership", {"owners": [{"owner": JDOE, "type": "BUSINESS_OWNER"}], "ownerTypes": {}}, 1),
    _dataset("ownership", {"owners": [], "ownerTypes": {}}, 2),
    _dataset("structuredProperties", _prop("value1"), 1),
    _dataset("structuredProperties", _prop("value1", "value2"), 2),
    _dataset("structuredProperties", {"properties": []}, 3),
    _dataset("deprecation", {"deprecated": True, "note": "", "actor": JDOE}, 1),
    _dataset("schemaMetadata", _schema(_field("newFieldName")), 1),
    _dataset("schemaMetadata", _schema(), 2),
    _dataset("status", {"removed": True}, 1),
    _dataset("datasetKey", None, 1, change_type="DELETE"),
]


def _request(request_id: str, info: dict):
    return mcl(f"urn:li:actionRequest:{request_id}", "actionRequestInfo", info, version=1, time=T_REQUEST, actor=JDOE)


REQUEST_HISTORY = [
    _request("abc-123", {"type": "DOMAIN_ASSOCIATION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"domainProposal": {"domains": ["urn:li:domain:marketing"]}},
                         "created": T_REQUEST, "createdBy": JDOE}),
    _request("def-456", {"type": "OWNER_ASSOCIATION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"ownerProposal": {"owners": [{"owner": JDOE, "type": "TECHNICAL_OWNER",
                                                                  "typeUrn": "urn:li:ownershipType:technical_owner"}]}},
                         "created": T_REQUEST, "createdBy": JDOE}),
    _request("ghi-789", {"type": "TAG_ASSOCIATION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"tagProposal": {"tag": "urn:li:tag:pii"}}, "created": T_REQUEST, "createdBy": JDOE}),
    _request("jkl-101", {"type": "CREATE_GLOSSARY_TERM", "resourceType": "glossaryTerm",
                         "params": {"createGlossaryTermProposal": {"name": "ExampleTerm",
                                                                   "parentNode": "urn:li:glossaryNode:123"}},
                         "created": T_REQUEST, "createdBy": JDOE}),
    # Flat parameter keys are accepted as well as DataHub's ActionRequestParams records.
    _request("mno-102", {"type": "TERM_ASSOCIATION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"glossaryTerm": "urn:li:glossaryTerm:123"}, "created": T_REQUEST, "createdBy": JDOE}),
    _request("pqr-103", {"type": "UPDATE_DESCRIPTION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"updateDescriptionProposal": {"description": "Example description for a dataset."}},
                         "created": T_REQUEST, "createdBy": JDOE}),
    _request("stu-104", {"type": "STRUCTURED_PROPERTY_ASSOCIATION", "resource": RESOURCE, "resourceType": "dataset",
                         "params": {"structuredPropertyProposal": {"structuredPropertyValues": [
                             {"propertyUrn": "urn:li:structuredProperty:123",
                              "values": [{"string": "value1"}, {"string": "value2"}]}]}},
                         "created": T_REQUEST, "createdBy": JDOE}),
]

_STAMP = '"auditStamp": {"actor": "urn:li:corpuser:jdoe", "time": 1649953100653}, "version": 0'
_REQUEST_STAMP = '"auditStamp": {"actor": "urn:li:corpuser:jdoe", "time": 1234567890}, "version": 0'

# name -> the catalog's sample event (JSON text as in the spec).
SAMPLES = {
    "add_tag": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "TAG", "operation": "ADD", "modifier": "urn:li:tag:PII", "parameters": {"tagUrn": "urn:li:tag:PII"}, ' + _STAMP + "}",
    "remove_tag": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "TAG", "operation": "REMOVE", "modifier": "urn:li:tag:PII", "parameters": {"tagUrn": "urn:li:tag:PII"}, ' + _STAMP + "}",
    "add_glossary_term": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "GLOSSARY_TERM", "operation": "ADD", "modifier": "urn:li:glossaryTerm:ExampleNode.ExampleTerm", "parameters": {"termUrn": "urn:li:glossaryTerm:ExampleNode.ExampleTerm"}, ' + _STAMP + "}",
    "remove_glossary_term": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "GLOSSARY_TERM", "operation": "REMOVE", "modifier": "urn:li:glossaryTerm:ExampleNode.ExampleTerm", "parameters": {"termUrn": "urn:li:glossaryTerm:ExampleNode.ExampleTerm"}, ' + _STAMP + "}",
    "add_domain": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "DOMAIN", "operation": "ADD", "modifier": "urn:li:domain:ExampleDomain", "parameters": {"domainUrn": "urn:li:domain:ExampleDomain"}, ' + _STAMP + "}",
    "remove_domain": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "DOMAIN", "operation": "REMOVE", "modifier": "urn:li:domain:ExampleDomain", "parameters": {"domainUrn": "urn:li:domain:ExampleDomain"}, ' + _STAMP + "}",
    "add_owner": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "OWNER", "operation": "ADD", "modifier": "urn:li:corpuser:jdoe", "parameters": {"ownerUrn": "urn:li:corpuser:jdoe", "ownerType": "BUSINESS_OWNER"}, ' + _STAMP + "}",
    "remove_owner": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "OWNER", "operation": "REMOVE", "modifier": "urn:li:corpuser:jdoe", "parameters": {"ownerUrn": "urn:li:corpuser:jdoe", "ownerType": "BUSINESS_OWNER"}, ' + _STAMP + "}",
    "add_structured_property": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "STRUCTURED_PROPERTY", "operation": "ADD", "modifier": "urn:li:structuredProperty:prop1", "parameters": {"propertyUrn": "urn:li:structuredProperty:prop1", "propertyValues": "[\\"value1\\"]"}, ' + _STAMP + "}",
    "remove_structured_property": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "STRUCTURED_PROPERTY", "operation": "REMOVE", "modifier": "urn:li:structuredProperty:prop1", ' + _STAMP + "}",
    "modify_structured_property": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "STRUCTURED_PROPERTY", "operation": "MODIFY", "modifier": "urn:li:structuredProperty:prop1", "parameters": {"propertyUrn": "urn:li:structuredProperty:prop1", "propertyValues": "[\\"value1\\",\\"value2\\"]"}, ' + _STAMP + "}",
    "modify_deprecation": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "DEPRECATION", "operation": "MODIFY", "modifier": "DEPRECATED", "parameters": {"status": "DEPRECATED"}, ' + _STAMP + "}",
    "add_schema_field": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "TECHNICAL_SCHEMA", "operation": "ADD", "modifier": "urn:li:schemaField:(urn:li:dataset:abc,newFieldName)", "parameters": {"fieldUrn": "urn:li:schemaField:(urn:li:dataset:abc,newFieldName)", "fieldPath": "newFieldName", "nullable": false}, ' + _STAMP + "}",
    "remove_schema_field": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "TECHNICAL_SCHEMA", "operation": "REMOVE", "modifier": "urn:li:schemaField:(urn:li:dataset:abc,newFieldName)", "parameters": {"fieldUrn": "urn:li:schemaField:(urn:li:dataset:abc,newFieldName)", "fieldPath": "newFieldName", "nullable": false}, ' + _STAMP + "}",
    "entity_create": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "LIFECYCLE", "operation": "CREATE", ' + _STAMP + "}",
    "entity_soft_delete": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "LIFECYCLE", "operation": "SOFT_DELETE", ' + _STAMP + "}",
    "entity_hard_delete": '{"entityUrn": "urn:li:dataset:abc", "entityType": "dataset", "category": "LIFECYCLE", "operation": "HARD_DELETE", ' + _STAMP + "}",
    "domain_association_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:abc-123", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"domains": "[\\"urn:li:domain:marketing\\"]", "actionRequestType": "DOMAIN_ASSOCIATION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "resourceType": "dataset"}}',
    "owner_association_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:def-456", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"owners": "[{\\"type\\":\\"TECHNICAL_OWNER\\",\\"typeUrn\\":\\"urn:li:ownershipType:technical_owner\\",\\"ownerUrn\\":\\"urn:li:corpuser:jdoe\\"}]", "actionRequestType": "OWNER_ASSOCIATION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "resourceType": "dataset"}}',
    "tag_association_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:ghi-789", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"actionRequestType": "TAG_ASSOCIATION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "tagUrn": "urn:li:tag:pii", "resourceType": "dataset"}}',
    "create_glossary_term_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:jkl-101", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"parentNodeUrn": "urn:li:glossaryNode:123", "glossaryEntityName": "ExampleTerm", "actionRequestType": "CREATE_GLOSSARY_TERM", "resourceType": "glossaryTerm"}}',
    "term_association_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:mno-102", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"glossaryTermUrn": "urn:li:glossaryTerm:123", "actionRequestType": "TERM_ASSOCIATION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "resourceType": "dataset"}}',
    "update_description_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:pqr-103", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"description": "Example description for a dataset.", "actionRequestType": "UPDATE_DESCRIPTION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "resourceType": "dataset"}}',
    "structured_property_association_request": '{"entityType": "actionRequest", "entityUrn": "urn:li:actionRequest:stu-104", "category": "LIFECYCLE", "operation": "CREATE", ' + _REQUEST_STAMP + ', "parameters": {"structuredProperties": "[{\\"propertyUrn\\":\\"urn:li:structuredProperty:123\\",\\"values\\":[\\"value1\\",\\"value2\\"]}]", "actionRequestType": "STRUCTURED_PROPERTY_ASSOCIATION", "resourceUrn": "urn:li:dataset:(urn:li:dataPlatform:snowflake,example.table,PROD)", "resourceType": "dataset"}}',
}

_PRODUCED: dict[str, list[dict]] = {}


def _produced(spark, engine: str) -> list[dict]:
    if engine not in _PRODUCED:
        _PRODUCED[engine] = documents(change_event_rows(spark, DATASET_HISTORY + REQUEST_HISTORY))
    return _PRODUCED[engine]


def _engine(request) -> str:
    return request.node.callspec.params["pure_spark"]


@pytest.mark.pure
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_sample_event_is_reproduced_exactly(pure_spark, request, sample):
    expected = json.loads(SAMPLES[sample])
    produced = _produced(pure_spark, _engine(request))
    same_event = [
        d
        for d in produced
        if (d["entityUrn"], d["category"], d["operation"], d.get("modifier"))
        == (expected["entityUrn"], expected["category"], expected["operation"], expected.get("modifier"))
    ]
    assert same_event == [expected]
    # Same keys, same value types (nullable is a JSON boolean, the JSON-valued parameters are strings).
    assert {k: type(v) for k, v in same_event[0].get("parameters", {}).items()} == {
        k: type(v) for k, v in expected.get("parameters", {}).items()
    }


@pytest.mark.pure
def test_the_histories_emit_exactly_the_catalog_samples(pure_spark, request):
    produced = _produced(pure_spark, _engine(request))
    as_text = sorted(json.dumps(d, sort_keys=True) for d in produced)
    assert as_text == sorted(json.dumps(json.loads(s), sort_keys=True) for s in SAMPLES.values())


def _sorted_text(produced: list[dict]) -> list[str]:
    return sorted(json.dumps(d, sort_keys=True) for d in produced)


def test_naming_the_batch_aspects_runs_the_generators_that_emit_its_events(spark):
    # Every generator is needed by some sample: leaving out one that a named aspect needs loses its events.
    records = DATASET_HISTORY + REQUEST_HISTORY
    named = {r["aspectName"] for r in records}
    produced = documents(change_event_rows(spark, records, aspect_names=named))
    assert _sorted_text(produced) == _sorted_text(_produced(spark, "sail"))


@pytest.mark.parametrize(
    ("aspect", "expected"),
    [
        ("globalTags", ["add_tag", "remove_tag"]),
        ("status", ["entity_soft_delete"]),
        ("datasetKey", ["entity_create", "entity_hard_delete"]),
        ("schemaMetadata", ["add_schema_field", "remove_schema_field"]),
    ],
)
def test_a_batch_of_one_aspect_gives_that_aspects_events(spark, aspect, expected):
    records = [r for r in DATASET_HISTORY if r["aspectName"] == aspect]
    produced = documents(change_event_rows(spark, records, aspect_names={aspect}))
    assert _sorted_text(produced) == _sorted_text([json.loads(SAMPLES[name]) for name in expected])


def test_a_batch_of_aspects_no_generator_reads_gives_no_events(spark):
    records = [_dataset("browsePathsV2", {"path": [{"id": "prod"}]}, 1)]
    assert change_event_rows(spark, records, aspect_names={"browsePathsV2"}) == []
