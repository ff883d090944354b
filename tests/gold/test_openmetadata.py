"""OpenMetadata ChangeEvent projection: entity mapping, changeDescription names, versions, JSON, eventFilter."""

from __future__ import annotations

import datetime
import json
import uuid
from decimal import Decimal

import pytest

from conf.errors import RequestError
from conf.tables import TABLES
from gold.openmetadata import (
    event_filter_predicate,
    parse_event_filter,
    to_change_event_json,
    to_openmetadata_events,
)

SILVER_COLUMNS = TABLES["silver.entity_change_events"].columns
GOLD_COLUMNS = TABLES["gold.openmetadata_change_events"].columns

DS = "urn:li:dataset:(urn:li:dataPlatform:snowflake,analytics.public.orders,PROD)"
DS_FQN = "snowflake.analytics.public.orders"
FLOW = "urn:li:dataFlow:(airflow,daily_etl,prod)"
JOB = f"urn:li:dataJob:({FLOW},load_sessions)"


def field_urn(path: str) -> str:
    return f"urn:li:schemaField:({DS},{path})"


def ece(
    change_set: str,
    time: int,
    category: str,
    operation: str,
    modifier: str | None = None,
    parameters: dict[str, str] | None = None,
    *,
    urn: str = DS,
    entity_type: str = "dataset",
    aspect_urn: str | None = None,
    aspect_type: str | None = None,
    aspect: str = "globalTags",
    old: str | None = None,
    new: str | None = None,
    actor: str = "urn:li:corpuser:jdoe",
    order_key: str | None = None,
    batch_id: str = "batch-1",
) -> tuple:
    """One silver.entity_change_events row (columns in table order)."""
    return (
        f"{change_set}/{category}/{operation}/{modifier}/{sorted((parameters or {}).items())}",
        urn,
        entity_type,
        category,
        operation,
        modifier,
        parameters or {},
        actor,
        time,
        0,
        aspect,
        aspect_urn or urn,
        aspect_type or entity_type,
        change_set,
        old,
        new,
        1,
        order_key or f"{time:020d}",
        batch_id,
        "history.mcl.jsonl",
        1,
        datetime.datetime.fromtimestamp(time / 1000, datetime.timezone.utc).date(),
    )


def field_ece(change_set: str, time: int, category: str, operation: str, path: str, modifier=None, **params) -> tuple:
    """A field-level (schemaField) event of DS."""
    return ece(
        change_set,
        time,
        category,
        operation,
        modifier,
        {"fieldPath": path, "parentUrn": DS, **params},
        urn=field_urn(path),
        entity_type="schemaField",
        aspect_urn=DS,
        aspect_type="dataset",
        aspect="editableSchemaMetadata",
    )


def tag(fqn: str, source: str = "Classification") -> dict:
    return {"tagFQN": fqn, "source": source, "labelType": "Manual", "state": "Confirmed"}


def ref(urn: str, kind: str, name: str) -> dict:
    return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, urn)), "type": kind, "name": name, "fullyQualifiedName": name}


def column(name: str, constraint: str, data_type=None, display=None) -> dict:
    item = {"name": name, "constraint": constraint, "fullyQualifiedName": f"{DS_FQN}.{name}"}
    if data_type:
        item.update(dataType=data_type, dataTypeDisplay=display)
    return item


def decode(description: str | None) -> dict | None:
    """A changeDescription with the JSON-array values of list fields decoded, for comparison."""
    if description is None:
        return None
    loaded = json.loads(description)
    for bucket in ("fieldsAdded", "fieldsUpdated", "fieldsDeleted"):
        for change in loaded[bucket]:
            for key in ("oldValue", "newValue"):
                value = change.get(key)
                if isinstance(value, str) and value[:1] in "[{":
                    change[key] = json.loads(value)
    return loaded


def project(spark, rows, published=()):
    events_df = spark.createDataFrame(rows, SILVER_COLUMNS)
    published_df = spark.createDataFrame(list(published), GOLD_COLUMNS)
    return {r.change_set_id: r for r in to_openmetadata_events(events_df, published_df).collect()}


