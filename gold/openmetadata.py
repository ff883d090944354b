"""OpenMetadata ChangeEvents projected from silver Entity Change Events: one event per entity change set.

The rules (entity types, fully qualified names, versions, changeDescription field names) are the ones
documented in the README's OpenMetadata section; the constants below are their single source.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from conf.errors import RequestError
from silver.aspects import to_json_string, to_property_values_json

CREATED, UPDATED, SOFT_DELETED, DELETED, RESTORED = (
    "entityCreated",
    "entityUpdated",
    "entitySoftDeleted",
    "entityDeleted",
    "entityRestored",
)
EVENT_TYPES: tuple[str, ...] = (CREATED, UPDATED, SOFT_DELETED, DELETED, RESTORED)

# DataHub entity type -> OpenMetadata entity type. A dataJob is a task of its flow's pipeline.
ENTITY_TYPES: Mapping[str, str] = {
    "dataset": "table",
    "chart": "chart",
    "dashboard": "dashboard",
    "dataFlow": "pipeline",
    "dataJob": "pipeline",
    "glossaryTerm": "glossaryTerm",
    "tag": "tag",
    "domain": "domain",
    "corpuser": "user",
    "corpUser": "user",
    "corpGroup": "team",
    "corpgroup": "team",
}
OPENMETADATA_ENTITY_TYPES: tuple[str, ...] = tuple(sorted(set(ENTITY_TYPES.values())))

# entityId = uuid5(NAMESPACE_URL, urn); id = uuid5(NAMESPACE_URL, EVENT_ID_PREFIX + change_set_id).
ID_NAMESPACE = uuid.NAMESPACE_URL
EVENT_ID_PREFIX = "openmetadata-change-event:"

EVENT_FILTER_KEYS = ("eventType", "entities")

# Versions are kept as integer tenths while computed so that 0.1 steps never drift.
_FIRST_VERSION_TENTHS = 1
_MINOR_STEP_TENTHS = 1
_MAJOR_STEP_TENTHS = 10
VERSION_TYPE = "decimal(10,1)"
PROPERTY_VALUES_TYPE = "ARRAY<STRUCT<string: STRING, double: DOUBLE>>"

_SCHEMA_TYPE_NAMES = {
    "String": "STRING",
    "Number": "NUMERIC",
    "Boolean": "BOOLEAN",
    "Date": "DATE",
    "Time": "TIMESTAMP",
    "Bytes": "BYTES",
    "Fixed": "BINARY",
    "Array": "ARRAY",
    "Map": "MAP",
    "Record": "STRUCT",
    "Enum": "ENUM",
    "Union": "UNION",
    "Null": "NULL",
}

_DATASET_URN = r"^urn:li:dataset:\(urn:li:dataPlatform:([^,]+),(.+),([^,()]+)\)$"
_TOOL_URN = r"^urn:li:(?:chart|dashboard):\(([^,]+),(.+)\)$"
_FLOW_URN = r"^urn:li:dataFlow:\(([^,]+),(.+),([^,()]+)\)$"
_JOB_URN = r"^urn:li:dataJob:\((urn:li:dataFlow:\([^()]*\)),(.+)\)$"
_URN_ID = r"^urn:li:[^:]+:(.+)$"
_URN_TYPE = r"^urn:li:([^:]+):"


def to_uuid5(name: Column, namespace: uuid.UUID = ID_NAMESPACE) -> Column:
    """Return the RFC 4122 version-5 uuid of a string column, equal to Python's `uuid.uuid5(namespace, name)`.

    Args:
        name: the string to name (UTF-8 encoded before hashing).
        namespace: the uuid namespace.
    """
    digest = F.sha1(F.concat(F.unhex(F.lit(namespace.hex)), F.encode(name, "UTF-8")))
    variant = F.lower(F.hex(F.conv(F.substring(digest, 17, 1), 16, 10).cast("int").bitwiseAND(3).bitwiseOR(8)))
    return F.when(
        name.isNotNull(),
        F.concat_ws(
            "-",
            F.substring(digest, 1, 8),
            F.substring(digest, 9, 4),
            F.concat(F.lit("5"), F.substring(digest, 14, 3)),
            F.concat(variant, F.substring(digest, 18, 3)),
            F.substring(digest, 21, 12),
        ),
    )


def to_urn_id(urn: Column) -> Column:
    """Return the id part of an urn (`urn:li:corpuser:jdoe` -> `jdoe`); a value that is no urn stays as is."""
    return F.when(urn.rlike(_URN_ID), F.regexp_extract(urn, _URN_ID, 1)).otherwise(urn)


def to_openmetadata_entity_type(datahub_type: Column) -> Column:
    """Return the OpenMetadata entity type of a DataHub entity type, null for types without one."""
    expr = F.lit(None).cast("string")
    for datahub, openmetadata in ENTITY_TYPES.items():
        expr = F.when(datahub_type == datahub, F.lit(openmetadata)).otherwise(expr)
    return expr


def to_fully_qualified_name(urn: Column) -> Column:
    """Return the OpenMetadata fully qualified name derived from a DataHub urn.

    dataset `(urn:li:dataPlatform:p,db.schema.table,ENV)` -> `p.db.schema.table`; chart and dashboard
    `(tool,id)` -> `tool.id`; dataFlow `(orchestrator,flow,cluster)` -> `orchestrator.flow`; dataJob -> its
    flow's name plus `.jobId`; every other urn (glossaryTerm, tag, domain, corpuser, corpGroup) -> its id.
    """
    def parts(pattern: str, *groups: int) -> Column:
        return F.concat_ws(".", *(F.regexp_extract(urn, pattern, g) for g in groups))

    flow_fqn = parts(_FLOW_URN, 1, 2)
    flow_urn = F.regexp_extract(urn, _JOB_URN, 1)
    job_fqn = F.concat_ws(
        ".",
        F.regexp_extract(flow_urn, _FLOW_URN, 1),
        F.regexp_extract(flow_urn, _FLOW_URN, 2),
        F.regexp_extract(urn, _JOB_URN, 2),
    )
    return (
        F.when(urn.rlike(_DATASET_URN), parts(_DATASET_URN, 1, 2))
        .when(urn.rlike(_TOOL_URN), parts(_TOOL_URN, 1, 2))
        .when(urn.rlike(_FLOW_URN), flow_fqn)
        .when(urn.rlike(_JOB_URN), job_fqn)
        .otherwise(to_urn_id(urn))
    )


def _entity_name(urn: Column) -> Column:
    """The entity's own name: the last part of a dataset or glossary term name, a chart/dashboard/flow id."""
    last_part = F.element_at(F.split(F.regexp_extract(urn, _DATASET_URN, 2), r"\."), -1)
    return (
        F.when(urn.rlike(_DATASET_URN), last_part)
        .when(urn.rlike(_TOOL_URN), F.regexp_extract(urn, _TOOL_URN, 2))
        .when(urn.rlike(_FLOW_URN), F.regexp_extract(urn, _FLOW_URN, 2))
        .when(urn.startswith("urn:li:glossaryTerm:"), F.element_at(F.split(to_urn_id(urn), r"\."), -1))
        .otherwise(to_urn_id(urn))
    )


