"""TECHNICAL_SCHEMA events from `schemaMetadata`: ADD / REMOVE per field, MODIFY when a field's native type changes.

Fields are keyed by fieldPath, so a rename is a REMOVE of the old path and an ADD of the new one.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from silver.aspects import field_array_schema, to_schema_field_urn
from silver.events.common import (
    explode_items,
    filter_aspects,
    item,
    items,
    op_is,
    to_events,
    with_parsed,
    with_set_items,
)

ASPECTS = ("schemaMetadata",)


def _field_json(f: Column) -> Column:
    return F.to_json(
        F.struct(
            f["fieldPath"].alias("fieldPath"),
            f["nullable"].alias("nullable"),
            f["nativeDataType"].alias("nativeDataType"),
            F.try_element_at(F.map_keys(f["type"]["type"]), F.lit(1)).alias("type"),
        )
    )


def to_technical_schema_events(pairs_df: DataFrame) -> DataFrame:
    """Return the TECHNICAL_SCHEMA events of the `schemaMetadata` pairs.

    entityUrn is the dataset, modifier the schemaField urn; parameters fieldUrn, fieldPath, nullable
    (`"true"`/`"false"`, exported as a JSON boolean) and, on MODIFY, modificationCategory TYPE_CHANGE.
    MODIFY carries the previous field's path and nullable, as DataHub does.
    """
    parsed_df = with_parsed(
        filter_aspects(pairs_df, ASPECTS), "schemaMetadata", field_array_schema("schemaMetadata", "type")
    )
    sets_df = with_set_items(parsed_df, F.col("prev.fields"), F.col("new.fields"), lambda f: f["fieldPath"])
    retyped_df = sets_df.withColumn(
        "retyped",
        F.filter(
            F.transform(
                F.col("new_set"),
                lambda f: item(
                    "MODIFY",
                    F.try_element_at(F.filter(F.col("prev_set"), lambda p: p["fieldPath"] == f["fieldPath"]), F.lit(1)),
                    f,
                ),
            ),
            lambda i: i["old"].isNotNull()
            & ~F.coalesce(i["old"]["nativeDataType"].eqNullSafe(i["new"]["nativeDataType"]), F.lit(False)),
        ),
    )
    items_df = explode_items(
        retyped_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")), F.col("retyped")
    ).withColumn("field", F.when(op_is("ADD"), F.col("item.new")).otherwise(F.col("item.old")))
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
        old_value=F.when(~op_is("ADD"), _field_json(F.col("item.old"))),
        new_value=F.when(~op_is("REMOVE"), _field_json(F.col("item.new"))),
    )
