"""What every change event generator shares: the pair columns it reads and the event columns it returns.

A generator takes a DataFrame of (previous aspect, new aspect) pairs, one row per accepted aspect
version (`silver.sequencing.PAIR_COLUMNS`). It computes, per pair, an array of small "change items"
(`item(op, ...)`: what was added, removed or modified), explodes it with `explode_items`, and builds
the event columns row by row with `to_events`. Heavy expressions stay out of array lambdas: the engines
plan them once per row shape instead of once per lambda.

`prev_json` null means the previous aspect is empty (first version, or the aspect was deleted before);
`new_json` null means the new version deletes the aspect.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.aspects import FIELD_ARRAYS
from silver.aspects import parse_aspect, parse_schema_fields

# The columns every generator returns, in this order.
EVENT_COLUMNS = (
    "entity_urn",
    "entity_type",
    "category",
    "operation",
    "modifier",
    "parameters",
    "actor",
    "event_time",
    "aspect_name",
    "aspect_entity_urn",
    "aspect_entity_type",
    "change_set_id",
    "old_value",
    "new_value",
    "source_version",
    "source_order_key",
    "is_delete",
    "batch_id",
    "source_file",
    "line_number",
)


# The pair columns `to_events` reads: all that an exploded change item row has to carry.
LINEAGE_COLUMNS = (
    "entity_urn",
    "entity_type",
    "aspect_name",
    "created_actor",
    "created_time",
    "change_set_id",
    "version",
    "order_key",
    "is_delete",
    "batch_id",
    "source_file",
    "line_number",
)


def nullable(value: Column) -> Column:
    """The value as a nullable expression, so arrays built from literals and from data unify on every engine."""
    return F.when(F.lit(True), value)


def filter_aspects(pairs_df: DataFrame, aspect_names: tuple[str, ...] | list[str]) -> DataFrame:
    """Keep the pairs of the given aspects."""
    return pairs_df.filter(F.col("aspect_name").isin(list(aspect_names)))


def with_parsed(pairs_df: DataFrame, aspect_name: str) -> DataFrame:
    """Add `prev` and `new`: both sides of the pair parsed with the aspect's explicit schema."""
    return pairs_df.withColumn("prev", parse_aspect("prev_json", aspect_name)).withColumn(
        "new", parse_aspect("new_json", aspect_name)
    )


def with_schema_fields(pairs_df: DataFrame) -> DataFrame:
    """The schema aspects' pairs, their JSON replaced by both sides' fields parsed once (`prev_fields`, `new_fields`).

    The input of the schema-field generators (TECHNICAL_SCHEMA, field TAG / GLOSSARY_TERM, field
    DOCUMENTATION); refine writes it once per batch so the three read it instead of parsing again.
    The JSON texts are left out: none of them reads them, and they are most of the bytes.
    """
    return (
        filter_aspects(pairs_df, tuple(FIELD_ARRAYS))
        .withColumn("prev_fields", parse_schema_fields("prev_json"))
        .withColumn("new_fields", parse_schema_fields("new_json"))
        .drop("prev_json", "new_json")
    )


def contains(values: Column, value: Column) -> Column:
    """`array_contains` that treats a null array as empty (false instead of null)."""
    return F.coalesce(F.array_contains(values, value), F.lit(False))


def item(op: str, old: Column, new: Column) -> Column:
    """One change item: the operation and the thing before and after it (one of them unused for ADD / REMOVE)."""
    return F.struct(nullable(F.lit(op)).alias("op"), nullable(old).alias("old"), nullable(new).alias("new"))


def items(op: str, values: Column) -> Column:
    """A change item (old and new: the element) for each element of `values`; a null array gives null."""
    return F.transform(values, lambda v: item(op, v, v))


def explode_items(df: DataFrame, *item_arrays: Column) -> DataFrame:
    """One row per change item (column `item`) of the given arrays, with the LINEAGE_COLUMNS; null arrays count as empty.

    Only the lineage is carried: the aspects' JSON and parsed sides would be copied once per item.
    """
    present = F.filter(F.array(*item_arrays), lambda a: a.isNotNull())
    return df.select(*LINEAGE_COLUMNS, F.explode(F.flatten(present)).alias("item"))


def explode_matched_items(df: DataFrame, prev_items: str, new_items: str, key) -> DataFrame:
    """One row per item key on either side of each pair: the LINEAGE_COLUMNS plus `old` and `new` (null when absent).

    Items are matched by joining rows on (change_set_id, key) rather than by searching one array from
    a lambda over the other, which the engines run far slower on large aspects. Each side must hold
    one item per key (`with_set_items`' prev_set / new_set).

    Args:
        df: pairs, one row per change_set_id.
        prev_items, new_items: the names of the two item array columns.
        key: item Column -> its key (a string).
    """

    def side(items_column: str, name: str) -> DataFrame:
        exploded_df = df.select("change_set_id", F.explode(items_column).alias(name))
        return exploded_df.select("change_set_id", key(F.col(name)).alias("_item_key"), name)

    matched_df = side(prev_items, "old").join(side(new_items, "new"), on=["change_set_id", "_item_key"], how="full_outer")
    return matched_df.join(df.select(*LINEAGE_COLUMNS), on="change_set_id").drop("_item_key")