def _json_boolean(value: Column) -> Column:
    return F.when(value, F.lit("true")).when(~value, F.lit("false"))


def _json_array(items: Column) -> Column:
    """A JSON array text from an array of JSON texts, in a deterministic (sorted) order."""
    return F.concat(F.lit("["), F.array_join(F.array_sort(items), ","), F.lit("]"))


def _json_text(value: Column) -> Column:
    """The text of a JSON string literal (silver's old/new description); other text stays as it is."""
    return F.coalesce(F.get_json_object(F.concat(F.lit('{"v":'), value, F.lit("}")), "$.v"), value)


def _property_values(assignment_json: Column) -> Column:
    """The values of silver's property assignment JSON `{propertyUrn, values}` in propertyValues' form."""
    values = F.from_json(F.get_json_object(assignment_json, "$.values"), PROPERTY_VALUES_TYPE)
    return F.when(values.isNotNull(), to_property_values_json(values))


def _field_change(name: Column, old_fragment: Column, new_fragment: Column) -> Column:
    """One FieldChange `{name, oldValue, newValue}` as JSON text; the values are JSON fragments (null: left out)."""
    return F.concat(
        F.lit('{"name":'),
        to_json_string(name),
        F.coalesce(F.concat(F.lit(',"oldValue":'), old_fragment), F.lit("")),
        F.coalesce(F.concat(F.lit(',"newValue":'), new_fragment), F.lit("")),
        F.lit("}"),
    )


def _entity_reference(urn: Column) -> Column:
    """An OpenMetadata EntityReference `{name, fullyQualifiedName, id, type}` as JSON text.

    The name comes first, like in every list item here, so that sorting the JSON texts sorts by name.
    """
    datahub_type = F.regexp_extract(urn, _URN_TYPE, 1)
    return F.to_json(
        F.struct(
            _entity_name(urn).alias("name"),
            to_fully_qualified_name(urn).alias("fullyQualifiedName"),
            to_uuid5(urn).alias("id"),
            F.coalesce(to_openmetadata_entity_type(datahub_type), datahub_type).alias("type"),
        )
    )


