"""DataHub aspect JSON: the schema of each aspect the change events read, and the landing check that an
aspect parses for its name.

The schemas are Spark DDL for `from_json`, never inferred. Unions are read the way DataHub serializes
them: a schema field type `{"type": {"com.linkedin.schema.StringType": {}}}` is a map from the union
member's name to its (ignored) body; a structured property value `{"string": "x"}` / `{"double": 1.0}` is
a struct with one member set. Bronze quarantines an aspect whose top-level lists, flags and numbers are
not of their kind (`aspect_problem`), so silver never diffs a value it would misread: a `tags` that is
not a list would read as no tags, and remove them all.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

_TAGS = "STRUCT<tags: ARRAY<STRUCT<tag: STRING>>>"
_TERMS = "STRUCT<terms: ARRAY<STRUCT<urn: STRING>>>"
_OWNER = "STRUCT<owner: STRING, type: STRING, typeUrn: STRING>"
_PROPERTY_VALUES = "ARRAY<STRUCT<string: STRING, double: DOUBLE>>"
_PROPERTY_ASSIGNMENT = f"STRUCT<propertyUrn: STRING, `values`: {_PROPERTY_VALUES}>"

# The parts of each aspect the change event generators read, as Spark DDL (the schema aspects are
# read by `parse_schema_fields`).
ASPECT_SCHEMAS: dict[str, str] = {
    "globalTags": "tags ARRAY<STRUCT<tag: STRING>>",
    "glossaryTerms": "terms ARRAY<STRUCT<urn: STRING>>",
    "domains": "domains ARRAY<STRING>",
    "ownership": f"owners ARRAY<{_OWNER}>",
    "structuredProperties": f"properties ARRAY<{_PROPERTY_ASSIGNMENT}>",
    "deprecation": "deprecated BOOLEAN, note STRING, decommissionTime BIGINT, actor STRING",
    "status": "removed BOOLEAN",
    "actionRequestInfo": (
        "type STRING, resource STRING, resourceType STRING, subResource STRING, subResourceType STRING, "
        "params STRUCT<"
        "tagProposal: STRUCT<tag: STRING, tags: ARRAY<STRING>>, "
        "glossaryTermProposal: STRUCT<glossaryTerm: STRING, glossaryTerms: ARRAY<STRING>>, "
        "domainProposal: STRUCT<domains: ARRAY<STRING>>, "
        f"ownerProposal: STRUCT<owners: ARRAY<{_OWNER}>>, "
        "createGlossaryTermProposal: STRUCT<name: STRING, parentNode: STRING, description: STRING>, "
        "updateDescriptionProposal: STRUCT<description: STRING>, "
        f"structuredPropertyProposal: STRUCT<structuredPropertyValues: ARRAY<{_PROPERTY_ASSIGNMENT}>>, "
        "tag: STRING, glossaryTerm: STRING, domains: ARRAY<STRING>, "
        f"owners: ARRAY<{_OWNER}>, name: STRING, parentNode: STRING, description: STRING, "
        f"structuredPropertyValues: ARRAY<{_PROPERTY_ASSIGNMENT}>>, "
        "createdBy STRING"
    ),
}

# Aspects whose entity-level documentation is one string field: aspect name -> field name.
DESCRIPTION_FIELDS: dict[str, str] = {
    "datasetProperties": "description",
    "editableDatasetProperties": "description",
    "chartInfo": "description",
    "editableChartProperties": "description",
    "dashboardInfo": "description",
    "editableDashboardProperties": "description",
    "dataJobInfo": "description",
    "editableDataJobProperties": "description",
    "dataFlowInfo": "description",
    "editableDataFlowProperties": "description",
    "containerProperties": "description",
    "editableContainerProperties": "description",
    "domainProperties": "description",
    "tagProperties": "description",
    "glossaryTermInfo": "definition",
    "glossaryNodeInfo": "definition",
}

ASPECT_SCHEMAS.update({name: f"{field} STRING" for name, field in DESCRIPTION_FIELDS.items()})

# Aspects whose schemaField children carry tags, terms and descriptions: aspect -> array field name.
FIELD_ARRAYS: dict[str, str] = {
    "schemaMetadata": "fields",
    "editableSchemaMetadata": "editableSchemaFieldInfo",
}

# One schema field as the schema-field generators read it. Both schema aspects parse into it: an
# editableSchemaMetadata field has no nullable, nativeDataType or type (they stay null).
SCHEMA_FIELD = (
    "STRUCT<fieldPath: STRING, nullable: BOOLEAN, nativeDataType: STRING, type: STRUCT<type: MAP<STRING, STRING>>, "
    f"description: STRING, globalTags: {_TAGS}, glossaryTerms: {_TERMS}>"
)

# Strict JSON: the JVM parser would otherwise accept single-quoted text the embedded engine rejects.
JSON_OPTIONS = {"allowSingleQuotes": "false"}

_SHOWN_CHARS = 120
# The kinds of top-level field the check looks at: what it calls each, and how the JSON text of a value
# of that kind looks. A string field reads any JSON value as text, and an object field is read on, so a
# misfit there cannot turn into a change event's missing content.
_KINDS = {
    "ARRAY": ("a list", r"^\[", "ARRAY<STRING>"),
    "BOOLEAN": ("true or false", r"^(true|false)$", "BOOLEAN"),
    "BIGINT": ("a whole number", r"^-?[0-9]{1,18}$", "BIGINT"),
}


def top_level_fields(ddl: str) -> list[tuple[str, str]]:
    """The (name, type) pairs of a struct DDL's top-level fields, e.g. `a INT, b ARRAY<STRING>`."""
    fields, depth, start = [], 0, 0
    for index, char in enumerate(ddl + ","):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "," and depth == 0:
            name, _, data_type = ddl[start:index].strip().partition(" ")
            fields.append((name.strip("`"), data_type.strip()))
            start = index + 1
    return fields


