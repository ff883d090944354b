"""Lineage edges over time from aspect versions: every lineage aspect form, removals, deletes and restores."""

from __future__ import annotations

import json

import pytest

from gold.lineage import EDGE_COLUMNS, to_lineage_edges

VERSION_COLUMNS = "entity_urn STRING, entity_type STRING, aspect_name STRING, order_key STRING, version BIGINT, " \
    "created_time BIGINT, created_actor STRING, new_json STRING"  # fmt: skip

A = "urn:li:dataset:(urn:li:dataPlatform:hive,a,PROD)"
B = "urn:li:dataset:(urn:li:dataPlatform:hive,b,PROD)"
C = "urn:li:dataset:(urn:li:dataPlatform:hive,c,PROD)"
JOB = "urn:li:dataJob:(urn:li:dataFlow:(airflow,etl,PROD),load)"
JOB0 = "urn:li:dataJob:(urn:li:dataFlow:(airflow,etl,PROD),extract)"
CHART = "urn:li:chart:(looker,orders)"
DASH = "urn:li:dashboard:(looker,sales)"
DPI = "urn:li:dataProcessInstance:run1"
MODEL = "urn:li:mlModel:(urn:li:dataPlatform:sagemaker,churn,PROD)"


def field(dataset: str, path: str) -> str:
    return f"urn:li:schemaField:({dataset},{path})"


def version(urn: str, aspect: str, number: int, time: int, actor: str, value: dict | None) -> tuple:
    entity_type = urn.split(":")[2]
    key = f"v{number:019d}.{1 if value is None else 0}"
    return (urn, entity_type, aspect, key, number, time, f"urn:li:corpuser:{actor}", None if value is None else json.dumps(value))


HISTORY = [
    # b <- a, then b <- a + c with a column edge, then a removed; b soft-deleted and restored.
    version(B, "upstreamLineage", 1, 1_000, "ann", {"upstreams": [{"dataset": A, "type": "TRANSFORMED"}]}),
    version(B, "upstreamLineage", 2, 2_000, "bob", {
        "upstreams": [{"dataset": A}, {"dataset": C}],
        "fineGrainedLineages": [{"upstreamType": "FIELD_SET", "upstreams": [field(C, "id")],
                                 "downstreamType": "FIELD", "downstreams": [field(B, "id"), field(B, "key")]}],
    }),
    version(B, "upstreamLineage", 3, 3_000, "cy", {"upstreams": [{"dataset": C}]}),
    version(B, "status", 1, 4_000, "dee", {"removed": True}),
    version(B, "status", 2, 5_000, "eve", {"removed": False}),
    # A job in both forms (lists and edges), with an upstream job; hard-deleted for good at 6_000.
    version(JOB, "dataJobInputOutput", 1, 1_500, "ann", {
        "inputDatasets": [A], "outputDatasets": [], "inputDatajobs": [JOB0],
        "outputDatasetEdges": [{"destinationUrn": B}],
    }),
    version(JOB, "dataJobKey", 2, 6_000, "fay", None),
    # A chart's inputs as the SDK writes them (a union), a dashboard's charts and datasets.
    version(CHART, "chartInfo", 1, 1_000, "ann", {"title": "t", "inputs": [{"string": B}], "inputEdges": [{"destinationUrn": C}]}),
    version(DASH, "dashboardInfo", 1, 1_000, "ann", {"charts": [CHART], "datasetEdges": [{"destinationUrn": A}]}),
    version(DASH, "dashboardInfo", 2, 2_500, "bob", None),
    version(DPI, "dataProcessInstanceInput", 1, 1_000, "ann", {"inputs": [A]}),
    version(DPI, "dataProcessInstanceOutput", 1, 1_000, "ann", {"outputs": [B]}),
    version(MODEL, "mlModelProperties", 1, 1_000, "ann", {"trainingJobs": [JOB], "downstreamJobs": [JOB0]}),
]  # fmt: skip