def _tag_label(urn: Column, source: Column) -> Column:
    """An OpenMetadata TagLabel as JSON text; glossary terms are tags with source Glossary."""
    return F.to_json(
        F.struct(
            to_urn_id(urn).alias("tagFQN"),
            source.alias("source"),
            F.lit("Manual").alias("labelType"),
            F.lit("Confirmed").alias("state"),
        )
    )


def _column_item(field_path: Column, nullable: Column, field_json: Column, entity_fqn: Column) -> Column:
    """An OpenMetadata Column as JSON text: name, dataType, dataTypeDisplay, constraint, fullyQualifiedName."""
    type_name = F.regexp_extract(field_json, r"com\.linkedin\.schema\.([A-Za-z]+)Type", 1)
    data_type = F.lit(None).cast("string")
    for datahub, openmetadata in _SCHEMA_TYPE_NAMES.items():
        data_type = F.when(type_name == datahub, F.lit(openmetadata)).otherwise(data_type)
    data_type = F.when(type_name != "", F.coalesce(data_type, F.lit("UNKNOWN")))
    return F.to_json(
        F.struct(
            field_path.alias("name"),
            data_type.alias("dataType"),
            F.get_json_object(field_json, "$.nativeDataType").alias("dataTypeDisplay"),
            F.when(nullable == "true", F.lit("NULL")).when(nullable == "false", F.lit("NOT_NULL")).alias("constraint"),
            F.concat_ws(".", entity_fqn, field_path).alias("fullyQualifiedName"),
        )
    )


def with_openmetadata_entity(events_df: DataFrame) -> DataFrame:
    """Add the OpenMetadata entity each silver event belongs to; events of unmapped types get a null type.

    The entity is the one whose aspect was written (`aspect_entity_urn`, a dataset for schemaField
    events); a dataJob belongs to the pipeline of its flow and carries its job id as `task_id`.

    Returns:
        `events_df` plus source_urn, source_type, om_entity_type, om_urn, task_id, entity_id, entity_fqn,
        entity_name.
    """
    source_urn = F.coalesce(F.col("aspect_entity_urn"), F.col("entity_urn"))
    source_type = F.coalesce(F.col("aspect_entity_type"), F.col("entity_type"))
    is_job = (source_type == "dataJob") & source_urn.rlike(_JOB_URN)
    return (
        events_df.withColumn("source_urn", source_urn)
        .withColumn("source_type", source_type)
        .withColumn(
            "om_entity_type",
            F.when((source_type == "dataJob") & ~is_job, F.lit(None)).otherwise(
                to_openmetadata_entity_type(source_type)
            ),
        )
        .withColumn("om_urn", F.when(is_job, F.regexp_extract(source_urn, _JOB_URN, 1)).otherwise(source_urn))
        .withColumn("task_id", F.when(is_job, F.regexp_extract(source_urn, _JOB_URN, 2)))
        .withColumn("entity_id", to_uuid5(F.col("om_urn")))
        .withColumn("entity_fqn", to_fully_qualified_name(F.col("om_urn")))
        .withColumn("entity_name", _entity_name(F.col("om_urn")))
    )


