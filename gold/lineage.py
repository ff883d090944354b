"""Lineage edges over time: every lineage aspect version of DataHub turned into edges with their validity.

An edge (upstream_urn -> downstream_urn, edge_kind) is held by one aspect of one entity, its owner
(`upstreamLineage` of the downstream dataset, `dataJobInputOutput` of the job, `chartInfo` of the
chart, ...). It is valid from the owner's aspect version that added it (inclusive, by created time)
to the version that removed it (exclusive, null while it holds). A soft delete (`status.removed`)
or a hard delete (a DELETE of the key aspect) of the owner or of the entity at either end ends the
edge, and a restore starts it again while the aspect still holds it: the edge's row then names the
status or key aspect version in valid_from_*/valid_to_*.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gold.impact import COLUMN_KIND, PUBLISHED_SEQ
from silver.aspects import is_key_aspect

# Each lineage aspect, with the entity types that write it.
LINEAGE_ASPECTS = (
    "upstreamLineage",
    "dataJobInputOutput",
    "chartInfo",
    "dashboardInfo",
    "dataProcessInstanceInput",
    "dataProcessInstanceOutput",
    "mlModelProperties",
)
STATUS_ASPECT = "status"

# Every lineage field of the aspects above in one schema (each name has one type across them); an
# urn list whose items are objects (`chartInfo.inputs` as `{"string": urn}`) is read as JSON text.
_URNS = "ARRAY<STRING>"
_EDGES = "ARRAY<STRUCT<destinationUrn: STRING>>"
_LINEAGE_SCHEMA = (
    "upstreams ARRAY<STRUCT<dataset: STRING>>, "
    "fineGrainedLineages ARRAY<STRUCT<upstreams: ARRAY<STRING>, downstreams: ARRAY<STRING>>>, "
    f"inputDatasets {_URNS}, outputDatasets {_URNS}, inputDatajobs {_URNS}, "
    f"inputDatasetEdges {_EDGES}, outputDatasetEdges {_EDGES}, inputDatajobEdges {_EDGES}, "
    f"inputs {_URNS}, inputEdges {_EDGES}, outputs {_URNS}, outputEdges {_EDGES}, "
    f"charts {_URNS}, chartEdges {_EDGES}, datasets {_URNS}, datasetEdges {_EDGES}, "
    f"trainingJobs {_URNS}, downstreamJobs {_URNS}, removed BOOLEAN"
)

# The columns of gold.lineage_edges the transform derives (batch_id is the publish's).
EDGE_COLUMNS = (
    "edge_id",
    "upstream_urn",
    "downstream_urn",
    "edge_kind",
    "owner_urn",
    "aspect_name",
    "valid_from_time",
    "valid_from_version",
    "valid_from_aspect",
    "added_by",
    "valid_to_time",
    "valid_to_version",
    "valid_to_aspect",
    "removed_by",
)


def is_lineage_input(aspect_name: Column | str, entity_type: Column | str) -> Column:
    """True for the aspects the edges depend on: the lineage aspects, `status` and the entity's key aspect."""
    name = F.col(aspect_name) if isinstance(aspect_name, str) else aspect_name
    kind = F.col(entity_type) if isinstance(entity_type, str) else entity_type
    return name.isin(*LINEAGE_ASPECTS, STATUS_ASPECT) | is_key_aspect(name, kind)


def _urn_items(urns: Column) -> Column:
    """The urns of a list, an item given as `{"string": urn}` (a Pegasus union) read as its urn."""
    return F.transform(F.coalesce(urns, F.array()), lambda item: F.coalesce(F.get_json_object(item, "$.string"), item))


def _destinations(edges: Column) -> Column:
    return F.transform(F.coalesce(edges, F.array()), lambda edge: edge["destinationUrn"])