def to_params_map(entries: Mapping[str, Column]) -> Column:
    """A parameters map from name -> Column: null values are left out; null when nothing is left."""
    if not entries:
        return F.lit(None).cast("map<string,string>")
    names = F.array(*[F.lit(k) for k in entries])
    values = F.array(*[nullable(v.cast("string")) for v in entries.values()])
    built = F.map_filter(F.map_from_arrays(names, values), lambda _, v: v.isNotNull())
    return F.when(F.size(built) > 0, built)


def to_events(
    df: DataFrame,
    *,
    category: Column | str,
    operation: Column | str,
    entity_urn: Column | None = None,
    entity_type: Column | None = None,
    modifier: Column | None = None,
    parameters: Mapping[str, Column] | None = None,
    old_value: Column | None = None,
    new_value: Column | None = None,
) -> DataFrame:
    """Build the event columns of each row (one event per row), with the pair's lineage.

    Args:
        df: pairs, usually exploded to one change item per row.
        category, operation: the event's category and operation (a name or a Column).
        entity_urn, entity_type: the event's entity; default: the entity whose aspect was written.
        modifier: the event's modifier (null: none).
        parameters: name -> value; null values are left out of the map.
        old_value, new_value: JSON text of what changed, before and after.
    """

    def text(value: Column | str | None) -> Column:
        if value is None:
            return F.lit(None).cast("string")
        return F.lit(value) if isinstance(value, str) else value.cast("string")

    return df.select(
        (entity_urn if entity_urn is not None else F.col("entity_urn")).cast("string").alias("entity_urn"),
        (entity_type if entity_type is not None else F.col("entity_type")).cast("string").alias("entity_type"),
        text(category).alias("category"),
        text(operation).alias("operation"),
        text(modifier).alias("modifier"),
        to_params_map(dict(parameters or {})).alias("parameters"),
        F.col("created_actor").alias("actor"),
        F.col("created_time").alias("event_time"),
        F.col("aspect_name"),
        F.col("entity_urn").alias("aspect_entity_urn"),
        F.col("entity_type").alias("aspect_entity_type"),
        F.col("change_set_id"),
        text(old_value).alias("old_value"),
        text(new_value).alias("new_value"),
        F.col("version").alias("source_version"),
        F.col("order_key").alias("source_order_key"),
        F.col("is_delete"),
        F.col("batch_id"),
        F.col("source_file"),
        F.col("line_number"),
    )


def with_set_items(df: DataFrame, prev_items: Column, new_items: Column, key) -> DataFrame:
    """Add the sides of a set of items compared by `key` (a string; items with a null key are ignored).

    Adds `prev_set` and `new_set` (each side's items, the first one per key), `added` and `removed`.
    Order and repeats are not changes. Every intermediate array is a column of its own, so no
    expression is inlined twice.
    """
    sides_df = df.withColumn("_prev", F.filter(prev_items, lambda i: key(i).isNotNull())).withColumn(
        "_new", F.filter(new_items, lambda i: key(i).isNotNull())
    )
    keyed_df = sides_df.withColumn("_prev_keys", F.transform("_prev", key)).withColumn(
        "_new_keys", F.transform("_new", key)
    )
    sets_df = keyed_df.withColumn(
        "prev_set", F.filter("_prev", lambda i, n: F.array_position(F.col("_prev_keys"), key(i)) == n + 1)
    ).withColumn("new_set", F.filter("_new", lambda i, n: F.array_position(F.col("_new_keys"), key(i)) == n + 1))
    return (
        sets_df.withColumn("added", F.filter("new_set", lambda i: ~contains(F.col("_prev_keys"), key(i))))
        .withColumn("removed", F.filter("prev_set", lambda i: ~contains(F.col("_new_keys"), key(i))))
        .drop("_prev", "_new", "_prev_keys", "_new_keys")
    )


def to_urn_set_events(
    pairs_df: DataFrame, *, aspect_name: str, items_field: str, urn_of, category: str, parameter: str
) -> DataFrame:
    """ADD and REMOVE events of an aspect that holds a set of urns (tags, glossary terms): one per urn
    added or removed; the modifier and parameter `parameter` are the urn.

    Args:
        pairs_df: the aspect version pairs (other aspects are left out).
        aspect_name: the aspect, parsed with its explicit schema.
        items_field: the aspect's array of items.
        urn_of: item Column -> its urn; items compare by it, and an item without one is ignored.
        category: the events' category.
        parameter: the parameter holding the urn (e.g. tagUrn).
    """
    parsed_df = with_parsed(filter_aspects(pairs_df, (aspect_name,)), aspect_name)
    sets_df = with_set_items(parsed_df, F.col(f"prev.{items_field}"), F.col(f"new.{items_field}"), urn_of)
    items_df = explode_items(sets_df, items("REMOVE", F.col("removed")), items("ADD", F.col("added")))
    urn = urn_of(F.col("item.new"))
    return to_events(
        items_df,
        category=category,
        operation=F.col("item.op"),
        modifier=urn,
        parameters={parameter: urn},
        old_value=F.when(op_is("REMOVE"), F.to_json("item.old")),
        new_value=F.when(op_is("ADD"), F.to_json("item.new")),
    )


def op_is(name: str) -> Column:
    """True on rows whose change item is `name` (ADD, REMOVE or MODIFY)."""
    return F.col("item.op") == F.lit(name)