def _kind(data_type: str) -> str:
    return data_type.split("<", 1)[0].strip().upper()


def checked_fields() -> dict[str, list[tuple[str, str]]]:
    """The top-level (field, kind) pairs the check looks at, per aspect: the lists, flags and numbers the
    change events read (an aspect without any is not checked)."""
    schemas = {**ASPECT_SCHEMAS, **{name: f"{array} ARRAY<{SCHEMA_FIELD}>" for name, array in FIELD_ARRAYS.items()}}
    checked = {
        name: [(field, _kind(data_type)) for field, data_type in top_level_fields(ddl) if _kind(data_type) in _KINDS]
        for name, ddl in schemas.items()
    }
    return {name: fields for name, fields in checked.items() if fields}


def quoted_value(column: Column) -> Column:
    """`'value'`, cut to a readable length (`'start...'`): how a quarantine reason shows a value."""
    text = column.cast("string")
    return F.concat(
        F.lit("'"),
        F.substring(text, 1, _SHOWN_CHARS),
        F.when(F.length(text) > _SHOWN_CHARS, F.lit("...'")).otherwise(F.lit("'")),
    )


def _field_problem(aspect_name: str, aspect_json: Column, field: str, kind: str) -> Column:
    """Why one top-level field is not of its kind (null when it is, or is absent, or JSON null)."""
    # The lookup gives a value's JSON text, but a JSON string's text without its quotes: "[a]" or "true"
    # in quotes would pass the shape test. Such a text field is caught by a quote right after the key,
    # then confirmed by a typed parse (which runs only for those rows).
    raw = F.get_json_object(aspect_json, f"$.{field}")
    name, pattern, shallow_type = _KINDS[kind]
    text_value = aspect_json.rlike(f'"{field}"[ \t\r\n]*:[ \t\r\n]*"')
    typed = F.from_json(aspect_json, f"`{field}` {shallow_type}", JSON_OPTIONS)[field]
    message = F.concat(F.lit(f"aspect.value.{field}: "), quoted_value(raw), F.lit(f" is not {name} ({aspect_name})"))
    # Nested conditions, not `&`: the engine computes every operand of an `&` for every row.
    return F.when(
        raw.isNotNull(),
        F.when(~raw.rlike(pattern), message).when(text_value, F.when(typed.isNull(), message)),
    )


def aspect_problem(aspect_name: Column, aspect_json: Column) -> Column:
    """Why an aspect's JSON does not parse for its aspect name, naming the field and value; null when it does.

    For the aspects the change events read, each top-level list, flag or number they read must be of
    its kind when present (a `tags` that is no list would read as no tags, and remove them all). The
    elements of a list, other fields and other aspects land as they are.
    """
    checks = None
    for name, field_kinds in checked_fields().items():
        problems = [_field_problem(name, aspect_json, field, kind) for field, kind in field_kinds]
        problem = problems[0] if len(problems) == 1 else F.coalesce(*problems)
        checks = F.when(aspect_name == name, problem) if checks is None else checks.when(aspect_name == name, problem)
    return checks
