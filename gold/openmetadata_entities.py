"""OpenMetadata's names for DataHub's entities: event types, entity types, ids, fully qualified names.

The rules are the ones documented in docs/openmetadata.md (mapping rules); the constants below are their
single source. `gold.openmetadata_changes` builds the changeDescription on them, `gold.openmetadata`
the ChangeEvents.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

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

# entityId = uuid5(NAMESPACE_URL, urn); a ChangeEvent's id = uuid5(NAMESPACE_URL, EVENT_ID_PREFIX + change_set_id)
# (gold.openmetadata_changes).
ID_NAMESPACE = uuid.NAMESPACE_URL

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


def entity_name(urn: Column) -> Column:
    """The entity's own name: the last part of a dataset or glossary term name, a chart/dashboard/flow id."""
    last_part = F.element_at(F.split(F.regexp_extract(urn, _DATASET_URN, 2), r"\."), -1)
    return (
        F.when(urn.rlike(_DATASET_URN), last_part)
        .when(urn.rlike(_TOOL_URN), F.regexp_extract(urn, _TOOL_URN, 2))
        .when(urn.rlike(_FLOW_URN), F.regexp_extract(urn, _FLOW_URN, 2))
        .when(urn.startswith("urn:li:glossaryTerm:"), F.element_at(F.split(to_urn_id(urn), r"\."), -1))
        .otherwise(to_urn_id(urn))
    )


def to_entity_reference(urn: Column) -> Column:
    """An OpenMetadata EntityReference `{name, fullyQualifiedName, id, type}` as JSON text.

    The name comes first, like in every list item here, so that sorting the JSON texts sorts by name.
    """
    datahub_type = F.regexp_extract(urn, _URN_TYPE, 1)
    return F.to_json(
        F.struct(
            entity_name(urn).alias("name"),
            to_fully_qualified_name(urn).alias("fullyQualifiedName"),
            to_uuid5(urn).alias("id"),
            F.coalesce(to_openmetadata_entity_type(datahub_type), datahub_type).alias("type"),
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
        .withColumn("entity_name", entity_name(F.col("om_urn")))
    )


def to_entity_json() -> Column:
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