INT_FIELD = '{"fieldPath":"id","nativeDataType":"INT","type":{"type":{"com.linkedin.schema.NumberType":{}}}}'
BIGINT_FIELD = '{"fieldPath":"id","nativeDataType":"BIGINT","type":{"type":{"com.linkedin.schema.NumberType":{}}}}'
EMAIL_FIELD = (
    '{"fieldPath":"email","nativeDataType":"VARCHAR(256)","type":{"type":{"com.linkedin.schema.StringType":{}}}}'
)

DATASET_HISTORY = [
    ece("cs01", 1000, "LIFECYCLE", "CREATE", aspect="datasetKey", actor="urn:li:corpuser:datahub",
        new='{"platform":"urn:li:dataPlatform:snowflake","name":"analytics.public.orders","origin":"PROD"}'),
    ece("cs02", 2000, "TECHNICAL_SCHEMA", "ADD", field_urn("id"), {"fieldUrn": field_urn("id"), "fieldPath": "id",
        "nullable": "false"}, aspect="schemaMetadata", new=INT_FIELD, order_key="1"),
    ece("cs02", 2000, "TECHNICAL_SCHEMA", "ADD", field_urn("email"), {"fieldUrn": field_urn("email"),
        "fieldPath": "email", "nullable": "true"}, aspect="schemaMetadata", new=EMAIL_FIELD, order_key="1"),
    # Same time as cs02, later order key: comes after it.
    ece("cs03", 2000, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}, order_key="2"),
    ece("cs03", 2000, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}, order_key="2"),
    ece("cs04", 4000, "GLOSSARY_TERM", "ADD", "urn:li:glossaryTerm:Customer.Email",
        {"termUrn": "urn:li:glossaryTerm:Customer.Email"}, aspect="glossaryTerms"),
    field_ece("cs05", 5000, "TAG", "ADD", "email", "urn:li:tag:PII", tagUrn="urn:li:tag:PII"),
    field_ece("cs05", 5000, "DOCUMENTATION", "ADD", "email", description="Where receipts go"),
    ece("cs06", 6000, "OWNER", "ADD", "urn:li:corpuser:jdoe", {"ownerUrn": "urn:li:corpuser:jdoe",
        "ownerType": "TECHNICAL_OWNER"}, aspect="ownership"),
    ece("cs06", 6000, "OWNER", "ADD", "urn:li:corpGroup:eng", {"ownerUrn": "urn:li:corpGroup:eng",
        "ownerType": "TECHNICAL_OWNER"}, aspect="ownership"),
    ece("cs06", 6000, "OWNER", "REMOVE", "urn:li:corpuser:asmith", {"ownerUrn": "urn:li:corpuser:asmith",
        "ownerType": "BUSINESS_OWNER"}, aspect="ownership"),
    ece("cs07", 7000, "DOMAIN", "REMOVE", "urn:li:domain:sales", {"domainUrn": "urn:li:domain:sales"},
        aspect="domains"),
    ece("cs07", 7000, "DOMAIN", "ADD", "urn:li:domain:finance", {"domainUrn": "urn:li:domain:finance"},
        aspect="domains"),
    ece("cs08", 8000, "DOCUMENTATION", "MODIFY", None, {"description": "Orders, one per checkout"},
        aspect="editableDatasetProperties", old='"Raw orders"', new='"Orders, one per checkout"'),
    ece("cs09", 9000, "DEPRECATION", "MODIFY", "DEPRECATED", {"status": "DEPRECATED", "note": "use orders_v2"},
        aspect="deprecation"),
    ece("cs10", 10000, "STRUCTURED_PROPERTY", "ADD", "urn:li:structuredProperty:io.acryl.sla",
        {"propertyUrn": "urn:li:structuredProperty:io.acryl.sla", "propertyValues": '["730.0"]'},
        aspect="structuredProperties"),
    ece("cs11", 11000, "TAG", "REMOVE", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}),
    ece("cs12", 12000, "TECHNICAL_SCHEMA", "REMOVE", field_urn("email"), {"fieldUrn": field_urn("email"),
        "fieldPath": "email", "nullable": "true"}, aspect="schemaMetadata", old=EMAIL_FIELD),
    ece("cs13", 13000, "DOCUMENTATION", "MODIFY", None, {"fieldPath": "id", "parentUrn": DS,
        "description": "Order id"}, urn=field_urn("id"), entity_type="schemaField", aspect_urn=DS,
        aspect_type="dataset", aspect="editableSchemaMetadata", old='"Key"', new='"Order id"'),
    ece("cs14", 14000, "LIFECYCLE", "SOFT_DELETE", aspect="status", actor="urn:li:corpuser:mlee"),
    ece("cs15", 15000, "LIFECYCLE", "REINSTATE", aspect="status", actor="urn:li:corpuser:mlee"),
    ece("cs16", 16000, "TECHNICAL_SCHEMA", "MODIFY", field_urn("id"), {"fieldUrn": field_urn("id"), "fieldPath": "id",
        "nullable": "false", "modificationCategory": "TYPE_CHANGE"}, aspect="schemaMetadata", old=INT_FIELD,
        new=BIGINT_FIELD),
    ece("cs17", 17000, "LIFECYCLE", "HARD_DELETE", aspect="datasetKey", actor="urn:li:corpuser:kpatel"),
]  # fmt: skip