def with_field_changes(entity_events_df: DataFrame) -> DataFrame:
    """Add how each event shows in the changeDescription (output of `with_openmetadata_entity`).

    Returns:
        The rows plus fc_field (the OpenMetadata field name, null when the event names none),
        fc_mode (`list`: items collected per field; `single`: one reference, added/deleted/updated;
        `value`: one FieldChange per event), fc_added / fc_deleted (item JSON for list and single modes),
        fc_bucket (fieldsAdded/fieldsUpdated/fieldsDeleted for value mode), fc_old / fc_new (JSON fragments).
    """
    category, operation, param = F.col("category"), F.col("operation"), F.col("parameters")
    is_add, is_remove, is_modify = operation == "ADD", operation == "REMOVE", operation == "MODIFY"
    is_field = param.getItem("fieldPath").isNotNull()
    kind = (
        F.when(
            F.col("task_id").isNotNull() & (category == "LIFECYCLE") & operation.isin("CREATE", "HARD_DELETE"),
            F.lit("task"),
        )
        .when(is_field & category.isin("TAG", "GLOSSARY_TERM"), F.lit("column_tags"))
        .when(is_field & (category == "DOCUMENTATION"), F.lit("column_description"))
        .when(category.isin("TAG", "GLOSSARY_TERM"), F.lit("tags"))
        .when(category.isin("OWNER", "OWNERSHIP"), F.lit("owners"))
        .when(category == "DOMAIN", F.lit("domain"))
        .when(category == "DOCUMENTATION", F.lit("description"))
        .when(category == "DEPRECATION", F.lit("deprecated"))
        .when(category == "STRUCTURED_PROPERTY", F.lit("extension"))
        .when(category == "TECHNICAL_SCHEMA", F.lit("columns"))
        .when((category == "LIFECYCLE") & operation.isin("SOFT_DELETE", "REINSTATE"), F.lit("deleted"))
    )
    kind_col = F.col("fc_kind")
    property_urn = F.coalesce(param.getItem("propertyUrn"), F.col("modifier"))
    prefix = F.when(F.col("task_id").isNotNull(), F.concat(F.lit("tasks."), F.col("task_id"), F.lit("."))).otherwise("")
    path = param.getItem("fieldPath")
    field = (
        F.when(kind_col == "task", F.lit("tasks"))
        .when(kind_col == "column_tags", F.concat(F.lit("columns."), path, F.lit(".tags")))
        .when(kind_col == "column_description", F.concat(F.lit("columns."), path, F.lit(".description")))
        .when(kind_col == "columns", kind_col)
        .when(
            kind_col == "extension",
            F.concat(prefix, F.lit("extension."), to_urn_id(property_urn)),
        )
        .when(kind_col.isNotNull(), F.concat(prefix, kind_col))
    )
    mode = (
        F.when(kind_col == "domain", F.lit("single"))
        .when(kind_col.isin("task", "column_tags", "tags", "owners", "columns"), F.lit("list"))
        .otherwise(F.lit("value"))
    )
    reference_urn = F.coalesce(param.getItem("ownerUrn"), param.getItem("domainUrn"), F.col("modifier"))
    tag_source = F.when(category == "TAG", F.lit("Classification")).otherwise(F.lit("Glossary"))
    tag_urn = F.coalesce(param.getItem("tagUrn"), param.getItem("termUrn"), F.col("modifier"))
    task_item = F.to_json(
        F.struct(
            F.col("task_id").alias("name"),
            F.concat_ws(".", F.col("entity_fqn"), F.col("task_id")).alias("fullyQualifiedName"),
        )
    )
    item = (
        F.when(kind_col == "task", task_item)
        .when(kind_col.isin("tags", "column_tags"), _tag_label(tag_urn, tag_source))
        .when(kind_col.isin("owners", "domain"), _entity_reference(reference_urn))
    )
    nullable = param.getItem("nullable")
    is_columns = kind_col == "columns"
    # A field whose type changed no longer matches its old column: the old column goes, the new one comes.
    added = F.when(
        is_columns, F.when(is_add | is_modify, _column_item(path, nullable, F.col("new_value"), F.col("entity_fqn")))
    ).otherwise(F.when(is_add | (operation == "CREATE"), F.col("fc_item")))
    deleted = F.when(
        is_columns, F.when(is_remove | is_modify, _column_item(path, nullable, F.col("old_value"), F.col("entity_fqn")))
    ).otherwise(F.when(is_remove | (operation == "HARD_DELETE"), F.col("fc_item")))

    is_description = kind_col.isin("description", "column_description")
    is_extension = kind_col == "extension"
    description = param.getItem("description")
    property_values = param.getItem("propertyValues")
    old_text = F.when(is_description, _json_text(F.col("old_value"))).when(
        is_extension, _property_values(F.col("old_value"))
    )
    new_text = F.when(is_description, description).when(is_extension, property_values)
    # Boolean fields: the flag after the change; before it, the opposite.
    flag = F.when(kind_col == "deprecated", param.getItem("status") == "DEPRECATED").when(
        kind_col == "deleted", operation == "SOFT_DELETE"
    )
    is_flag = kind_col.isin("deprecated", "deleted")
    bucket = F.when(is_flag | is_modify, F.lit("fieldsUpdated")).when(is_add, F.lit("fieldsAdded")).when(
        is_remove, F.lit("fieldsDeleted")
    )
    old_fragment = F.when(is_flag, _json_boolean(~flag)).when(
        is_remove, to_json_string(F.coalesce(new_text, old_text))
    ).when(is_modify, to_json_string(old_text))
    new_fragment = F.when(is_flag, _json_boolean(flag)).when(is_add | is_modify, to_json_string(new_text))
    value_mode = F.col("fc_mode") == "value"
    return (
        entity_events_df.withColumn("fc_kind", kind)
        .withColumn("fc_field", field)
        .withColumn("fc_mode", mode)
        .withColumn("fc_item", F.when(~value_mode, item))
        .withColumn("fc_added", F.when(~value_mode, added))
        .withColumn("fc_deleted", F.when(~value_mode, deleted))
        .withColumn("fc_bucket", F.when(value_mode, bucket))
        .withColumn("fc_old", F.when(value_mode, old_fragment))
        .withColumn("fc_new", F.when(value_mode, new_fragment))
        .drop("fc_kind", "fc_item")
    )


