"""The publish_lineage stage on real Delta tables: incremental by entity, idempotent, and fed by DataHub's SDK classes."""

from __future__ import annotations

from datahub.emitter.mcp import MetadataChangeProposalWrapper
from datahub.metadata.schema_classes import (
    ChangeAuditStampsClass,
    ChartInfoClass,
    DashboardInfoClass,
    DataJobInputOutputClass,
    EdgeClass,
    FineGrainedLineageClass,
    StatusClass,
    SystemMetadataClass,
    UpstreamClass,
    UpstreamLineageClass,
)

from deltalake import DeltaTable

from conf.tables import table_location
from gold.impact import PUBLISHED_SEQ
from gold.lineage import EDGE_COLUMNS, to_current_edges
from pipelines.batch.publish_lineage import MAX_APPENDED_OWNERS, MAX_NAMED_ENTITIES, compact_lineage_edges, publish_lineage
from pipelines.serving.impact import current_entity_edges
from pipelines.runtime.home import home_of
from pipelines.runtime.io import read_table
from pipelines.runtime.progress import record_progress
from tests.conftest import make_settings, register_fresh_tables
from tests.silver.bronze_rows import land, mcl, to_bronze_rows

A = "urn:li:dataset:(urn:li:dataPlatform:hive,a,PROD)"
B = "urn:li:dataset:(urn:li:dataPlatform:hive,b,PROD)"
C = "urn:li:dataset:(urn:li:dataPlatform:hive,c,PROD)"
JOB = "urn:li:dataJob:(urn:li:dataFlow:(airflow,etl,PROD),load)"
CHART = "urn:li:chart:(looker,orders)"
DASH = "urn:li:dashboard:(looker,sales)"
ANN, BOB = "urn:li:corpuser:ann", "urn:li:corpuser:bob"


def refined_batch(spark, settings, batch_id: str, records: list[dict], index: int) -> None:
    """Land `records` as one batch and record that refine finished it (this stage reads bronze)."""
    land(spark, settings, to_bronze_rows(records, batch_id, batch_index=index))
    record_progress(spark, settings, "refine", "bronze.aspect_snapshots", batch_id, rows_in=len(records), rows_out=0)


def edges(spark, settings) -> set[tuple]:
    names = ("upstream_urn", "downstream_urn", "edge_kind", "valid_from_time", "added_by", "valid_to_time", "removed_by")
    rows = [tuple(r[n] for n in names) for r in current_rows(spark, settings)]
    assert len(rows) == len(set(rows)), "an edge span twice in the folded table"
    return set(rows)


def current_rows(spark, settings) -> list:
    """The table's rows as readers see them: each owner's newest publish."""
    return to_current_edges(read_table(spark, settings, "gold.lineage_edges")).collect()


def test_each_batch_rederives_only_the_entities_it_wrote_and_a_rerun_changes_nothing(spark, tmp_path):
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    refined_batch(spark, settings, "b1", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": A}]}, version=1, time=1_000, actor=ANN),
        mcl(CHART, "chartInfo", {"title": "t", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
    ], 0)  # fmt: skip
    first = publish_lineage(spark, settings)
    assert (first.batch_ids, first.rows_in, first.rows_out) == (("b1",), 2, 2)
    assert edges(spark, settings) == {
        (A, B, "dataset", 1_000, ANN, None, None),
        (B, CHART, "chart-input", 1_000, ANN, None, None),
    }
    refined_batch(spark, settings, "b2", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": C}]}, version=2, time=2_000, actor=BOB),
        mcl(B, "status", {"removed": True}, version=1, time=3_000, actor=BOB),
        mcl(B, "status", {"removed": False}, version=2, time=4_000, actor=ANN),
    ], 1)  # fmt: skip
    second = publish_lineage(spark, settings)
    # b and the chart, whose edge's upstream end b's soft delete cut: derived again.
    assert (second.batch_ids, second.rows_in) == (("b2",), 2)
    expected = {
        (A, B, "dataset", 1_000, ANN, 2_000, BOB),
        (C, B, "dataset", 2_000, BOB, 3_000, BOB),
        (C, B, "dataset", 4_000, ANN, None, None),
        (B, CHART, "chart-input", 1_000, ANN, 3_000, BOB),
        (B, CHART, "chart-input", 4_000, ANN, None, None),
    }
    assert edges(spark, settings) == expected
    assert {r.batch_id for r in current_rows(spark, settings) if r.owner_urn == CHART} == {"b2"}
    assert publish_lineage(spark, settings).batch_ids == ()
    assert edges(spark, settings) == expected

    def graph_as_of(ms: int) -> set[tuple]:
        at = f"timestamp_millis({ms})"
        return {tuple(r) for r in spark.sql(
            "SELECT upstream_urn, downstream_urn FROM gold.lineage_graph "
            f"WHERE valid_from <= {at} AND (valid_to IS NULL OR valid_to > {at})"
        ).collect()}  # fmt: skip

    assert graph_as_of(1_500) == {(A, B), (B, CHART)}
    assert graph_as_of(2_500) == {(C, B), (B, CHART)}
    assert graph_as_of(3_500) == set()  # b soft-deleted from 3_000 to 4_000: the edges at both its ends
    assert graph_as_of(4_000) == {(C, B), (B, CHART)}