def _edges(upstreams: Column, downstreams: Column, kind: str) -> Column:
    """Every (upstream, downstream) pair of two urn lists as edge structs of one kind."""
    return F.flatten(
        F.transform(
            upstreams,
            lambda up: F.transform(
                downstreams,
                lambda down: F.struct(up.alias("upstream_urn"), down.alias("downstream_urn"), F.lit(kind).alias("edge_kind")),
            ),
        )
    )


def _column_edges(fine_grained: Column) -> Column:
    return F.flatten(
        F.transform(
            F.coalesce(fine_grained, F.array()),
            lambda lineage: _edges(
                F.coalesce(lineage["upstreams"], F.array()), F.coalesce(lineage["downstreams"], F.array()), COLUMN_KIND
            ),
        )
    )


def _aspect_edges(parsed: Column, owner: Column) -> dict[str, Column]:
    """Per lineage aspect, the edges one parsed version holds: an array of (upstream_urn, downstream_urn, edge_kind)."""
    me = F.array(owner)

    def both(plain: str, edges: str) -> Column:
        return F.concat(_urn_items(parsed[plain]), _destinations(parsed[edges]))

    by_aspect = {
        "upstreamLineage": F.concat(
            _edges(F.transform(F.coalesce(parsed["upstreams"], F.array()), lambda u: u["dataset"]), me, "dataset"),
            _column_edges(parsed["fineGrainedLineages"]),
        ),
        "dataJobInputOutput": F.concat(
            _edges(both("inputDatasets", "inputDatasetEdges"), me, "job-input"),
            _edges(me, both("outputDatasets", "outputDatasetEdges"), "job-output"),
            _edges(both("inputDatajobs", "inputDatajobEdges"), me, "job-upstream-job"),
            _column_edges(parsed["fineGrainedLineages"]),
        ),
        "chartInfo": _edges(both("inputs", "inputEdges"), me, "chart-input"),
        "dashboardInfo": F.concat(
            _edges(both("charts", "chartEdges"), me, "dashboard-chart"),
            _edges(both("datasets", "datasetEdges"), me, "dashboard-dataset"),
        ),
        "dataProcessInstanceInput": _edges(both("inputs", "inputEdges"), me, "process-input"),
        "dataProcessInstanceOutput": _edges(me, both("outputs", "outputEdges"), "process-output"),
        "mlModelProperties": F.concat(
            _edges(_urn_items(parsed["trainingJobs"]), me, "model-training-job"),
            _edges(me, _urn_items(parsed["downstreamJobs"]), "model-downstream-job"),
        ),
    }
    return by_aspect


def to_version_edges(versions_df: DataFrame) -> DataFrame:
    """One row per (lineage aspect version, edge it holds), distinct.

    Args:
        versions_df: accepted aspect versions (`entity_urn`, `aspect_name`, `order_key`, `new_json`,
            null on a DELETE), of lineage aspects.

    Returns:
        entity_urn, aspect_name, order_key, upstream_urn, downstream_urn, edge_kind; an edge naming a
        blank urn or the owner on both ends is left out.
    """
    key = ("entity_urn", "aspect_name", "order_key")
    # Parsed once into a column, and each aspect's edges built on its own rows only: one expression
    # choosing among all aspects had the engine parse the JSON once per field it reads.
    parsed_df = versions_df.filter(F.col("aspect_name").isin(*LINEAGE_ASPECTS) & F.col("new_json").isNotNull()).select(
        *key, F.from_json(F.col("new_json"), _LINEAGE_SCHEMA).alias("_parsed")
    )
    edges_df = None
    for name, edges in _aspect_edges(F.col("_parsed"), F.col("entity_urn")).items():
        part_df = parsed_df.filter(F.col("aspect_name") == name).select(*key, F.explode(edges).alias("edge"))
        edges_df = part_df if edges_df is None else edges_df.unionByName(part_df)
    return (
        edges_df.select(*key, "edge.*")
        .filter(
            (F.trim(F.coalesce(F.col("upstream_urn"), F.lit(""))) != "")
            & (F.trim(F.coalesce(F.col("downstream_urn"), F.lit(""))) != "")
            & (F.col("upstream_urn") != F.col("downstream_urn"))
        )
        .distinct()
    )