_LIFECYCLE_RANKS = {"REINSTATE": 1, "SOFT_DELETE": 2, "CREATE": 3, "HARD_DELETE": 4}
_RANK_EVENT_TYPES = {0: UPDATED, 1: RESTORED, 2: SOFT_DELETED, 3: CREATED, 4: DELETED}
_BUCKETS = (("fieldsAdded", "fields_added"), ("fieldsUpdated", "fields_updated"), ("fieldsDeleted", "fields_deleted"))
# Attributes shared by every event of a change set, carried through both aggregations.
_CHANGE_SET_ATTRIBUTES = (
    ("om_entity_type", "entity_type"),
    ("entity_id", "entity_id"),
    ("entity_fqn", "entity_fqn"),
    ("entity_name", "entity_name"),
    ("om_urn", "entity_urn"),
    ("source_urn", "source_entity_urn"),
    ("source_type", "source_entity_type"),
    ("aspect_name", "aspect_name"),
    ("actor", "actor"),
    ("source_order_key", "source_order_key"),
    ("batch_id", "batch_id"),
)


def _non_empty(items: Column) -> Column:
    return F.when(F.size(items) > 0, items)


def to_field_entries(field_changes_df: DataFrame) -> DataFrame:
    """Collect the field changes of each (change set, field) into FieldChange entries.

    List fields (tags, owners, columns, `columns.<field>.tags`, tasks) give one fieldsAdded entry whose
    newValue is the JSON array of the added items and one fieldsDeleted entry whose oldValue is the JSON
    array of the removed ones; `domain` is one reference, so a removed plus an added domain is one
    fieldsUpdated entry; every other field gives one FieldChange per event.

    Args:
        field_changes_df: the output of `with_field_changes`.

    Returns:
        One row per (change_set_id, fc_field): the change set attributes, lifecycle_rank, major_rank and
        fields_added / fields_updated / fields_deleted (arrays of FieldChange JSON texts).
    """
    rank = F.lit(0)
    for operation, value in _LIFECYCLE_RANKS.items():
        is_operation = (F.col("category") == "LIFECYCLE") & (F.col("operation") == operation)
        rank = F.when(is_operation, F.lit(value)).otherwise(rank)
    rank = F.when(F.col("task_id").isNull(), rank).otherwise(F.lit(0))
    major = (F.col("category") == "TECHNICAL_SCHEMA") & F.col("operation").isin("REMOVE", "MODIFY")
    value_change = F.when(
        (F.col("fc_mode") == "value") & F.col("fc_field").isNotNull(),
        _field_change(F.col("fc_field"), F.col("fc_old"), F.col("fc_new")),
    )
    grouped_df = field_changes_df.groupBy("change_set_id", "fc_field", "fc_mode").agg(
        *(F.min(source).alias(target) for source, target in _CHANGE_SET_ATTRIBUTES),
        F.max("event_time").alias("timestamp"),
        F.max(rank).alias("lifecycle_rank"),
        F.max(major.cast("int")).alias("major_rank"),
        F.collect_list("fc_added").alias("added"),
        F.collect_list("fc_deleted").alias("deleted"),
        *(
            F.collect_list(F.when(F.col("fc_bucket") == bucket, value_change)).alias(f"value_{column}")
            for bucket, column in _BUCKETS
        ),
    )
    has_field = F.col("fc_field").isNotNull() & (F.col("fc_mode") != "value")
    is_list = F.col("fc_mode") == "list"
    has_added, has_deleted = F.size("added") > 0, F.size("deleted") > 0
    no_value = F.lit(None).cast("string")

    def fragment(items: str) -> Column:
        single = F.when(F.size(items) == 1, F.element_at(F.col(items), 1))
        whole = _json_array(F.col(items))
        return to_json_string(F.when(is_list, whole).otherwise(F.coalesce(single, whole)))

    name = F.col("fc_field")
    list_entries = {
        "fields_added": F.when(
            has_field & has_added & (is_list | ~has_deleted), _field_change(name, no_value, fragment("added"))
        ),
        "fields_deleted": F.when(
            has_field & has_deleted & (is_list | ~has_added), _field_change(name, fragment("deleted"), no_value)
        ),
        "fields_updated": F.when(
            has_field & ~is_list & has_added & has_deleted, _field_change(name, fragment("deleted"), fragment("added"))
        ),
    }
    return grouped_df.select(
        "change_set_id",
        *(target for _, target in _CHANGE_SET_ATTRIBUTES),
        "timestamp",
        "lifecycle_rank",
        "major_rank",
        *(
            F.when(list_entries[column].isNotNull(), F.array(list_entries[column]))
            .otherwise(F.col(f"value_{column}"))
            .alias(column)
            for _, column in _BUCKETS
        ),
    )


