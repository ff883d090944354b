"""End to end on the shared fixture history: bronze rows -> refine (silver) -> publish_openmetadata -> export."""

from __future__ import annotations

from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from pipelines.batch.export_openmetadata import write_openmetadata_jsonl
from pipelines.runtime.io import append
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.batch.refine import refine
from tests.pipelines.batch.test_publish_openmetadata import assert_valid_lines
from tests.silver.bronze_rows import MCL_FIXTURE, bronze_df, read_mcl_fixture, to_bronze_rows

BATCH = "history-b1"
DELETED_DATASET_FQN = "postgres.appdb.public.customers_6"


@pytest.fixture(scope="module")
def exported(spark, lakehouse, tmp_path_factory) -> list[dict]:
    """The fixture history landed as one bronze batch, refined, published and exported."""
    records = read_mcl_fixture()
    rows = to_bronze_rows(records, BATCH, source_file=str(MCL_FIXTURE))
    append(bronze_df(spark, rows), lakehouse, "bronze.aspect_snapshots")
    landed_at = rows[0]["landed_at"]
    append(
        spark.createDataFrame(
            [(BATCH, str(MCL_FIXTURE), "fixture", "mcl", len(rows), len(rows), 0, 0, landed_at, landed_at.date())],
            "batch_id string, source_file string, content_hash string, kind string, records_read bigint, "
            "records_landed bigint, records_quarantined bigint, duplicates_skipped bigint, landed_at timestamp, "
            "land_date date",
        ),
        lakehouse,
        "bronze.landed_files",
    )
    assert refine(spark, lakehouse).batch_ids == (BATCH,)
    result = publish_openmetadata(spark, lakehouse)
    assert result.batch_ids == (BATCH,) and result.rows_out > 0
    out = tmp_path_factory.mktemp("export") / "history.openmetadata.jsonl"
    assert write_openmetadata_jsonl(spark, lakehouse, out) == result.rows_out
    return assert_valid_lines(out)


def test_every_exported_event_validates_and_versions_chain(exported):
    by_entity = defaultdict(list)
    for event in exported:
        by_entity[event["entityId"]].append(event)
    for events in by_entity.values():
        # Export order is (timestamp, entity, sequence): each event starts where the previous one ended,
        # except a creation as the entity's first event or right after a hard delete, which starts at 0.1
        # (any other creation continues the entity's versions by 0.1).
        current, previous_type = Decimal("0.1"), None
        for event in events:
            created = event["eventType"] == "entityCreated"
            if created and previous_type in (None, "entityDeleted"):
                assert (event["previousVersion"], event["currentVersion"]) == (Decimal("0.1"), Decimal("0.1"))
            else:
                assert event["previousVersion"] == current, event
                if created:
                    assert event["currentVersion"] - event["previousVersion"] == Decimal("0.1"), event
            if "changeDescription" in event:
                assert event["changeDescription"]["previousVersion"] == event["previousVersion"], event
            assert event["currentVersion"] - event["previousVersion"] in (Decimal("0"), Decimal("0.1"), Decimal("1.0"))
            current, previous_type = event["currentVersion"], event["eventType"]


def test_the_history_maps_to_the_expected_entities(exported):
    # From the fixture: key aspects of 3 charts, 2 dashboards, 5 datasets, 1 glossary term (a dataJob's key
    # adds a task to its flow's pipeline instead), and one dataset hard-deleted at the end.
    created = Counter(e["entityType"] for e in exported if e["eventType"] == "entityCreated")
    assert created == {"chart": 3, "dashboard": 2, "table": 5, "glossaryTerm": 1}
    deleted = [e for e in exported if e["eventType"] == "entityDeleted"]
    assert [(e["entityFullyQualifiedName"], e["userName"]) for e in deleted] == [(DELETED_DATASET_FQN, "kpatel")]
    assert deleted[0]["timestamp"] == 1704246625016
    assert {e["entityType"] for e in exported} == {"chart", "dashboard", "table", "glossaryTerm", "pipeline"}

    pipeline = [e for e in exported if e["entityType"] == "pipeline"]
    assert {e["entityFullyQualifiedName"] for e in pipeline} == {"airflow.daily_etl"}
    names = {c["name"] for e in pipeline for b in ("fieldsAdded", "fieldsUpdated") for c in e["changeDescription"][b]}
    task = "tasks.load_sessions_3"
    assert {"tasks", f"{task}.tags", f"{task}.owners", f"{task}.domain", f"{task}.deprecated"} <= names

    # The first glossary term on refunds_5 (its first glossaryTerms aspect) is a tag with source Glossary.
    first_term = next(
        e for e in exported
        if e["entityFullyQualifiedName"] == "bigquery.proj.sales.refunds_5" and e["timestamp"] == 1700228707005
    )  # fmt: skip
    assert first_term["userName"] == "kpatel"
    assert first_term["changeDescription"]["fieldsAdded"] == [
        {
            "name": "tags",
            "newValue": '[{"tagFQN":"Customer.Address","source":"Glossary","labelType":"Manual","state":"Confirmed"}]',
        }
    ]
