"""STRUCTURED_PROPERTY events from `structuredProperties`: ADD / REMOVE per property, MODIFY when its values change."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from silver.aspects import to_property_value_set, to_property_values_json
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

ASPECTS = ("structuredProperties",)


def _assignment_json(p: Column) -> Column:
    return F.to_json(F.struct(p["propertyUrn"].alias("propertyUrn"), p["values"].alias("values")))


def to_structured_property_events(pairs_df: DataFrame) -> DataFrame:
    """Return the STRUCTURED_PROPERTY events of the `structuredProperties` pairs.

    ADD and MODIFY carry propertyUrn and propertyValues (the new values as compact JSON text, e.g.
    `["value1","value2"]`, in the aspect's order); REMOVE carries no parameters, as in the ECE V1
    catalog. Values compare as a set, as DataHub compares them: reordering them or listing one twice
    is no change.
    """
    parsed_df = with_parsed(filter_aspects(pairs_df, ASPECTS), "structuredProperties")
    sets_df = with_set_items(parsed_df, F.col("prev.properties"), F.col("new.properties"), lambda p: p["propertyUrn"])
    # A property on both sides whose sets of values differ.
    modified_df = sets_df.withColumn(
        "modified",
        F.filter(
            F.transform(
                F.col("new_set"),
                lambda p: item(
                    "MODIFY",
                    F.try_element_at(F.filter(F.col("prev_set"), lambda q: q["propertyUrn"] == p["propertyUrn"]), F.lit(1)),
                    p,
                ),
            ),
            lambda i: i["old"].isNotNull()
            & (to_property_value_set(i["old"]["values"]) != to_property_value_set(i["new"]["values"])),
        ),
    )
    items_df = explode_items(
        modified_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")), F.col("modified")
    )
    new, urn = F.col("item.new"), F.col("item.new.propertyUrn")
    keeps_values = ~op_is("REMOVE")
    return to_events(
        items_df,
        category="STRUCTURED_PROPERTY",
        operation=F.col("item.op"),
        modifier=urn,
        parameters={
            "propertyUrn": F.when(keeps_values, urn),
            "propertyValues": F.when(keeps_values, to_property_values_json(new["values"])),
        },
        old_value=F.when(~op_is("ADD"), _assignment_json(F.col("item.old"))),
        new_value=F.when(keeps_values, _assignment_json(new)),
    )