def to_change_sets(events_df: DataFrame) -> DataFrame:
    """Turn silver change events into one row per change set of an entity that OpenMetadata models.

    Events of entity types without an OpenMetadata counterpart (actionRequest, ...) are left out. A
    dataJob's change sets are updates of its flow's pipeline (its creation and hard delete add and
    remove a task), so they never create or delete the pipeline itself.

    Args:
        events_df: rows with the columns of silver.entity_change_events.

    Returns:
        One row per change_set_id: id, event_type, entity_type, entity_id, entity_fqn, entity_name,
        entity_urn, source_entity_urn, source_entity_type, aspect_name, user_name, timestamp,
        source_order_key, batch_id, major_change, fields_added, fields_updated, fields_deleted (the last
        three JSON array texts of FieldChanges, sorted).
    """
    entity_df = with_openmetadata_entity(events_df).filter(F.col("om_entity_type").isNotNull())
    entries_df = to_field_entries(with_field_changes(entity_df))
    change_sets_df = entries_df.groupBy("change_set_id").agg(
        *(F.min(target).alias(target) for _, target in _CHANGE_SET_ATTRIBUTES),
        F.max("timestamp").alias("timestamp"),
        F.max("lifecycle_rank").alias("lifecycle_rank"),
        F.max("major_rank").alias("major_rank"),
        *(_json_array(F.flatten(F.collect_list(column))).alias(column) for _, column in _BUCKETS),
    )
    event_type = F.lit(UPDATED)
    for value, event_name in _RANK_EVENT_TYPES.items():
        event_type = F.when(F.col("lifecycle_rank") == value, F.lit(event_name)).otherwise(event_type)
    return (
        change_sets_df.withColumn("id", to_uuid5(F.concat(F.lit(EVENT_ID_PREFIX), F.col("change_set_id"))))
        .withColumn("event_type", event_type)
        .withColumn("user_name", to_urn_id(F.col("actor")))
        .withColumn("major_change", F.col("major_rank") == 1)
        .drop("lifecycle_rank", "major_rank", "actor")
    )


def to_last_versions(published_df: DataFrame) -> DataFrame:
    """Return the last published version of each entity.

    Args:
        published_df: rows of gold.openmetadata_change_events published before the events being
            projected (a re-run of a batch must leave that batch's own rows out, so that it continues
            from the same version as the first run did).

    Returns:
        entity_id, last_sequence, last_version (DECIMAL(10,1)), last_event_type (whether the entity was
        hard-deleted last decides whether its next creation restarts at 0.1).
    """
    return (
        published_df.groupBy("entity_id")
        .agg(F.max(F.struct("entity_sequence", "current_version", "event_type")).alias("last"))
        .select(
            "entity_id",
            F.col("last.entity_sequence").alias("last_sequence"),
            F.col("last.current_version").alias("last_version"),
            F.col("last.event_type").alias("last_event_type"),
        )
    )


def _to_version(tenths: Column) -> Column:
    return (tenths.cast("decimal(12,1)") / F.lit(10)).cast(VERSION_TYPE)