def _aspect_intervals(versions_df: DataFrame, version_edges_df: DataFrame | None = None) -> DataFrame:
    """Each edge's runs of consecutive versions of its aspect: from the version adding it to the one removing it."""
    key = ["entity_urn", "aspect_name"]
    edge = ["upstream_urn", "downstream_urn", "edge_kind"]
    numbered_df = versions_df.filter(F.col("aspect_name").isin(*LINEAGE_ASPECTS)).withColumn(
        "_idx", F.row_number().over(Window.partitionBy(*key).orderBy("order_key"))
    )
    stamps_df = numbered_df.select(*key, "_idx", "created_time", "version", "created_actor")
    if version_edges_df is None:
        version_edges_df = to_version_edges(numbered_df)
    present_df = version_edges_df.join(numbered_df.select(*key, "order_key", "_idx"), [*key, "order_key"])
    island = F.col("_idx") - F.row_number().over(Window.partitionBy(*key, *edge).orderBy("_idx"))
    runs_df = (
        present_df.withColumn("_island", island)
        .groupBy(*key, *edge, "_island")
        .agg(F.min("_idx").alias("_first"), F.max("_idx").alias("_last"))
    )
    start_df = stamps_df.select(
        *key,
        F.col("_idx").alias("_first"),
        F.col("created_time").alias("from_time"),
        F.col("version").alias("from_version"),
        F.col("created_actor").alias("from_actor"),
    )
    end_df = stamps_df.select(
        *key,
        (F.col("_idx") - 1).alias("_last"),
        F.col("created_time").alias("to_time"),
        F.col("version").alias("to_version"),
        F.col("created_actor").alias("to_actor"),
    )
    return (
        runs_df.join(start_df, [*key, "_first"])
        .join(end_df, [*key, "_last"], "left")
        .withColumn("from_aspect", F.col("aspect_name"))
        .withColumn("to_aspect", F.when(F.col("to_time").isNotNull(), F.col("aspect_name")))
        .drop("_island", "_first", "_last")
    )


def _alive_intervals(versions_df: DataFrame) -> DataFrame:
    """Each entity's spans of existence: between a hard or soft delete and the write that restores it.

    An entity with no status or key aspect version exists throughout (one span, null bounds: no limit).
    """
    lifecycle_df = versions_df.filter(
        (F.col("aspect_name") == STATUS_ASPECT) | is_key_aspect(F.col("aspect_name"), F.col("entity_type"))
    )
    status = F.col("aspect_name") == STATUS_ASPECT
    removed = F.coalesce(F.from_json(F.col("new_json"), _LINEAGE_SCHEMA)["removed"], F.lit(False))
    ordered = Window.partitionBy("entity_urn").orderBy("created_time", "aspect_name", "order_key")
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    points_df = (
        lifecycle_df.withColumn("_soft", F.when(status, F.col("new_json").isNotNull() & removed))
        .withColumn("_hard", F.when(~status, F.col("new_json").isNull()))
        .withColumn(
            "_deleted",
            F.coalesce(F.last("_soft", True).over(so_far), F.lit(False))
            | F.coalesce(F.last("_hard", True).over(so_far), F.lit(False)),
        )
        .withColumn("_was_deleted", F.coalesce(F.lag("_deleted").over(ordered), F.lit(False)))
        .filter(F.col("_deleted") != F.col("_was_deleted"))
        .select(
            "entity_urn",
            "_deleted",
            "created_time",
            "version",
            "created_actor",
            "aspect_name",
            F.row_number().over(ordered).alias("_n"),
        )
    )
    # Consecutive flips alternate: each restore (or the start) opens a span, the next delete closes it.
    flips = Window.partitionBy("entity_urn").orderBy("_n")
    starts_df = points_df.withColumn("_next", F.lead(F.struct("created_time", "version", "created_actor", "aspect_name")).over(flips))
    spans_df = starts_df.filter(~F.col("_deleted")).select(
        "entity_urn",
        F.col("created_time").alias("alive_from_time"),
        F.col("version").alias("alive_from_version"),
        F.col("created_actor").alias("alive_from_actor"),
        F.col("aspect_name").alias("alive_from_aspect"),
        F.col("_next.created_time").alias("alive_to_time"),
        F.col("_next.version").alias("alive_to_version"),
        F.col("_next.created_actor").alias("alive_to_actor"),
        F.col("_next.aspect_name").alias("alive_to_aspect"),
    )
    first_df = starts_df.filter(F.col("_n") == 1).select(
        "entity_urn",
        F.lit(None).cast("bigint").alias("alive_from_time"),
        F.lit(None).cast("bigint").alias("alive_from_version"),
        F.lit(None).cast("string").alias("alive_from_actor"),
        F.lit(None).cast("string").alias("alive_from_aspect"),
        F.when(F.col("_deleted"), F.col("created_time")).alias("alive_to_time"),
        F.when(F.col("_deleted"), F.col("version")).alias("alive_to_version"),
        F.when(F.col("_deleted"), F.col("created_actor")).alias("alive_to_actor"),
        F.when(F.col("_deleted"), F.col("aspect_name")).alias("alive_to_aspect"),
    )
    # An entity whose first flip is a delete lived before it; one whose first flip is a restore was
    # created by it, and `spans_df` holds that span already.
    return spans_df.unionByName(first_df.filter(F.col("alive_to_time").isNotNull()))