@pytest.mark.pure
def test_dataset_history_gives_each_event_type_version_and_field_name(pure_spark):
    # Reversed input: the order comes from (time, order key), not from the rows.
    events = project(pure_spark, list(reversed(DATASET_HISTORY)))

    versions = {
        cs: (e.event_type, str(e.previous_version), str(e.current_version), e.entity_sequence)
        for cs, e in events.items()
    }
    assert versions == {
        "cs01": ("entityCreated", "0.1", "0.1", 1),
        "cs02": ("entityUpdated", "0.1", "0.2", 2),
        "cs03": ("entityUpdated", "0.2", "0.3", 3),
        "cs04": ("entityUpdated", "0.3", "0.4", 4),
        "cs05": ("entityUpdated", "0.4", "0.5", 5),
        "cs06": ("entityUpdated", "0.5", "0.6", 6),
        "cs07": ("entityUpdated", "0.6", "0.7", 7),
        "cs08": ("entityUpdated", "0.7", "0.8", 8),
        "cs09": ("entityUpdated", "0.8", "0.9", 9),
        "cs10": ("entityUpdated", "0.9", "1.0", 10),
        "cs11": ("entityUpdated", "1.0", "1.1", 11),
        "cs12": ("entityUpdated", "1.1", "2.1", 12),  # a column removed: major
        "cs13": ("entityUpdated", "2.1", "2.2", 13),
        "cs14": ("entitySoftDeleted", "2.2", "2.3", 14),
        "cs15": ("entityRestored", "2.3", "2.4", 15),
        "cs16": ("entityUpdated", "2.4", "3.4", 16),  # a column's type changed: major
        "cs17": ("entityDeleted", "3.4", "3.4", 17),
    }
    entity_id = str(uuid.uuid5(uuid.NAMESPACE_URL, DS))
    assert {(e.entity_type, e.entity_id, e.entity_fqn, e.entity_urn) for e in events.values()} == {
        ("table", entity_id, DS_FQN, DS)
    }
    assert events["cs01"].id == str(uuid.uuid5(uuid.NAMESPACE_URL, "openmetadata-change-event:cs01"))
    assert [events[cs].user_name for cs in ("cs01", "cs14", "cs17")] == ["datahub", "mlee", "kpatel"]
    assert events["cs05"].timestamp == 5000 and events["cs05"].event_date == datetime.date(1970, 1, 1)
    assert sorted(cs for cs, e in events.items() if e.major_change) == ["cs12", "cs16"]

    # Created and hard-deleted events carry no changeDescription; only the created one carries the entity.
    assert events["cs01"].change_description is None and events["cs17"].change_description is None
    assert [cs for cs, e in events.items() if e.entity is not None] == ["cs01"]
    assert json.loads(events["cs01"].entity) == {
        "id": entity_id,
        "name": "orders",
        "fullyQualifiedName": DS_FQN,
        "version": 0.1,
        "updatedAt": 1000,
        "updatedBy": "datahub",
        "deleted": False,
        "service": {"name": "snowflake", "type": "databaseService"},
    }

    def change(added=(), updated=(), deleted=(), previous=None):
        return {"fieldsAdded": list(added), "fieldsUpdated": list(updated), "fieldsDeleted": list(deleted),
                "previousVersion": previous}  # fmt: skip

    expected = {
        "cs02": change(added=[{"name": "columns", "newValue": [
            column("email", "NULL", "STRING", "VARCHAR(256)"), column("id", "NOT_NULL", "NUMERIC", "INT")]}],
            previous=0.1),
        "cs03": change(added=[{"name": "tags", "newValue": [tag("Gold"), tag("PII")]}], previous=0.2),
        "cs04": change(added=[{"name": "tags", "newValue": [tag("Customer.Email", "Glossary")]}], previous=0.3),
        "cs05": change(added=[
            {"name": "columns.email.description", "newValue": "Where receipts go"},
            {"name": "columns.email.tags", "newValue": [tag("PII")]}], previous=0.4),
        "cs06": change(
            added=[{"name": "owners", "newValue": [
                ref("urn:li:corpGroup:eng", "team", "eng"), ref("urn:li:corpuser:jdoe", "user", "jdoe")]}],
            deleted=[{"name": "owners", "oldValue": [ref("urn:li:corpuser:asmith", "user", "asmith")]}],
            previous=0.5),
        "cs07": change(updated=[{"name": "domain", "oldValue": ref("urn:li:domain:sales", "domain", "sales"),
                                 "newValue": ref("urn:li:domain:finance", "domain", "finance")}], previous=0.6),
        "cs08": change(updated=[{"name": "description", "oldValue": "Raw orders",
                                 "newValue": "Orders, one per checkout"}], previous=0.7),
        "cs09": change(updated=[{"name": "deprecated", "oldValue": False, "newValue": True}], previous=0.8),
        "cs10": change(added=[{"name": "extension.io.acryl.sla", "newValue": ["730.0"]}], previous=0.9),
        "cs11": change(deleted=[{"name": "tags", "oldValue": [tag("Gold")]}], previous=1.0),
        "cs12": change(deleted=[{"name": "columns", "oldValue": [column("email", "NULL", "STRING", "VARCHAR(256)")]}],
                       previous=1.1),
        "cs13": change(updated=[{"name": "columns.id.description", "oldValue": "Key", "newValue": "Order id"}],
                       previous=2.1),
        "cs14": change(updated=[{"name": "deleted", "oldValue": False, "newValue": True}], previous=2.2),
        "cs15": change(updated=[{"name": "deleted", "oldValue": True, "newValue": False}], previous=2.3),
        "cs16": change(added=[{"name": "columns", "newValue": [column("id", "NOT_NULL", "NUMERIC", "BIGINT")]}],
                       deleted=[{"name": "columns", "oldValue": [column("id", "NOT_NULL", "NUMERIC", "INT")]}],
                       previous=2.4),
    }  # fmt: skip
    assert {cs: decode(events[cs].change_description) for cs in expected} == expected