def test_a_deleted_upstream_ends_the_edge_and_its_restore_reopens_it_while_the_aspect_holds_it(spark, tmp_path):
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    # a is soft-deleted before b names it: the edge a -> b is never valid and has no row yet.
    refined_batch(spark, settings, "b1", [
        mcl(A, "status", {"removed": True}, version=1, time=500, actor=BOB),
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": A}]}, version=1, time=1_000, actor=ANN),
        mcl(CHART, "chartInfo", {"title": "t", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
    ], 0)  # fmt: skip
    publish_lineage(spark, settings)
    assert edges(spark, settings) == {(B, CHART, "chart-input", 1_000, ANN, None, None)}
    refined_batch(spark, settings, "b2", [mcl(A, "status", {"removed": False}, version=2, time=2_000, actor=ANN)], 1)
    publish_lineage(spark, settings)
    assert edges(spark, settings) == {
        (A, B, "dataset", 2_000, ANN, None, None),  # a's restore opens it: b's aspect still names a
        (B, CHART, "chart-input", 1_000, ANN, None, None),
    }
    # b hard-deleted (its key aspect deleted), then created again: the edges at both its ends end and reopen.
    refined_batch(spark, settings, "b3", [
        mcl(B, "datasetKey", None, version=1, time=3_000, actor=BOB, change_type="DELETE"),
    ], 2)  # fmt: skip
    refined_batch(spark, settings, "b4", [
        mcl(B, "datasetKey", {"platform": "urn:li:dataPlatform:hive", "name": "b", "origin": "PROD"}, version=2, time=4_000, actor=ANN),
    ], 3)  # fmt: skip
    publish_lineage(spark, settings)
    expected = {
        (A, B, "dataset", 2_000, ANN, 3_000, BOB),
        (A, B, "dataset", 4_000, ANN, None, None),
        (B, CHART, "chart-input", 1_000, ANN, 3_000, BOB),
        (B, CHART, "chart-input", 4_000, ANN, None, None),
    }
    assert edges(spark, settings) == expected
    restored = {r.valid_from_aspect for r in current_rows(spark, settings) if r.valid_from_time == 4_000}
    assert restored == {"datasetKey"}
    assert publish_lineage(spark, settings).batch_ids == ()
    assert edges(spark, settings) == expected



def test_many_owners_and_many_deleted_ends_take_the_joined_path_with_the_same_rows(spark, tmp_path):
    # Past MAX_NAMED_ENTITIES deleted ends the owners are found by joins, past MAX_APPENDED_OWNERS
    # the table is folded after the append: the rows are those a few named ones give.
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    owners = [f"urn:li:dataset:(urn:li:dataPlatform:hive,o{n},PROD)" for n in range(MAX_APPENDED_OWNERS + 1)]
    inputs = [f"urn:li:dataset:(urn:li:dataPlatform:hive,i{n},PROD)" for n in range(len(owners))]
    shared = "urn:li:dataset:(urn:li:dataPlatform:hive,shared,PROD)"
    deleted = range(MAX_NAMED_ENTITIES + 1)
    refined_batch(spark, settings, "b1", [
        mcl(owner, "upstreamLineage", {"upstreams": [{"dataset": up}]}, version=1, time=1_000, actor=ANN)
        for owner, up in zip(owners, inputs)
    ], 0)  # fmt: skip
    assert publish_lineage(spark, settings).rows_in == len(owners)
    refined_batch(spark, settings, "b2", [
        mcl(inputs[n], "status", {"removed": True}, version=1, time=2_000, actor=BOB) for n in deleted
    ], 1)  # fmt: skip
    assert publish_lineage(spark, settings).rows_in == 2 * len(deleted)  # the deleted, and the owners of their edges
    refined_batch(spark, settings, "b3", [
        mcl(owner, "upstreamLineage", {"upstreams": [{"dataset": up}, {"dataset": shared}]}, version=2, time=3_000, actor=ANN)
        for owner, up in zip(owners, inputs)
    ], 2)  # fmt: skip
    assert publish_lineage(spark, settings).rows_in == len(owners)
    expected = {(up, owner, "dataset", 1_000, ANN, 2_000, BOB) for owner, up in zip(owners[: len(deleted)], inputs)}
    expected |= {(up, owner, "dataset", 1_000, ANN, None, None) for owner, up in zip(owners[len(deleted) :], inputs[len(deleted) :])}
    expected |= {(shared, owner, "dataset", 3_000, ANN, None, None) for owner in owners}
    assert edges(spark, settings) == expected
    assert read_table(spark, settings, "gold.lineage_edges").count() == len(expected)  # folded: no row superseded


def data_files(settings) -> set[str]:
    return set(DeltaTable(str(table_location(settings, "gold.lineage_edges"))).file_uris())


def test_a_micro_batch_appends_its_owners_newest_rows_and_every_reader_sees_only_those(spark, tmp_path):
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    refined_batch(spark, settings, "b1", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": A}]}, version=1, time=1_000, actor=ANN),
        mcl(CHART, "chartInfo", {"title": "t", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
        mcl(DASH, "dashboardInfo", {"title": "d", "charts": [CHART]}, version=1, time=1_000, actor=ANN),
    ], 0)  # fmt: skip
    publish_lineage(spark, settings)
    first_files = data_files(settings)
    # b's upstream replaced, the dashboard left with no edge at all: its older row must fold away too.
    refined_batch(spark, settings, "b2", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": C}]}, version=2, time=2_000, actor=BOB),
        mcl(DASH, "dashboardInfo", {"title": "d", "charts": []}, version=2, time=2_000, actor=BOB),
    ], 1)  # fmt: skip
    publish_lineage(spark, settings)
    assert first_files <= data_files(settings)  # appended: the files holding the owners' earlier rows are kept
    expected = {
        (A, B, "dataset", 1_000, ANN, 2_000, BOB),
        (C, B, "dataset", 2_000, BOB, None, None),
        (B, CHART, "chart-input", 1_000, ANN, None, None),
        (CHART, DASH, "dashboard-chart", 1_000, ANN, 2_000, BOB),
    }
    assert edges(spark, settings) == expected
    stored = read_table(spark, settings, "gold.lineage_edges")
    assert stored.count() > len(expected)  # the superseded rows and the markers are still stored
    names = ("upstream_urn", "downstream_urn", "valid_from_time", "valid_to_time")
    served = current_entity_edges(DeltaTable(str(table_location(settings, "gold.lineage_edges"))).to_pyarrow_dataset())
    assert sorted(zip(*(served[n].to_pylist() for n in names))) == sorted((e[0], e[1], e[3], e[5]) for e in expected)
    in_view = spark.sql(f"SELECT {', '.join(names)} FROM gold.lineage_graph").collect()
    assert sorted(tuple(r) for r in in_view) == sorted((e[0], e[1], e[3], e[5]) for e in expected)

    assert compact_lineage_edges(spark, settings, settings.home / "_scratch" / "fold") > 0
    assert edges(spark, settings) == expected
    stored_rows = read_table(spark, settings, "gold.lineage_edges").collect()
    assert len(stored_rows) == len(expected) and all(r.edge_kind is not None for r in stored_rows)
    assert compact_lineage_edges(spark, settings, settings.home / "_scratch" / "fold") == 0


def test_rows_from_before_the_sequence_count_as_the_oldest_publish(spark, tmp_path):
    # A home whose table gained published_seq in place: its rows hold null there.
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    refined_batch(spark, settings, "b1", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": A}]}, version=1, time=1_000, actor=ANN),
        mcl(CHART, "chartInfo", {"title": "t", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
    ], 0)  # fmt: skip
    publish_lineage(spark, settings)
    spark.sql(f"DELETE FROM {home_of(settings).table_name('gold.lineage_edges')} WHERE edge_kind IS NULL").collect()
    spark.sql(f"UPDATE {home_of(settings).table_name('gold.lineage_edges')} SET published_seq = NULL").collect()
    refined_batch(spark, settings, "b2", [
        mcl(B, "upstreamLineage", {"upstreams": [{"dataset": C}]}, version=2, time=2_000, actor=BOB),
    ], 1)  # fmt: skip
    publish_lineage(spark, settings)
    expected = {
        (A, B, "dataset", 1_000, ANN, 2_000, BOB),
        (C, B, "dataset", 2_000, BOB, None, None),
        (B, CHART, "chart-input", 1_000, ANN, None, None),  # the chart's row from before, kept
    }
    assert edges(spark, settings) == expected
    served = current_entity_edges(DeltaTable(str(table_location(settings, "gold.lineage_edges"))).to_pyarrow_dataset())
    assert sorted(zip(served["upstream_urn"].to_pylist(), served["valid_from_time"].to_pylist())) == [
        (A, 1_000), (B, 1_000), (C, 2_000),
    ]  # fmt: skip


def sdk_proposals() -> list[dict]:
    """Lineage written with DataHub's own aspect classes, as an emitter sends it (MCPs, lastObserved times)."""
    stamps = ChangeAuditStampsClass()

    def proposal(urn: str, aspect, time: int) -> dict:
        wrapper = MetadataChangeProposalWrapper(entityUrn=urn, aspect=aspect, systemMetadata=SystemMetadataClass(lastObserved=time, runId="sdk"))
        return wrapper.to_obj()

    column = FineGrainedLineageClass(upstreamType="FIELD_SET", downstreamType="FIELD",
                                     upstreams=[f"urn:li:schemaField:({A},id)"], downstreams=[f"urn:li:schemaField:({B},id)"])  # fmt: skip
    return [
        proposal(B, UpstreamLineageClass(upstreams=[UpstreamClass(dataset=A, type="TRANSFORMED")], fineGrainedLineages=[column]), 1_000),
        proposal(JOB, DataJobInputOutputClass(inputDatasets=[], outputDatasets=[], inputDatasetEdges=[EdgeClass(destinationUrn=B)],
                                              outputDatasetEdges=[EdgeClass(destinationUrn=C)]), 1_100),
        proposal(CHART, ChartInfoClass(title="orders", description="", lastModified=stamps, inputs=[C]), 1_200),
        proposal(DASH, DashboardInfoClass(title="sales", description="", lastModified=stamps, charts=[CHART],
                                          datasetEdges=[EdgeClass(destinationUrn=A)]), 1_300),
        proposal(B, UpstreamLineageClass(upstreams=[]), 2_000),
        proposal(JOB, StatusClass(removed=True), 3_000),
    ]  # fmt: skip


def test_lineage_written_by_datahubs_sdk_classes(spark, tmp_path):
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    refined_batch(spark, settings, "sdk", sdk_proposals(), 0)
    publish_lineage(spark, settings)
    actor = "urn:li:corpuser:datahub"  # an MCP names no actor: the default one
    assert edges(spark, settings) == {
        (A, B, "dataset", 1_000, actor, 2_000, actor),
        (f"urn:li:schemaField:({A},id)", f"urn:li:schemaField:({B},id)", "column", 1_000, actor, 2_000, actor),
        (B, JOB, "job-input", 1_100, actor, 3_000, actor),
        (JOB, C, "job-output", 1_100, actor, 3_000, actor),
        (C, CHART, "chart-input", 1_200, actor, None, None),
        (CHART, DASH, "dashboard-chart", 1_300, actor, None, None),
        (A, DASH, "dashboard-dataset", 1_300, actor, None, None),
    }
    assert set(read_table(spark, settings, "gold.lineage_edges").columns) == {*EDGE_COLUMNS, "batch_id", PUBLISHED_SEQ}