# (upstream, downstream, kind, owner, aspect, from time, from version, from aspect, added by,
#  to time, to version, to aspect, removed by)
EXPECTED = {
    (A, B, "dataset", B, "upstreamLineage", 1_000, 1, "upstreamLineage", "ann", 3_000, 3, "upstreamLineage", "cy"),
    (C, B, "dataset", B, "upstreamLineage", 2_000, 2, "upstreamLineage", "bob", 4_000, 1, "status", "dee"),
    (C, B, "dataset", B, "upstreamLineage", 5_000, 2, "status", "eve", None, None, None, None),
    (field(C, "id"), field(B, "id"), "column", B, "upstreamLineage", 2_000, 2, "upstreamLineage", "bob",
     3_000, 3, "upstreamLineage", "cy"),
    (field(C, "id"), field(B, "key"), "column", B, "upstreamLineage", 2_000, 2, "upstreamLineage", "bob",
     3_000, 3, "upstreamLineage", "cy"),
    (A, JOB, "job-input", JOB, "dataJobInputOutput", 1_500, 1, "dataJobInputOutput", "ann", 6_000, 2, "dataJobKey", "fay"),
    (JOB0, JOB, "job-upstream-job", JOB, "dataJobInputOutput", 1_500, 1, "dataJobInputOutput", "ann",
     6_000, 2, "dataJobKey", "fay"),
    # b's soft delete [4_000, 5_000) cuts the edges it is the other end of; the job's hard delete ends them.
    (JOB, B, "job-output", JOB, "dataJobInputOutput", 1_500, 1, "dataJobInputOutput", "ann", 4_000, 1, "status", "dee"),
    (JOB, B, "job-output", JOB, "dataJobInputOutput", 5_000, 2, "status", "eve", 6_000, 2, "dataJobKey", "fay"),
    (B, CHART, "chart-input", CHART, "chartInfo", 1_000, 1, "chartInfo", "ann", 4_000, 1, "status", "dee"),
    (B, CHART, "chart-input", CHART, "chartInfo", 5_000, 2, "status", "eve", None, None, None, None),
    (C, CHART, "chart-input", CHART, "chartInfo", 1_000, 1, "chartInfo", "ann", None, None, None, None),
    (CHART, DASH, "dashboard-chart", DASH, "dashboardInfo", 1_000, 1, "dashboardInfo", "ann", 2_500, 2, "dashboardInfo", "bob"),
    (A, DASH, "dashboard-dataset", DASH, "dashboardInfo", 1_000, 1, "dashboardInfo", "ann", 2_500, 2, "dashboardInfo", "bob"),
    (A, DPI, "process-input", DPI, "dataProcessInstanceInput", 1_000, 1, "dataProcessInstanceInput", "ann",
     None, None, None, None),
    (DPI, B, "process-output", DPI, "dataProcessInstanceOutput", 1_000, 1, "dataProcessInstanceOutput", "ann",
     4_000, 1, "status", "dee"),
    (DPI, B, "process-output", DPI, "dataProcessInstanceOutput", 5_000, 2, "status", "eve", None, None, None, None),
    (JOB, MODEL, "model-training-job", MODEL, "mlModelProperties", 1_000, 1, "mlModelProperties", "ann",
     6_000, 2, "dataJobKey", "fay"),
    (MODEL, JOB0, "model-downstream-job", MODEL, "mlModelProperties", 1_000, 1, "mlModelProperties", "ann",
     None, None, None, None),
}  # fmt: skip


@pytest.mark.pure
def test_every_lineage_aspect_gives_its_edges_with_their_validity(pure_spark):
    versions_df = pure_spark.createDataFrame(HISTORY, VERSION_COLUMNS)
    rows = to_lineage_edges(versions_df).collect()
    expected = {(*e[:8], f"urn:li:corpuser:{e[8]}", *e[9:12], e[12] and f"urn:li:corpuser:{e[12]}") for e in EXPECTED}
    assert {tuple(row[c] for c in EDGE_COLUMNS[1:]) for row in rows} == expected
    assert len({row.edge_id for row in rows}) == len(rows) == len(EXPECTED)