def with_versions(
    change_sets_df: DataFrame, last_versions_df: DataFrame, batch_order: Sequence[str] = ()
) -> DataFrame:
    """Add entity_sequence, previous_version and current_version, continuing each entity's history.

    Change sets of an entity are ordered by batch (in `batch_order`), then (timestamp,
    source_order_key), a creation first among equals, then change_set_id: projecting several batches
    at once numbers versions exactly as projecting them one after the other does. An entity starts at
    0.1; a creation with no history before it (none in this run, none published) or right after a hard
    delete is 0.1 -> 0.1; a hard delete keeps the version (the entity is gone); a change set that
    removes a column or changes a column's type adds 1.0 (1.1 -> 2.1); any other, including a creation
    that arrives after other change sets of its entity, adds 0.1.

    Args:
        change_sets_df: the output of `to_change_sets`.
        last_versions_df: the output of `to_last_versions` (entity_id, last_sequence, last_version,
            last_event_type).
        batch_order: the batch ids in processing order; empty: one batch (or order by time alone).
    """
    is_created = F.col("event_type") == CREATED
    batch_rank = (
        F.array_position(F.array(*(F.lit(b) for b in batch_order)), F.col("batch_id")) if batch_order else F.lit(0)
    )
    order = [
        batch_rank,
        F.col("timestamp"),
        F.col("source_order_key"),
        F.when(is_created, F.lit(0)).otherwise(F.lit(1)),
        F.col("change_set_id"),
    ]
    by_entity = Window.partitionBy("entity_id").orderBy(*order)
    running = by_entity.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # The change set before this one: earlier in this run, else the last published one (null: none).
    previous_type = F.coalesce(F.lag("event_type").over(by_entity), F.col("last_event_type"))
    # Only a creation with nothing before it, or after a hard delete, starts a history at 0.1: a
    # creation that arrives after other change sets (a flow's key after its jobs' changes) continues.
    is_restart = is_created & (previous_type.isNull() | (previous_type == DELETED))
    restart = F.col("restart")
    step = (
        F.when(restart | (F.col("event_type") == DELETED), F.lit(0))
        .when(F.col("major_change"), F.lit(_MAJOR_STEP_TENTHS))
        .otherwise(F.lit(_MINOR_STEP_TENTHS))
    )
    last_tenths = (F.col("last_version") * F.lit(10)).cast("bigint")
    # Steps are never negative, so the running sum at the latest restart is a running max: one window
    # numbers the whole history, a restart starting it again at 0.1.
    restarted_at = F.max(F.when(restart, F.col("steps"))).over(running)
    current = F.when(
        F.col("segment") == 0, F.coalesce(last_tenths, F.lit(_FIRST_VERSION_TENTHS)) + F.col("steps")
    ).otherwise(F.lit(_FIRST_VERSION_TENTHS) + F.col("steps") - restarted_at)
    return (
        change_sets_df.join(last_versions_df, "entity_id", "left")
        .withColumn("restart", is_restart)
        .withColumn("step", step)
        .withColumn("steps", F.sum("step").over(running))
        .withColumn("segment", F.sum(restart.cast("int")).over(running))
        .withColumn("current_tenths", current)
        .withColumn("entity_sequence", F.coalesce(F.col("last_sequence"), F.lit(0)) + F.row_number().over(by_entity))
        .withColumn("current_version", _to_version(F.col("current_tenths")))
        .withColumn("previous_version", _to_version(F.col("current_tenths") - F.col("step")))
        .drop(
            "restart", "step", "steps", "segment", "current_tenths", "last_sequence", "last_version", "last_event_type"
        )
    )


def _entity_json() -> Column:
    """The created entity as OpenMetadata JSON: reference fields plus its service or glossary."""
    urn, entity_type = F.col("entity_urn"), F.col("entity_type")
    service_name = (
        F.when(entity_type == "table", F.regexp_extract(urn, _DATASET_URN, 1))
        .when(entity_type.isin("chart", "dashboard"), F.regexp_extract(urn, _TOOL_URN, 1))
        .when(entity_type == "pipeline", F.regexp_extract(urn, _FLOW_URN, 1))
    )
    service_type = (
        F.when(entity_type == "table", F.lit("databaseService"))
        .when(entity_type.isin("chart", "dashboard"), F.lit("dashboardService"))
        .when(entity_type == "pipeline", F.lit("pipelineService"))
    )
    glossary_parts = F.split(F.col("entity_fqn"), r"\.")
    glossary = F.when(
        (entity_type == "glossaryTerm") & (F.size(glossary_parts) > 1),
        F.struct(F.element_at(glossary_parts, 1).alias("name"), F.lit("glossary").alias("type")),
    )
    return F.to_json(
        F.struct(
            F.col("entity_id").alias("id"),
            F.col("entity_name").alias("name"),
            F.col("entity_fqn").alias("fullyQualifiedName"),
            F.col("current_version").alias("version"),
            F.col("timestamp").alias("updatedAt"),
            F.col("user_name").alias("updatedBy"),
            F.lit(False).alias("deleted"),
            F.when(service_name.isNotNull(), F.struct(service_name.alias("name"), service_type.alias("type"))).alias(
                "service"
            ),
            glossary.alias("glossary"),
        )
    )