JOB_AND_TYPES = [
    ece("f1", 1000, "LIFECYCLE", "CREATE", urn=FLOW, entity_type="dataFlow", aspect="dataFlowKey"),
    ece("j1", 2000, "LIFECYCLE", "CREATE", urn=JOB, entity_type="dataJob", aspect="dataJobKey"),
    ece("j2", 3000, "TAG", "ADD", "urn:li:tag:Marketing", {"tagUrn": "urn:li:tag:Marketing"}, urn=JOB,
        entity_type="dataJob"),
    ece("j3", 4000, "LIFECYCLE", "SOFT_DELETE", urn=JOB, entity_type="dataJob", aspect="status"),
    ece("j4", 5000, "LIFECYCLE", "HARD_DELETE", urn=JOB, entity_type="dataJob", aspect="dataJobKey"),
    ece("c1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:chart:(looker,weekly_orders_2)", entity_type="chart"),
    ece("d1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:dashboard:(looker,revenue_1)", entity_type="dashboard"),
    ece("g1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:glossaryTerm:Sales.Term4", entity_type="glossaryTerm"),
    ece("t1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:tag:PII", entity_type="tag"),
    ece("m1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:domain:finance", entity_type="domain"),
    ece("u1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:corpuser:jdoe", entity_type="corpuser"),
    ece("u2", 1000, "LIFECYCLE", "CREATE", urn="urn:li:corpuser:mlee", entity_type="corpUser"),
    ece("e1", 1000, "LIFECYCLE", "CREATE", urn="urn:li:corpGroup:eng", entity_type="corpGroup"),
    # A proposal is no OpenMetadata entity: it is left out.
    ece("a1", 1000, "LIFECYCLE", "CREATE", None, {"actionRequestType": "TAG_ASSOCIATION", "tagUrn": "urn:li:tag:PII"},
        urn="urn:li:actionRequest:abc", entity_type="actionRequest", aspect="actionRequestInfo"),
]  # fmt: skip


