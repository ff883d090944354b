"""An OpenMetadata ChangeEvent's changeDescription: how each silver event shows as FieldChanges, grouped by
change set (the events of one entity written together).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gold.openmetadata_entities import (
    CREATED,
    DELETED,
    RESTORED,
    SOFT_DELETED,
    UPDATED,
    to_entity_reference,
    to_urn_id,
    to_uuid5,
    with_openmetadata_entity,
)
from silver.aspects import to_json_string, to_property_values_json

EVENT_ID_PREFIX = "openmetadata-change-event:"
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
        .when(kind_col.isin("owners", "domain"), to_entity_reference(reference_urn))
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