def to_openmetadata_events(
    events_df: DataFrame, published_df: DataFrame, batch_order: Sequence[str] = ()
) -> DataFrame:
    """Project silver change events onto OpenMetadata ChangeEvents, continuing the published versions.

    Args:
        events_df: rows with the columns of silver.entity_change_events (one or more batches).
        published_df: the ChangeEvents published before these events (gold.openmetadata_change_events
            without the rows of the batches being projected).
        batch_order: the batch ids of `events_df` in processing order (see `with_versions`).

    Returns:
        Rows with the columns of gold.openmetadata_change_events; changeDescription is null for
        entityCreated and entityDeleted, entity is set for entityCreated only.
    """
    # Only the entities these events touch need their last published version: aggregating the whole
    # published table would make every batch, however small, cost as much as the table's history.
    entities_df = with_openmetadata_entity(events_df).filter(F.col("om_entity_type").isNotNull()).select("entity_id")
    touched_df = published_df.join(entities_df.distinct(), "entity_id", "left_semi")
    versioned_df = with_versions(to_change_sets(events_df), to_last_versions(touched_df), batch_order)
    no_description = F.col("event_type").isin(CREATED, DELETED)
    description = F.concat(
        F.lit('{"fieldsAdded":'),
        F.col("fields_added"),
        F.lit(',"fieldsUpdated":'),
        F.col("fields_updated"),
        F.lit(',"fieldsDeleted":'),
        F.col("fields_deleted"),
        F.lit(',"previousVersion":'),
        F.col("previous_version").cast("string"),
        F.lit("}"),
    )
    return (
        versioned_df.withColumn("change_description", F.when(~no_description, description))
        .withColumn("entity", F.when(F.col("event_type") == CREATED, _entity_json()))
        .withColumn("event_date", F.to_date((F.col("timestamp") / 1000).cast("timestamp")))
        .select(
            "id",
            "event_type",
            "entity_type",
            "entity_id",
            "entity_fqn",
            "previous_version",
            "current_version",
            "user_name",
            "timestamp",
            "change_description",
            "entity",
            "entity_urn",
            "source_entity_urn",
            "source_entity_type",
            "aspect_name",
            "change_set_id",
            "entity_sequence",
            "major_change",
            "batch_id",
            "event_date",
        )
    )


def to_change_event_json(published_df: DataFrame) -> DataFrame:
    """Serialize ChangeEvents as the spec's JSON, one text per row in column `value`.

    Null optional keys are left out; changeDescription and entity are embedded as JSON objects
    (changeDescription never for entityCreated/entityDeleted, entity only for entityCreated).
    """
    base = F.to_json(
        F.struct(
            F.col("id"),
            F.col("event_type").alias("eventType"),
            F.col("entity_type").alias("entityType"),
            F.col("entity_id").alias("entityId"),
            F.col("entity_fqn").alias("entityFullyQualifiedName"),
            F.col("previous_version").alias("previousVersion"),
            F.col("current_version").alias("currentVersion"),
            F.col("user_name").alias("userName"),
            F.col("timestamp"),
        )
    )
    description = F.when(~F.col("event_type").isin(CREATED, DELETED), F.col("change_description"))
    entity = F.when(F.col("event_type") == CREATED, F.col("entity"))
    return published_df.select(
        F.concat(
            F.regexp_extract(base, r"^(\{.*)\}$", 1),
            F.coalesce(F.concat(F.lit(',"changeDescription":'), description), F.lit("")),
            F.coalesce(F.concat(F.lit(',"entity":'), entity), F.lit("")),
            F.lit("}"),
        ).alias("value")
    )


def parse_event_filter(event_filter: Any) -> tuple[str, tuple[str, ...]]:
    """Check an OpenMetadata eventFilter `{eventType, entities}` and return (eventType, entities).

    Args:
        event_filter: the decoded JSON object; `entities` empty or absent means every entity type.

    Raises:
        RequestError: for a value that is not an object, an unknown key, a missing or unknown eventType,
            or entities that are not a list of known OpenMetadata entity type names.
    """
    if not isinstance(event_filter, Mapping):
        raise RequestError(f"eventFilter: {event_filter!r} is not a JSON object")
    unknown = sorted(str(k) for k in event_filter if k not in EVENT_FILTER_KEYS)
    if unknown:
        raise RequestError(f"eventFilter: unknown key(s) {unknown} (allowed: {', '.join(EVENT_FILTER_KEYS)})")
    if "eventType" not in event_filter:
        raise RequestError("eventFilter.eventType: required (one of " + ", ".join(EVENT_TYPES) + ")")
    event_type = event_filter["eventType"]
    if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
        raise RequestError(f"eventFilter.eventType: {event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    entities = event_filter.get("entities")
    if entities is None:
        return event_type, ()
    if not isinstance(entities, list):
        raise RequestError(f"eventFilter.entities: {entities!r} is not an array of entity type names")
    for entity in entities:
        if not isinstance(entity, str) or entity not in OPENMETADATA_ENTITY_TYPES:
            raise RequestError(
                f"eventFilter.entities: {entity!r} is not an entity type name "
                f"(known: {', '.join(OPENMETADATA_ENTITY_TYPES)})"
            )
    return event_type, tuple(dict.fromkeys(entities))


def event_filter_predicate(event_filter: Mapping[str, Any] | None) -> Column:
    """Return the predicate over gold.openmetadata_change_events that an eventFilter selects.

    Args:
        event_filter: `{eventType, entities}` or None (every event).

    Raises:
        RequestError: see `parse_event_filter`.
    """
    if event_filter is None:
        return F.lit(True)
    event_type, entities = parse_event_filter(event_filter)
    predicate = F.col("event_type") == event_type
    return predicate & F.col("entity_type").isin(*entities) if entities else predicate

