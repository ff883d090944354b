"""TAG and GLOSSARY_TERM events on schema fields, from `schemaMetadata` and `editableSchemaMetadata`.

Each event's entity is the schemaField (`urn:li:schemaField:(<dataset>,<fieldPath>)`, entityType
schemaField); the modifier is the tag or term urn; parameters fieldPath, parentUrn (the dataset) and
tagUrn or termUrn. A field that disappears takes its tags and terms with it (REMOVE events).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from silver.aspects import to_schema_field_urn
from silver.events.common import explode_items, items, op_is, to_events, with_set_items

_ITEM_TYPE = "array<struct<kind:string,fieldPath:string,urn:string>>"


def _field_items(fields: Column) -> Column:
    """Flatten an aspect's fields into (kind, fieldPath, urn) items: one per tag and per term of each field.

    Most schema aspects tag no field: for those a cheap look at the fields gives the empty list, and
    the nested lambdas that build the items run only for the others.
    """
    tagged = F.exists(fields, lambda f: f["globalTags"]["tags"].isNotNull() | f["glossaryTerms"]["terms"].isNotNull())
    return F.when(F.coalesce(tagged, F.lit(False)), _all_field_items(fields)).otherwise(F.array().cast(_ITEM_TYPE))


def _all_field_items(fields: Column) -> Column:
    """The items of every field, tagged or not (`_field_items` without its shortcut)."""
    tags = F.flatten(
        F.transform(
            fields,
            lambda f: F.transform(
                F.coalesce(f["globalTags"]["tags"], F.array().cast("array<struct<tag:string>>")),
                lambda t: F.struct(F.lit("TAG").alias("kind"), f["fieldPath"].alias("fieldPath"), t["tag"].alias("urn")),
            ),
        )
    )
    terms = F.flatten(
        F.transform(
            fields,
            lambda f: F.transform(
                F.coalesce(f["glossaryTerms"]["terms"], F.array().cast("array<struct<urn:string>>")),
                lambda t: F.struct(
                    F.lit("GLOSSARY_TERM").alias("kind"), f["fieldPath"].alias("fieldPath"), t["urn"].alias("urn")
                ),
            ),
        )
    )
    return F.concat(F.coalesce(tags, F.array().cast(_ITEM_TYPE)), F.coalesce(terms, F.array().cast(_ITEM_TYPE)))


def to_field_tag_term_events(schema_pairs_df: DataFrame) -> DataFrame:
    """Return the schemaField TAG and GLOSSARY_TERM ADD/REMOVE events of the schema aspects (`with_schema_fields` output)."""
    parsed_df = schema_pairs_df.withColumn("prev_items", _field_items(F.col("prev_fields"))).withColumn(
        "new_items", _field_items(F.col("new_fields"))
    )

    def key(i: Column) -> Column:
        return F.when(i["fieldPath"].isNotNull() & i["urn"].isNotNull(), F.concat_ws("\u0001", i["kind"], i["fieldPath"], i["urn"]))

    sets_df = with_set_items(parsed_df, F.col("prev_items"), F.col("new_items"), key)
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    kind, path, urn = F.col("item.new.kind"), F.col("item.new.fieldPath"), F.col("item.new.urn")
    return to_events(
        items_df,
        category=kind,
        operation=F.col("item.op"),
        entity_urn=to_schema_field_urn(F.col("entity_urn"), path),
        entity_type=F.lit("schemaField"),
        modifier=urn,
        parameters={
            "fieldPath": path,
            "parentUrn": F.col("entity_urn"),
            "tagUrn": F.when(kind == "TAG", urn),
            "termUrn": F.when(kind == "GLOSSARY_TERM", urn),
        },
        old_value=F.when(op_is("REMOVE"), F.to_json("item.old")),
        new_value=F.when(op_is("ADD"), F.to_json("item.new")),
    )