@pytest.mark.pure
def test_entity_types_names_and_data_jobs_as_pipeline_tasks(pure_spark):
    events = project(pure_spark, JOB_AND_TYPES)

    def uid(urn):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, urn))

    assert {cs: (e.entity_type, e.entity_fqn, e.entity_id, e.event_type) for cs, e in events.items()} == {
        "f1": ("pipeline", "airflow.daily_etl", uid(FLOW), "entityCreated"),
        "j1": ("pipeline", "airflow.daily_etl", uid(FLOW), "entityUpdated"),
        "j2": ("pipeline", "airflow.daily_etl", uid(FLOW), "entityUpdated"),
        "j3": ("pipeline", "airflow.daily_etl", uid(FLOW), "entityUpdated"),
        "j4": ("pipeline", "airflow.daily_etl", uid(FLOW), "entityUpdated"),
        "c1": ("chart", "looker.weekly_orders_2", uid("urn:li:chart:(looker,weekly_orders_2)"), "entityCreated"),
        "d1": ("dashboard", "looker.revenue_1", uid("urn:li:dashboard:(looker,revenue_1)"), "entityCreated"),
        "g1": ("glossaryTerm", "Sales.Term4", uid("urn:li:glossaryTerm:Sales.Term4"), "entityCreated"),
        "t1": ("tag", "PII", uid("urn:li:tag:PII"), "entityCreated"),
        "m1": ("domain", "finance", uid("urn:li:domain:finance"), "entityCreated"),
        "u1": ("user", "jdoe", uid("urn:li:corpuser:jdoe"), "entityCreated"),
        "u2": ("user", "mlee", uid("urn:li:corpuser:mlee"), "entityCreated"),
        "e1": ("team", "eng", uid("urn:li:corpGroup:eng"), "entityCreated"),
    }
    pipeline_versions = [
        (cs, str(events[cs].previous_version), str(events[cs].current_version)) for cs in ("f1", "j1", "j2", "j3", "j4")
    ]
    assert pipeline_versions == [
        ("f1", "0.1", "0.1"), ("j1", "0.1", "0.2"), ("j2", "0.2", "0.3"), ("j3", "0.3", "0.4"), ("j4", "0.4", "0.5"),
    ]  # fmt: skip
    task = {"name": "load_sessions", "fullyQualifiedName": "airflow.daily_etl.load_sessions"}
    assert decode(events["j1"].change_description)["fieldsAdded"] == [{"name": "tasks", "newValue": [task]}]
    assert decode(events["j2"].change_description)["fieldsAdded"] == [
        {"name": "tasks.load_sessions.tags", "newValue": [tag("Marketing")]}
    ]
    assert decode(events["j3"].change_description)["fieldsUpdated"] == [
        {"name": "tasks.load_sessions.deleted", "oldValue": False, "newValue": True}
    ]
    assert decode(events["j4"].change_description) == {
        "fieldsAdded": [], "fieldsUpdated": [], "fieldsDeleted": [{"name": "tasks", "oldValue": [task]}],
        "previousVersion": 0.4,
    }  # fmt: skip
    assert (events["j1"].entity_urn, events["j1"].source_entity_urn, events["j1"].source_entity_type) == (
        FLOW, JOB, "dataJob",
    )  # fmt: skip
    assert json.loads(events["g1"].entity)["glossary"] == {"name": "Sales", "type": "glossary"}
    assert json.loads(events["f1"].entity)["service"] == {"name": "airflow", "type": "pipelineService"}
    assert json.loads(events["u1"].entity)["name"] == "jdoe" and "service" not in json.loads(events["u1"].entity)


