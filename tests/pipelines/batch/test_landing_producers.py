"""Input written by DataHub's own tools, landed and refined: `datahub ingest` file-sink output around a
schema change (MCE snapshots), PATCH proposals from the SDK's patch builders, and the real-form fixtures.

The producers run once per module (tests/pipelines/batch/datahub_producers.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.batch.landing import land_paths
from pipelines.batch.refine import refine
from pipelines.runtime.state_store import read_state
from pipelines.batch.timeline import aspects_as_of, replay_window
from pipelines.runtime.io import read_table
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.batch.datahub_producers import (
    CUSTOMERS,
    FIRST_SCHEMA,
    ORDERS,
    SECOND_SCHEMA,
    change_database,
    ingest,
    patch_proposals,
    upsert_proposals,
)

pytestmark = pytest.mark.slow

PRODUCERS = Path(__file__).resolve().parents[2] / "fixtures" / "datahub_producers"
T0, T1, T2 = 1795900000000, 1795900060000, 1795900120000
# The event columns that must agree between a PATCH and the equivalent UPSERT: all but the lineage of the
# bronze row and the ids, which name the version by its ordering key (a PATCH's ends with where it arrived).
EVENT_COLUMNS = ("entity_urn", "category", "operation", "modifier", "parameters", "actor", "event_time", "aspect_name",
                 "old_value", "new_value", "version", "aspect_entity_urn")


def use(spark, settings):
    register_fresh_tables(spark, settings)
    return settings


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def quarantined(report) -> int:
    return sum(f.records_quarantined for f in report.files)


def events_of(spark, settings, batch_id: str) -> list[dict]:
    rows = read_table(spark, settings, "silver.entity_change_events").filter(f"batch_id = '{batch_id}'").collect()
    return [r.asDict(recursive=True) for r in rows]


@pytest.fixture(scope="module")
def ingested(spark, tmp_path_factory):
    """Two `datahub ingest` runs (sqlalchemy source on SQLite, file sink) around a schema change, landed and refined.

    Both outputs land as one batch: sequencing pairs the second run's versions with the first's.
    """
    work = tmp_path_factory.mktemp("ingest")
    settings = use(spark, make_settings(work / "home"))
    database = work / "shop.db"
    change_database(database, FIRST_SCHEMA)
    ingest(database, work / "run1.json", "sqlite-run1")
    change_database(database, SECOND_SCHEMA)
    second_run = ingest(database, work / "run2.json", "sqlite-run2")
    report = land_paths(spark, settings, [work / "run1.json", work / "run2.json"])
    refine(spark, settings)
    second_started = min(e["systemMetadata"]["lastObserved"] for e in second_run)
    return settings, report, second_started


def test_two_ingestion_runs_around_a_schema_change_give_exactly_the_changed_fields(spark, ingested):
    settings, report, second_started = ingested
    use(spark, settings)
    assert quarantined(report) == 0
    assert [f.kind for f in report.files] == ["file-sink", "file-sink"]
    schema_events = sorted(
        (e["entity_urn"], e["operation"], e["parameters"]["fieldPath"])
        for e in events_of(spark, settings, report.batch_id)
        if e["category"] == "TECHNICAL_SCHEMA" and e["event_time"] >= second_started
    )
    assert schema_events == [
        (CUSTOMERS, "ADD", "id"),
        (CUSTOMERS, "ADD", "name"),
        (ORDERS, "ADD", "currency"),
        (ORDERS, "REMOVE", "note"),
    ]
    # The first run's MCE landed its three aspects under DataHub's aspect names.
    snapshots_df = read_table(spark, settings, "bronze.aspect_snapshots").filter(f"created_time < {second_started}")
    orders = {r.aspect_name for r in snapshots_df.filter(f"entity_urn = '{ORDERS}'").collect()}
    assert {"status", "datasetProperties", "schemaMetadata", "subTypes"} <= orders
    schema = json.loads(
        read_state(spark, settings).filter(f"entity_urn = '{ORDERS}' AND aspect_name = 'schemaMetadata'").first().aspect_json
    )
    assert [f["fieldPath"] for f in schema["fields"]] == ["id", "amount", "currency"]


@pytest.fixture(scope="module")
def patched_and_upserted(spark, tmp_path_factory):
    """Two homes landing one batch each: the same tags at T0, then at T1 the SDK's PATCH proposals in one and
    the equivalent UPSERTs in the other (so the patches apply to an earlier record of their batch)."""
    homes = {}
    for name in ("patch", "upsert"):
        work = tmp_path_factory.mktemp(name)
        settings = use(spark, make_settings(work / "home"))
        baseline = upsert_proposals(ORDERS, T0, tags=["urn:li:tag:legacy", "urn:li:tag:gold"], owners=[], terms=[])[:1]
        if name == "patch":
            changes = patch_proposals(ORDERS, T1)
        else:
            changes = upsert_proposals(ORDERS, T1, tags=["urn:li:tag:gold", "urn:li:tag:pii"],
                                       owners=[("urn:li:corpuser:jdoe", "TECHNICAL_OWNER")],
                                       terms=["urn:li:glossaryTerm:Finance.Revenue"])
        report = land_paths(spark, settings, [write_lines(work / "changes.mcp.jsonl", baseline + changes)])
        refine(spark, settings)
        homes[name] = {
            "settings": settings,
            "report": report,
            "work": work,
            "events": [e for e in events_of(spark, settings, report.batch_id) if e["event_time"] == T1],
            "state": {
                r.aspect_name: (json.loads(r.aspect_json), r.created_time, r.change_type != "DELETE")
                for r in read_state(spark, settings).filter(f"entity_urn = '{ORDERS}'").collect()
            },
        }
    patch = homes["patch"]
    use(spark, patch["settings"])
    patch["as_of"] = {
        t: {a["aspect_name"]: a["aspect"] for a in aspects_as_of(spark, patch["settings"], ORDERS, t)} for t in (T0, T1)
    }
    patch["replay_equal"] = replay_window(spark, patch["settings"], T0, T2).equal
    return homes


def test_sdk_patches_give_the_events_and_state_of_the_equivalent_upserts(spark, patched_and_upserted):
    patch, upsert = patched_and_upserted["patch"], patched_and_upserted["upsert"]
    assert quarantined(patch["report"]) == 0
    patch_events, upsert_events = patch["events"], upsert["events"]
    assert sorted((e["category"], e["operation"], e["modifier"]) for e in patch_events) == [
        ("GLOSSARY_TERM", "ADD", "urn:li:glossaryTerm:Finance.Revenue"),
        ("OWNER", "ADD", "urn:li:corpuser:jdoe"),
        ("TAG", "ADD", "urn:li:tag:pii"),
        ("TAG", "REMOVE", "urn:li:tag:legacy"),
    ]

    def comparable(events):
        return sorted(json.dumps({c: e[c] for c in EVENT_COLUMNS}, sort_keys=True) for e in events)

    assert comparable(patch_events) == comparable(upsert_events)

    patched = patch["state"]
    assert patched == upsert["state"]
    assert patched["globalTags"][0] == {"tags": [{"tag": "urn:li:tag:gold"}, {"tag": "urn:li:tag:pii"}]}
    # Time travel shows the patched aspect, never the patch document.
    assert patch["as_of"][T1] == {name: value[0] for name, value in patched.items()}
    assert patch["as_of"][T0] == {"globalTags": {"tags": [{"tag": "urn:li:tag:legacy"}, {"tag": "urn:li:tag:gold"}]}}
    assert patch["replay_equal"]


def test_a_malformed_patch_is_quarantined_with_its_reason_and_changes_nothing(spark, patched_and_upserted):
    settings, work = patched_and_upserted["patch"]["settings"], patched_and_upserted["patch"]["work"]
    use(spark, settings)
    state_before = {r.aspect_name: r.aspect_json for r in read_state(spark, settings).collect()}
    patch = patch_proposals(ORDERS, T2)[0]  # add urn:li:tag:pii again, as the SDK writes it

    def with_patch(document, aspect_name="globalTags"):
        return {**patch, "aspectName": aspect_name, "aspect": {**patch["aspect"], "value": json.dumps(document)}}

    bad = [
        with_patch([{"op": "merge", "path": "/tags/x", "value": {}}]),
        with_patch([{"op": "replace", "path": "/tags/urn:li:tag:nope/x", "value": 1}]),
        with_patch([{"op": "add", "path": "/fields/x", "value": {}}], "schemaMetadata"),
        with_patch([{"path": "/tags/x", "value": {}}]),
        with_patch({"patch": "nope"}),
        with_patch([{"op": "add", "path": "tags", "value": {}}]),
    ]
    report = land_paths(spark, settings, [write_lines(work / "bad.mcp.jsonl", bad)])
    result = refine(spark, settings)
    assert result.batch_ids == (report.batch_id,) and result.rows_out == 0
    rows = read_table(spark, settings, "bronze.quarantine").filter(f"batch_id = '{report.batch_id}'").collect()
    assert sorted((r.line_number, r.kind, r.field, r.reason) for r in rows) == [
        (1, "mcp", "aspect.value.patch.op", "aspect.value.patch.op: 'merge' is not one of add, remove, replace, copy, move, test"),
        (2, "mcp", "aspect.value.patch[0].path", "aspect.value.patch[0].path: '/tags/urn:li:tag:nope/x' does not exist"),
        (3, "mcp", "aspectName", "aspectName: 'schemaMetadata' has no patch template and the patch names no "
         "arrayPrimaryKeys (templates: chartInfo, dashboardInfo, dataFlowInfo, dataJobInfo, dataJobInputOutput, "
         "dataProductProperties, datasetProperties, domains, editableDatasetProperties, editableSchemaMetadata, "
         "globalTags, glossaryTerms, ownership, siblings, structuredProperties, upstreamLineage)"),
        (4, "mcp", "aspect.value.patch.op", "aspect.value.patch.op: missing"),
        (5, "mcp", "aspect.value", "aspect.value: '{\"patch\": \"nope\"}' is not a JSON Patch (a list of operations, or "
         "{patch, arrayPrimaryKeys})"),
        (6, "mcp", "aspect.value.patch.path", "aspect.value.patch.path: 'tags' does not start with '/'"),
    ]
    assert json.loads(rows[0].raw_text)["entityUrn"] == ORDERS
    assert {r.aspect_name: r.aspect_json for r in read_state(spark, settings).collect()} == state_before
    # Refining again (the batch is recorded) adds no second quarantine row.
    refine(spark, settings)
    assert read_table(spark, settings, "bronze.quarantine").filter(f"batch_id = '{report.batch_id}'").count() == 6


def test_the_real_form_fixtures_land_without_quarantine(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "home"))
    sink = json.loads((PRODUCERS / "sqlite-run1.file-sink.json").read_text())
    # The file sink's MCPs as JSON lines keep the aspect as `json`, as DataHub's file sink writes it.
    as_lines = write_lines(tmp_path / "sink.mcp.jsonl", [e for e in sink if "proposedSnapshot" not in e])
    report = land_paths(spark, settings, [PRODUCERS / "sqlite-run1.file-sink.json", PRODUCERS / "snapshots.mce.jsonl",
                                          PRODUCERS / "patches.mcp.jsonl", as_lines])
    assert quarantined(report) == 0
    assert [(f.kind, f.records_read) for f in report.files] == [
        ("file-sink", len(sink) + 2), ("mce", 6), ("mcp", 4), ("mcp", len(sink) - 1)]
    rows = read_table(spark, settings, "bronze.aspect_snapshots").collect()
    by_kind = {}
    for r in rows:
        by_kind.setdefault(r.source_kind, {})[(r.entity_urn, r.aspect_name)] = json.loads(r.aspect_json)
    # The same aspects from the array, the JSON lines with `json`, and both spellings of the MCE.
    assert {k: v for k, v in by_kind["file-sink"].items() if k in by_kind["mce"]} == by_kind["mce"]
    assert {k: v for k, v in by_kind["file-sink"].items() if k in by_kind["mcp"] and k[1] != "globalTags"} == {
        k: v for k, v in by_kind["mcp"].items() if k in by_kind["file-sink"]}
