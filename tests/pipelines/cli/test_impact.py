"""`lakehouse impact` as a real subprocess over a home with lineage edges and change events."""

from __future__ import annotations

import json

from pipelines.batch.publish_lineage import publish_lineage
from pipelines.runtime.io import append
from tests.conftest import make_settings, register_fresh_tables
from tests.gold.test_openmetadata import SILVER_COLUMNS, ece
from tests.pipelines.batch.test_publish_lineage import A, ANN, B, BOB, C, CHART, DASH, refined_batch
from tests.pipelines.cli.test_cli import run_cli
from tests.silver.bronze_rows import mcl

LINEAGE = [
    mcl(B, "upstreamLineage", {"upstreams": [{"dataset": A}]}, version=1, time=1_000, actor=ANN),
    mcl(CHART, "chartInfo", {"title": "orders", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
    mcl(DASH, "dashboardInfo", {"title": "sales", "charts": [CHART]}, version=1, time=1_000, actor=ANN),
    # b's upstream a is replaced by c at 5_000.
    mcl(B, "upstreamLineage", {"upstreams": [{"dataset": C}]}, version=2, time=5_000, actor=BOB),
]  # fmt: skip
EVENTS = [
    ece("a-before", 2_000, "TAG", "ADD", "urn:li:tag:PII", urn=A, actor=ANN),
    ece("a-after", 7_000, "TAG", "ADD", "urn:li:tag:Gold", urn=A, actor=ANN),
    ece("c-before", 3_000, "TAG", "ADD", "urn:li:tag:PII", urn=C, actor=BOB),
    ece("c-after", 8_000, "DOCUMENTATION", "ADD", urn=C, actor=BOB),
    ece("dash", 8_000, "TAG", "ADD", "urn:li:tag:Gold", urn=DASH, entity_type="dashboard", actor=ANN),
    ece("chart", 4_000, "OWNER", "ADD", "urn:li:corpuser:kim", urn=CHART, entity_type="chart", aspect="ownership", actor=BOB),
]  # fmt: skip


def test_impact_lists_what_reached_a_dashboard_through_lineage_as_it_was(spark, tmp_path):
    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    refined_batch(spark, settings, "b1", LINEAGE, 0)
    publish_lineage(spark, settings)
    append(spark.createDataFrame(EVENTS, SILVER_COLUMNS), settings, "silver.entity_change_events")

    result = run_cli("impact", DASH, "--start-time", "0", "--end-time", "10000", "--depth", "3", "--json", home=tmp_path)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [(r["hop"], r["entity_urn"], r["category"], r["actor"], r["path"]) for r in rows] == [
        (0, DASH, "TAG", ANN, DASH),
        (1, CHART, "OWNER", BOB, f"{DASH} <- {CHART}"),
        (3, A, "TAG", ANN, f"{DASH} <- {CHART} <- {B} <- {A}"),
        (3, C, "DOCUMENTATION", BOB, f"{DASH} <- {CHART} <- {B} <- {C}"),
    ]
    downstream = run_cli("impact", C, "--direction", "downstream", "--start-time", "0", "--end-time", "10000", "--json",
                         home=tmp_path)  # fmt: skip
    # c's own changes (hop 0); it fed the dashboard only from 5_000, after neither reached it.
    assert [(json.loads(line)["hop"], json.loads(line)["event_time"]) for line in downstream.stdout.splitlines()
            if line.strip()] == [(0, 3_000), (0, 8_000), (3, 8_000)]

    bad = run_cli("impact", DASH, "--direction", "sideways", home=tmp_path, check=False)
    assert bad.returncode != 0 and "direction: 'sideways'" in bad.stderr and "Traceback" not in bad.stderr
