"""DOCUMENTATION events: entity descriptions (datasetProperties, editableDatasetProperties, chartInfo,
dashboardInfo, dataJobInfo, glossaryTermInfo definitions, ...) and field descriptions (schemaMetadata,
editableSchemaMetadata). An empty description counts as none.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.aspects import DESCRIPTION_FIELDS, FIELD_ARRAYS
from silver.aspects import blank_to_null, to_json_string, to_schema_field_urn
from silver.events.common import explode_matched_items, filter_aspects, to_events, with_set_items

ASPECTS = tuple(DESCRIPTION_FIELDS) + tuple(FIELD_ARRAYS)


def _operation(old: Column, new: Column) -> Column:
    """ADD, REMOVE or MODIFY of one description (null: unchanged)."""
    return (
        F.when(old.isNull() & new.isNotNull(), F.lit("ADD"))
        .when(old.isNotNull() & new.isNull(), F.lit("REMOVE"))
        .when(old != new, F.lit("MODIFY"))
    )


def _description_events(df: DataFrame, entity_urn: Column, entity_type: Column, extra: dict) -> DataFrame:
    """Events of rows with columns old_text / new_text (the descriptions before and after)."""
    changed_df = df.withColumn("doc_op", _operation(F.col("old_text"), F.col("new_text"))).filter(
        F.col("doc_op").isNotNull()
    )
    return to_events(
        changed_df,
        category="DOCUMENTATION",
        operation=F.col("doc_op"),
        entity_urn=entity_urn,
        entity_type=entity_type,
        parameters={"description": F.coalesce(F.col("new_text"), F.col("old_text")), **extra},
        old_value=to_json_string(F.col("old_text")),
        new_value=to_json_string(F.col("new_text")),
    )


def _entity_events(pairs_df: DataFrame) -> DataFrame:
    # One parse for every entity description aspect: they differ only in the field holding the text.
    fields = sorted(set(DESCRIPTION_FIELDS.values()))
    schema = ", ".join(f"{field} STRING" for field in fields)
    aspect = F.col("aspect_name")

    def text_of(json_column: str) -> Column:
        parsed = F.from_json(F.col(json_column), schema)
        picked = None
        for field in fields:
            names = [a for a, f in DESCRIPTION_FIELDS.items() if f == field]
            picked = (F.when if picked is None else picked.when)(aspect.isin(names), parsed[field])
        return blank_to_null(picked)

    texts_df = (
        filter_aspects(pairs_df, tuple(DESCRIPTION_FIELDS))
        .withColumn("old_text", text_of("prev_json"))
        .withColumn("new_text", text_of("new_json"))
    )
    return _description_events(texts_df, F.col("entity_urn"), F.col("entity_type"), {})


def _field_descriptions(fields: Column) -> Column:
    """(fieldPath, text) of each field with a non-empty description."""
    described = F.transform(
        fields, lambda f: F.struct(f["fieldPath"].alias("fieldPath"), blank_to_null(f["description"]).alias("text"))
    )
    return F.filter(described, lambda d: d["fieldPath"].isNotNull() & d["text"].isNotNull())


def _field_events(schema_pairs_df: DataFrame) -> DataFrame:
    described_df = schema_pairs_df.withColumn("old_docs", _field_descriptions(F.col("prev_fields"))).withColumn(
        "new_docs", _field_descriptions(F.col("new_fields"))
    )
    # The first description of each path on each side, matched by path.
    sets_df = with_set_items(described_df, F.col("old_docs"), F.col("new_docs"), lambda d: d["fieldPath"])
    matched_df = explode_matched_items(sets_df, "prev_set", "new_set", lambda d: d["fieldPath"])
    path = F.coalesce(F.col("new.fieldPath"), F.col("old.fieldPath"))
    texts_df = matched_df.withColumn("old_text", F.col("old.text")).withColumn("new_text", F.col("new.text"))
    return _description_events(
        texts_df,
        to_schema_field_urn(F.col("entity_urn"), path),
        F.lit("schemaField"),
        {"fieldPath": path, "parentUrn": F.col("entity_urn")},
    )


def to_documentation_events(pairs_df: DataFrame, schema_pairs_df: DataFrame) -> DataFrame:
    """Return the DOCUMENTATION ADD/REMOVE/MODIFY events (no modifier; parameters description, plus fieldPath
    and parentUrn for a field, whose event is on the schemaField urn).

    Args:
        pairs_df: the aspect version pairs (entity descriptions are read from them).
        schema_pairs_df: the schema aspects' pairs with their fields parsed (`with_schema_fields`).
    """
    return _entity_events(pairs_df).unionByName(_field_events(schema_pairs_df))
