"""TECHNICAL_SCHEMA events from `schemaMetadata`: ADD / REMOVE per field, MODIFY when a field's native type changes.

Fields are keyed by fieldPath, so a rename is a REMOVE of the old path and an ADD of the new one.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from silver.aspects import to_schema_field_urn
from silver.events.common import explode_matched_items, filter_aspects, op_is, to_events, with_set_items

ASPECTS = ("schemaMetadata",)


def _compared_fields(fields: Column) -> Column:
    """Each field as the events show it: fieldPath, nullable, nativeDataType and its type's name (a union member)."""
    return F.transform(
        fields,
        lambda f: F.struct(
            f["fieldPath"].alias("fieldPath"),
            f["nullable"].alias("nullable"),
            f["nativeDataType"].alias("nativeDataType"),
            F.try_element_at(F.map_keys(f["type"]["type"]), F.lit(1)).alias("type"),
        ),
    )


def to_technical_schema_events(schema_pairs_df: DataFrame) -> DataFrame:
    """Return the TECHNICAL_SCHEMA events of the `schemaMetadata` pairs (`with_schema_fields` output).

    entityUrn is the dataset, modifier the schemaField urn; parameters fieldUrn, fieldPath, nullable
    (`"true"`/`"false"`, exported as a JSON boolean) and, on MODIFY, modificationCategory TYPE_CHANGE.
    MODIFY carries the previous field's path and nullable, as DataHub does.
    """
    sets_df = with_set_items(
        filter_aspects(schema_pairs_df, ASPECTS),
        _compared_fields(F.col("prev_fields")),
        _compared_fields(F.col("new_fields")),
        lambda f: f["fieldPath"],
    )
    matched_df = explode_matched_items(sets_df, "prev_set", "new_set", lambda f: f["fieldPath"])
    old, new = F.col("old"), F.col("new")
    operation = (
        F.when(old.isNull(), F.lit("ADD"))
        .when(new.isNull(), F.lit("REMOVE"))
        .when(~F.coalesce(old["nativeDataType"].eqNullSafe(new["nativeDataType"]), F.lit(False)), F.lit("MODIFY"))
    )
    items_df = (
        matched_df.withColumn("item", F.struct(operation.alias("op"), old.alias("old"), new.alias("new")))
        .filter(F.col("item.op").isNotNull())
        .withColumn("field", F.when(op_is("ADD"), new).otherwise(old))
    )
    field_urn = to_schema_field_urn(F.col("entity_urn"), F.col("field.fieldPath"))
    return to_events(
        items_df,
        category="TECHNICAL_SCHEMA",
        operation=F.col("item.op"),
        modifier=field_urn,
        parameters={
            "fieldUrn": field_urn,
            "fieldPath": F.col("field.fieldPath"),
            "nullable": F.when(F.coalesce(F.col("field.nullable"), F.lit(False)), F.lit("true")).otherwise(F.lit("false")),
            "modificationCategory": F.when(op_is("MODIFY"), F.lit("TYPE_CHANGE")),
        },
        old_value=F.when(~op_is("ADD"), F.to_json(F.col("item.old"))),
        new_value=F.when(~op_is("REMOVE"), F.to_json(F.col("item.new"))),
    )