def published_row(change_set: str, sequence: int, version: str, event_type: str = "entityUpdated") -> tuple:
    """A gold row of DS as an earlier run published it."""
    return (
        str(uuid.uuid5(uuid.NAMESPACE_URL, f"openmetadata-change-event:{change_set}")),
        event_type, "table", str(uuid.uuid5(uuid.NAMESPACE_URL, DS)), DS_FQN, Decimal(version), Decimal(version),
        "jdoe", 1, None, None, DS, DS, "dataset", "globalTags", change_set, sequence, False, "batch-0",
        datetime.date(1970, 1, 1),
    )  # fmt: skip


@pytest.mark.pure
def test_versions_continue_from_the_published_history(pure_spark):
    published = [
        published_row("old3", 3, "1.0"),
        published_row("old4", 4, "1.1"),
    ]
    rows = [
        ece("n1", 100, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}),
        ece("n2", 200, "TECHNICAL_SCHEMA", "REMOVE", field_urn("email"), {"fieldPath": "email", "nullable": "true"},
            aspect="schemaMetadata"),
        ece("n3", 300, "STRUCTURED_PROPERTY", "MODIFY", "urn:li:structuredProperty:io.acryl.tier",
            {"propertyUrn": "urn:li:structuredProperty:io.acryl.tier", "propertyValues": '["gold",2.0]'},
            aspect="structuredProperties",
            old='{"propertyUrn":"urn:li:structuredProperty:io.acryl.tier","values":[{"string":"silver"}]}',
            new='{"propertyUrn":"urn:li:structuredProperty:io.acryl.tier",'
                '"values":[{"string":"gold"},{"double":2.0}]}'),
        ece("n3", 300, "STRUCTURED_PROPERTY", "REMOVE", "urn:li:structuredProperty:io.acryl.sla",
            aspect="structuredProperties",
            old='{"propertyUrn":"urn:li:structuredProperty:io.acryl.sla","values":[{"double":730.0}]}'),
        ece("n4", 400, "LIFECYCLE", "HARD_DELETE", aspect="datasetKey"),
        ece("n5", 500, "LIFECYCLE", "CREATE", aspect="datasetKey"),
        ece("n6", 600, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}),
    ]  # fmt: skip
    events = project(pure_spark, rows, published)
    assert {cs: (str(e.previous_version), str(e.current_version), e.entity_sequence) for cs, e in events.items()} == {
        "n1": ("1.1", "1.2", 5),
        "n2": ("1.2", "2.2", 6),
        "n3": ("2.2", "2.3", 7),
        "n4": ("2.3", "2.3", 8),
        "n5": ("0.1", "0.1", 9),  # created again after the hard delete
        "n6": ("0.1", "0.2", 10),
    }
    assert json.loads(events["n2"].change_description)["previousVersion"] == 1.2
    assert json.loads(events["n3"].change_description) == {
        "fieldsAdded": [],
        "fieldsUpdated": [{"name": "extension.io.acryl.tier", "oldValue": '["silver"]', "newValue": '["gold",2.0]'}],
        "fieldsDeleted": [{"name": "extension.io.acryl.sla", "oldValue": "[730.0]"}],
        "previousVersion": 2.2,
    }


