"""Column helpers to read DataHub aspect JSON with the explicit schemas of `bronze.aspects`.

Every aspect is parsed with `from_json` and its schema, never with schema inference; bronze landed only
aspects that fit it.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from bronze.aspects import ASPECT_SCHEMAS, FIELD_ARRAYS, SCHEMA_FIELD
from conf.errors import InputError


def _as_column(value: Column | str) -> Column:
    """A column given by name or as a Column."""
    return F.col(value) if isinstance(value, str) else value


def aspect_schema(aspect_name: str) -> str:
    """Return the DDL schema used to parse one aspect's JSON.

    Raises:
        InputError: for an aspect no change event generator reads.
    """
    try:
        return ASPECT_SCHEMAS[aspect_name]
    except KeyError:
        raise InputError(f"aspect_name: no schema for aspect {aspect_name!r}") from None


def parse_schema_fields(json_col: Column | str) -> Column:
    """Parse a schemaMetadata or editableSchemaMetadata JSON text into its array of SCHEMA_FIELD (null text gives null).

    Schema aspects are the largest JSON by far and three generators read them, so they are parsed once
    into this one shape: `fields` of schemaMetadata or `editableSchemaFieldInfo`, whichever the text has.
    """
    column = _as_column(json_col)
    arrays = ", ".join(f"{name} ARRAY<{SCHEMA_FIELD}>" for name in FIELD_ARRAYS.values())
    parsed = F.from_json(column, arrays)
    return F.coalesce(*[parsed[name] for name in FIELD_ARRAYS.values()])


def parse_aspect(json_col: Column | str, aspect_name: str) -> Column:
    """Parse aspect JSON text into a struct with the aspect's explicit schema (null text gives null).

    Args:
        json_col: the JSON text column.
        aspect_name: the aspect (its schema from ASPECT_SCHEMAS).
    """
    column = _as_column(json_col)
    return F.from_json(column, aspect_schema(aspect_name))


def is_key_aspect(aspect_name: Column | str, entity_type: Column | str) -> Column:
    """True when the aspect is the entity's key aspect (`datasetKey` for a dataset, `corpUserKey` for a corpuser)."""
    aspect = _as_column(aspect_name)
    entity = _as_column(entity_type)
    return aspect.endswith("Key") & (F.lower(aspect) == F.concat(F.lower(entity), F.lit("key")))


def entity_type_of_urn(urn: Column | str) -> Column:
    """The entity type named by an urn: `urn:li:<type>:...` gives `<type>` (null when not an urn)."""
    column = _as_column(urn)
    return F.nullif(F.regexp_extract(column, r"^urn:li:([^:]+):", 1), F.lit(""))


def to_schema_field_urn(dataset_urn: Column | str, field_path: Column | str) -> Column:
    """The schemaField urn of a dataset's field: `urn:li:schemaField:(<datasetUrn>,<fieldPath>)`."""
    dataset = _as_column(dataset_urn)
    path = _as_column(field_path)
    return F.concat(F.lit("urn:li:schemaField:("), dataset, F.lit(","), path, F.lit(")"))


def _json_literal(value: Column) -> Column:
    """One value as a JSON literal: the text between the brackets of the one-element JSON array."""
    # (?s): the text may hold line separators (U+2028, U+0085) that JSON writers leave unescaped and
    # that `.` does not match on every engine.
    return F.regexp_extract(F.to_json(F.array(value)), r"(?s)^\[(.*)\]$", 1)


def to_json_string(value: Column) -> Column:
    """A string as a JSON string literal (quoted and escaped), null stays null."""
    return F.when(value.isNotNull(), _json_literal(value))


def _property_value_tokens(values: Column) -> Column:
    """Structured property values (`[{"string": ..} | {"double": ..}]`) as JSON literals, in order."""
    return F.transform(
        F.coalesce(values, F.array().cast("array<struct<string: string, double: double>>")),
        lambda v: F.when(v["string"].isNotNull(), to_json_string(v["string"]))
        .when(v["double"].isNotNull(), _json_literal(v["double"]))
        .otherwise(F.lit("null")),
    )


def to_property_values_json(values: Column) -> Column:
    """Structured property values as compact JSON text, e.g. `["a",1.0]`.

    Strings become JSON strings and doubles JSON numbers, in the aspect's order, as DataHub writes them.
    """
    return F.concat(F.lit("["), F.array_join(_property_value_tokens(values), ","), F.lit("]"))


def to_property_value_set(values: Column) -> Column:
    """Structured property values as a set (sorted, distinct JSON literals): what a change is judged on."""
    return F.array_sort(F.array_distinct(_property_value_tokens(values)))


def blank_to_null(text: Column) -> Column:
    """Null for a missing, empty or whitespace-only string: an empty description counts as none."""
    return F.when(F.trim(text) != F.lit(""), text)