# The fields of a span's start (from_*) and end (to_*).
_BOUNDS = ("time", "version", "actor", "aspect")


def entity_of(urn: Column) -> Column:
    """The entity an edge end belongs to: a schema field's dataset (or other parent), else the urn itself."""
    parent = F.regexp_extract(urn, r"^urn:li:schemaField:\((.*),[^,]*\)$", 1)
    return F.when(urn.startswith("urn:li:schemaField:(") & (parent != ""), parent).otherwise(urn)


def _within_alive(spans_df: DataFrame, alive_df: DataFrame, entity: Column) -> DataFrame:
    """Narrow each span (from_*, to_*) to the times the entity `entity` names existed.

    A span of an entity without lifecycle flips (no row in `alive_df`: the left join's bounds are null,
    no limit) is kept whole; one that overlaps none of the entity's spans of existence is dropped; one
    that overlaps several is cut into one per overlap. One join, so the plan grows by one per call.
    """
    columns = spans_df.columns
    alive = alive_df.withColumnRenamed("entity_urn", "_alive_urn")
    overlaps = (F.col("alive_to_time").isNull() | (F.col("alive_to_time") > F.col("from_time"))) & (
        F.col("to_time").isNull() | F.col("alive_from_time").isNull() | (F.col("alive_from_time") < F.col("to_time"))
    )
    after_start = F.col("alive_from_time").isNotNull() & (F.col("alive_from_time") > F.col("from_time"))
    before_end = F.col("alive_to_time").isNotNull() & (
        F.col("to_time").isNull() | (F.col("alive_to_time") < F.col("to_time"))
    )
    joined_df = spans_df.withColumn("_alive_urn", entity).join(alive, "_alive_urn", "left").filter(overlaps)
    bounds = {f"from_{name}": F.when(after_start, F.col(f"alive_from_{name}")).otherwise(F.col(f"from_{name}")) for name in _BOUNDS}
    bounds |= {f"to_{name}": F.when(before_end, F.col(f"alive_to_{name}")).otherwise(F.col(f"to_{name}")) for name in _BOUNDS}
    return joined_df.select(*[bounds[c].alias(c) if c in bounds else F.col(c) for c in columns])