@pytest.mark.pure
def test_a_creation_restarts_at_0_1_only_for_a_new_or_hard_deleted_entity(pure_spark):
    # A flow known first through its job's change sets, whose own key (a creation) comes later: the
    # creation continues the pipeline's versions. A dataset hard-deleted and created again restarts.
    rows = [
        ece("j1", 1000, "LIFECYCLE", "CREATE", urn=JOB, entity_type="dataJob", aspect="dataJobKey"),
        ece("j2", 2000, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}, urn=JOB, entity_type="dataJob"),
        ece("f1", 3000, "LIFECYCLE", "CREATE", urn=FLOW, entity_type="dataFlow", aspect="dataFlowKey"),
        ece("f2", 4000, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}, urn=FLOW,
            entity_type="dataFlow"),
        ece("d1", 1000, "LIFECYCLE", "CREATE", aspect="datasetKey"),
        ece("d2", 2000, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}),
        ece("d3", 3000, "LIFECYCLE", "HARD_DELETE", aspect="datasetKey"),
        ece("d4", 4000, "LIFECYCLE", "CREATE", aspect="datasetKey"),
        ece("d5", 5000, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}),
    ]  # fmt: skip
    events = project(pure_spark, rows)
    assert {
        cs: (e.event_type, str(e.previous_version), str(e.current_version), e.entity_sequence)
        for cs, e in events.items()
    } == {
        "j1": ("entityUpdated", "0.1", "0.2", 1),
        "j2": ("entityUpdated", "0.2", "0.3", 2),
        "f1": ("entityCreated", "0.3", "0.4", 3),  # not 0.1: the pipeline already has versions
        "f2": ("entityUpdated", "0.4", "0.5", 4),
        "d1": ("entityCreated", "0.1", "0.1", 1),  # no history before it
        "d2": ("entityUpdated", "0.1", "0.2", 2),
        "d3": ("entityDeleted", "0.2", "0.2", 3),
        "d4": ("entityCreated", "0.1", "0.1", 4),  # created again after the hard delete
        "d5": ("entityUpdated", "0.1", "0.2", 5),
    }
    assert json.loads(events["f1"].entity)["version"] == 0.4
    assert json.loads(events["f2"].change_description)["previousVersion"] == 0.4


@pytest.mark.pure
def test_a_creation_continues_the_published_version_unless_it_was_a_hard_delete(pure_spark):
    rows = [
        ece("c1", 100, "LIFECYCLE", "CREATE", aspect="datasetKey"),
        ece("c2", 200, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}),
    ]
    versions = {}
    for last_event_type in ("entityUpdated", "entitySoftDeleted", "entityDeleted"):
        published = [published_row("old1", 1, "1.0"), published_row("old2", 2, "1.1", last_event_type)]
        events = project(pure_spark, rows, published)
        versions[last_event_type] = [
            (cs, str(events[cs].previous_version), str(events[cs].current_version), events[cs].entity_sequence)
            for cs in ("c1", "c2")
        ]
    assert versions == {
        "entityUpdated": [("c1", "1.1", "1.2", 3), ("c2", "1.2", "1.3", 4)],
        "entitySoftDeleted": [("c1", "1.1", "1.2", 3), ("c2", "1.2", "1.3", 4)],
        "entityDeleted": [("c1", "0.1", "0.1", 3), ("c2", "0.1", "0.2", 4)],
    }


@pytest.mark.pure
def test_batches_projected_together_are_numbered_in_batch_order(pure_spark):
    rows = [
        ece("late", 100, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}, batch_id="b2"),
        ece("early", 900, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}, batch_id="b1"),
    ]
    events_df = pure_spark.createDataFrame(rows, SILVER_COLUMNS)
    published_df = pure_spark.createDataFrame([], GOLD_COLUMNS)
    in_batch_order = to_openmetadata_events(events_df, published_df, ["b1", "b2"]).collect()
    assert {r.change_set_id: (str(r.current_version), r.entity_sequence) for r in in_batch_order} == {
        "early": ("0.2", 1),
        "late": ("0.3", 2),
    }


@pytest.mark.pure
def test_change_event_json_and_event_filter(pure_spark):
    rows = [
        ece("x1", 1000, "LIFECYCLE", "CREATE", aspect="datasetKey"),
        ece("x2", 2000, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}),
        ece("x3", 3000, "LIFECYCLE", "HARD_DELETE", aspect="datasetKey"),
        ece("y1", 1500, "LIFECYCLE", "CREATE", urn="urn:li:chart:(looker,c1)", entity_type="chart", actor="system"),
    ]
    events_df = to_openmetadata_events(
        pure_spark.createDataFrame(rows, SILVER_COLUMNS), pure_spark.createDataFrame([], GOLD_COLUMNS)
    )
    # Computed once, then filtered and serialized as a local DataFrame.
    events_df = pure_spark.createDataFrame(events_df.collect(), GOLD_COLUMNS)
    lines = {json.loads(r.value)["timestamp"]: json.loads(r.value) for r in to_change_event_json(events_df).collect()}
    table_id, chart_id = (str(uuid.uuid5(uuid.NAMESPACE_URL, u)) for u in (DS, "urn:li:chart:(looker,c1)"))
    assert lines[2000] == {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, "openmetadata-change-event:x2")),
        "eventType": "entityUpdated",
        "entityType": "table",
        "entityId": table_id,
        "entityFullyQualifiedName": DS_FQN,
        "previousVersion": 0.1,
        "currentVersion": 0.2,
        "userName": "jdoe",
        "timestamp": 2000,
        "changeDescription": {
            "fieldsAdded": [{"name": "tags", "newValue": json.dumps([tag("PII")], separators=(",", ":"))}],
            "fieldsUpdated": [],
            "fieldsDeleted": [],
            "previousVersion": 0.1,
        },
    }
    assert set(lines[1000]) == {
        "id", "eventType", "entityType", "entityId", "entityFullyQualifiedName", "previousVersion", "currentVersion",
        "userName", "timestamp", "entity",
    }  # fmt: skip
    assert lines[1000]["entity"]["fullyQualifiedName"] == DS_FQN
    assert "changeDescription" not in lines[3000] and "entity" not in lines[3000]
    assert (lines[1500]["userName"], lines[1500]["entityId"]) == ("system", chart_id)

    def selected(event_filter):
        return sorted(r.timestamp for r in events_df.filter(event_filter_predicate(event_filter)).collect())

    assert selected(None) == [1000, 1500, 2000, 3000]
    assert selected({"eventType": "entityCreated"}) == [1000, 1500]
    assert selected({"eventType": "entityCreated", "entities": []}) == [1000, 1500]
    assert selected({"eventType": "entityCreated", "entities": ["chart"]}) == [1500]
    assert selected({"eventType": "entityCreated", "entities": ["table", "chart"]}) == [1000, 1500]
    assert selected({"eventType": "entityDeleted", "entities": ["chart"]}) == []
    assert selected({"eventType": "entityRestored"}) == []


@pytest.mark.parametrize(
    ("event_filter", "message"),
    [
        ({"eventType": "entityUpdated", "entity": ["table"]}, r"unknown key\(s\) \['entity'\]"),
        ({"entities": ["table"]}, r"eventFilter.eventType: required"),
        ({"eventType": "entityChanged"}, r"eventFilter.eventType: 'entityChanged' is not one of"),
        ({"eventType": 3}, r"eventFilter.eventType: 3 is not one of"),
        ({"eventType": "entityCreated", "entities": "table"}, r"eventFilter.entities: 'table' is not an array"),
        ({"eventType": "entityCreated", "entities": ["dataset"]}, r"eventFilter.entities: 'dataset' is not an entity"),
        ({"eventType": "entityCreated", "entities": [None]}, r"eventFilter.entities: None is not an entity"),
        (["entityCreated"], r"eventFilter: \['entityCreated'\] is not a JSON object"),
    ],
)
def test_event_filter_rejects_what_the_spec_does_not_allow(event_filter, message):
    with pytest.raises(RequestError, match=message):
        event_filter_predicate(event_filter)


def test_event_filter_accepts_the_spec_shape():
    assert parse_event_filter({"eventType": "entityRestored"}) == ("entityRestored", ())
    assert parse_event_filter({"eventType": "entitySoftDeleted", "entities": ["table", "pipeline", "table"]}) == (
        "entitySoftDeleted",
        ("table", "pipeline"),
    )