def to_lineage_edges(versions_df: DataFrame, version_edges_df: DataFrame | None = None) -> DataFrame:
    """Every lineage edge of the given entities with the spans it was valid, from their full aspect history.

    Args:
        versions_df: every accepted version (`silver.sequencing.to_pairs` columns: entity_urn, entity_type,
            aspect_name, order_key, version, created_time, created_actor, new_json) of the lineage
            aspects, `status` and key aspect of each owner it holds, and of the `status` and key aspect
            of the entities at the other end of their edges (only lineage aspects make edges).
        version_edges_df: `to_version_edges(versions_df)` when already at hand (staged): not parsed again.

    Returns:
        `EDGE_COLUMNS`: one row per edge and span; valid_to_* null while the edge holds. A span
        starts at the aspect version adding the edge or at the restore of its owner or of either end
        (a schema field's dataset for a column edge), and ends at the version removing it or at the
        delete of one of them (valid_*_aspect names which).
    """
    alive_df = _alive_intervals(versions_df)
    spans_df = _aspect_intervals(versions_df, version_edges_df)
    for entity in (F.col("entity_urn"), entity_of(F.col("upstream_urn")), entity_of(F.col("downstream_urn"))):
        spans_df = _within_alive(spans_df, alive_df, entity)
    return spans_df.select(
        F.sha2(
            F.concat_ws(
                "\u001f", "entity_urn", "aspect_name", "upstream_urn", "downstream_urn", "edge_kind",
                F.col("from_time").cast("string"),
            ),
            256,
        ).alias("edge_id"),
        "upstream_urn",
        "downstream_urn",
        "edge_kind",
        F.col("entity_urn").alias("owner_urn"),
        "aspect_name",
        F.col("from_time").alias("valid_from_time"),
        F.col("from_version").alias("valid_from_version"),
        F.col("from_aspect").alias("valid_from_aspect"),
        F.col("from_actor").alias("added_by"),
        F.col("to_time").alias("valid_to_time"),
        F.col("to_version").alias("valid_to_version"),
        F.col("to_aspect").alias("valid_to_aspect"),
        F.col("to_actor").alias("removed_by"),
    )  # fmt: skip


def to_publish_markers(owners_df: DataFrame) -> DataFrame:
    """One marker row per owner a publish derived: `owner_urn` with every edge column null (edge_kind null marks it).

    Appended with the owners' edges under the publish's `published_seq`, it makes that publish the
    owner's newest even when the owner holds no edge any more, so its older rows fold away.
    """
    numbers = {"valid_from_time", "valid_from_version", "valid_to_time", "valid_to_version"}
    nulls = [F.lit(None).cast("bigint" if c in numbers else "string").alias(c) for c in EDGE_COLUMNS if c != "owner_urn"]
    return owners_df.select("owner_urn", *nulls)


def to_current_edges(edges_df: DataFrame) -> DataFrame:
    """The rows of each owner's newest publish, markers left out: the lineage edges as they stand.

    Args:
        edges_df: rows of gold.lineage_edges (published_seq null counts as 0, before any later publish).

    Returns:
        `edges_df`'s columns: per owner, its rows of the highest published_seq among its rows, the
        markers (edge_kind null) dropped.
    """
    seq = F.coalesce(F.col(PUBLISHED_SEQ), F.lit(0))
    newest_df = (
        edges_df.filter(F.col("edge_kind").isNull())
        .groupBy(F.col("owner_urn").alias("_newest_owner"))
        .agg(F.max(seq).alias("_newest_seq"))
    )
    # Only the owners published since the last compaction have markers: the other rows stand as they are.
    return (
        edges_df.filter(F.col("edge_kind").isNotNull())
        .join(F.broadcast(newest_df), F.col("owner_urn") == F.col("_newest_owner"), "left")
        .filter(F.col("_newest_seq").isNull() | (seq == F.col("_newest_seq")))
        .drop("_newest_owner", "_newest_seq")
    )
