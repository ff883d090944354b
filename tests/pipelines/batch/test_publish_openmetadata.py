"""The publish_openmetadata stage on real Delta tables, and the OpenMetadata JSON-lines export."""

from __future__ import annotations

import json
import re
import uuid
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from conf.errors import InputError, RequestError
from conf.settings import CONF_DIR
from conf.tables import TABLES, table_name
from pipelines.batch.export_openmetadata import write_openmetadata_jsonl
from pipelines.runtime.io import append, read_table
from pipelines.runtime.progress import record_progress
from pipelines.batch.publish_openmetadata import publish_openmetadata
from tests.gold.test_openmetadata import DS, SILVER_COLUMNS, ece, field_urn

SCHEMA_PATH = CONF_DIR / "schemas" / "openmetadata-change-event.schema.json"
CHART = "urn:li:chart:(looker,weekly_orders_2)"
# A version as serialized: digits, one decimal digit, nothing more (the JSON text, before any float parsing).
VERSION_TEXT = re.compile(r'"(?:previousVersion|currentVersion)":(\d+\.\d)(?=[,}])')


def change_event_validator() -> jsonschema.Draft202012Validator:
    """The project's ChangeEvent schema, numbers read as Decimal so multipleOf 0.1 is exact."""
    schema = json.loads(SCHEMA_PATH.read_text(), parse_float=Decimal)
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))
    return jsonschema.Draft202012Validator(schema)


def assert_valid_lines(path: Path) -> list[dict]:
    """Validate every exported line against the schema; return the events (numbers as Decimal)."""
    validator = change_event_validator()
    events = []
    for line in path.read_text().splitlines():
        event = json.loads(line, parse_float=Decimal)
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(event)]
        assert not errors, f"{line}\n{errors}"
        description = event.get("changeDescription") or {}
        versions = [event.get("previousVersion"), event.get("currentVersion"), description.get("previousVersion")]
        assert VERSION_TEXT.findall(line) == [str(v) for v in versions if v is not None]
        events.append(event)
    return events


BATCH_1 = [
    ece("a1", 1_700_000_000_000, "LIFECYCLE", "CREATE", aspect="datasetKey", batch_id="om-b1"),
    ece("a2", 1_700_000_001_000, "TECHNICAL_SCHEMA", "ADD", field_urn("id"), {"fieldPath": "id", "nullable": "false"},
        aspect="schemaMetadata", batch_id="om-b1"),
    ece("a2", 1_700_000_001_000, "TECHNICAL_SCHEMA", "ADD", field_urn("email"),
        {"fieldPath": "email", "nullable": "true"}, aspect="schemaMetadata", batch_id="om-b1"),
    ece("a3", 1_700_000_002_000, "TAG", "ADD", "urn:li:tag:PII", {"tagUrn": "urn:li:tag:PII"}, batch_id="om-b1"),
    ece("c1", 1_700_086_400_000, "LIFECYCLE", "CREATE", urn=CHART, entity_type="chart", aspect="chartKey",
        batch_id="om-b1"),
]  # fmt: skip
BATCH_2 = [
    # Earlier than a3 but refined later: versions follow the batches.
    ece("a4", 1_699_999_000_000, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}, batch_id="om-b2"),
    ece("a5", 1_700_000_003_000, "TECHNICAL_SCHEMA", "REMOVE", field_urn("email"),
        {"fieldPath": "email", "nullable": "true"}, aspect="schemaMetadata", batch_id="om-b2"),
    ece("a6", 1_700_000_004_000, "LIFECYCLE", "SOFT_DELETE", aspect="status", batch_id="om-b2"),
    ece("c2", 1_700_086_500_000, "OWNER", "ADD", "urn:li:corpuser:jdoe",
        {"ownerUrn": "urn:li:corpuser:jdoe", "ownerType": "TECHNICAL_OWNER"}, urn=CHART, entity_type="chart",
        aspect="ownership", batch_id="om-b2"),
    ece("c3", 1_700_086_600_000, "LIFECYCLE", "HARD_DELETE", urn=CHART, entity_type="chart", aspect="chartKey",
        batch_id="om-b2"),
    # A proposal has no OpenMetadata counterpart: read, not published.
    ece("r1", 1_700_086_700_000, "LIFECYCLE", "CREATE", None, {"actionRequestType": "TAG_ASSOCIATION"},
        urn="urn:li:actionRequest:r1", entity_type="actionRequest", aspect="actionRequestInfo", batch_id="om-b2"),
]  # fmt: skip


def refined(spark, settings, batch_id: str, rows: list[tuple]) -> None:
    """Write a batch's silver events and record that refine finished it."""
    append(spark.createDataFrame(rows, SILVER_COLUMNS), settings, "silver.entity_change_events")
    record_progress(
        spark, settings, "refine", "bronze.aspect_snapshots", batch_id, rows_in=len(rows), rows_out=len(rows)
    )


def table_rows(spark, settings) -> list[tuple]:
    columns = TABLES["gold.openmetadata_change_events"].column_names
    table_df = read_table(spark, settings, "gold.openmetadata_change_events").select(*columns)
    return sorted(tuple(r) for r in table_df.collect())


def versions(spark, settings) -> dict[str, tuple]:
    rows = read_table(spark, settings, "gold.openmetadata_change_events").collect()
    return {
        r.change_set_id: (r.event_type, str(r.previous_version), str(r.current_version), r.entity_sequence, r.batch_id)
        for r in rows
    }


@pytest.fixture(scope="module")
def published(spark, lakehouse):
    """Two refined batches published by two runs, with a run in between that finds nothing."""
    refined(spark, lakehouse, "om-b1", BATCH_1)
    first = publish_openmetadata(spark, lakehouse, run_id="run-1")
    idle = publish_openmetadata(spark, lakehouse, run_id="run-idle")
    after_first = table_rows(spark, lakehouse)
    refined(spark, lakehouse, "om-b2", BATCH_2)
    second = publish_openmetadata(spark, lakehouse, run_id="run-2")
    return {"first": first, "idle": idle, "second": second, "after_first": after_first}


def test_each_run_publishes_the_pending_batches_once(spark, lakehouse, published):
    first, idle, second = published["first"], published["idle"], published["second"]
    assert (first.stage, first.batch_ids, first.rows_in, first.rows_out) == ("publish_openmetadata", ("om-b1",), 5, 4)
    assert (idle.batch_ids, idle.rows_in, idle.rows_out) == ((), 0, 0)
    assert (second.batch_ids, second.rows_in, second.rows_out) == (("om-b2",), 6, 5)
    assert len(published["after_first"]) == 4
    progress = {
        r.batch_id: (r.rows_in, r.rows_out, r.run_id, r.source_table)
        for r in read_table(spark, lakehouse, "ops.stage_progress").filter("stage = 'publish_openmetadata'").collect()
    }
    assert progress == {
        "om-b1": (5, 4, "run-1", "silver.entity_change_events"),
        "om-b2": (6, 5, "run-2", "silver.entity_change_events"),
    }


def test_versions_continue_across_batches(spark, lakehouse, published):
    assert versions(spark, lakehouse) == {
        "a1": ("entityCreated", "0.1", "0.1", 1, "om-b1"),
        "a2": ("entityUpdated", "0.1", "0.2", 2, "om-b1"),
        "a3": ("entityUpdated", "0.2", "0.3", 3, "om-b1"),
        "a4": ("entityUpdated", "0.3", "0.4", 4, "om-b2"),
        "a5": ("entityUpdated", "0.4", "1.4", 5, "om-b2"),
        "a6": ("entitySoftDeleted", "1.4", "1.5", 6, "om-b2"),
        "c1": ("entityCreated", "0.1", "0.1", 1, "om-b1"),
        "c2": ("entityUpdated", "0.1", "0.2", 2, "om-b2"),
        "c3": ("entityDeleted", "0.2", "0.2", 3, "om-b2"),
    }


def test_a_run_killed_before_recording_progress_is_redone_identically(spark, lakehouse, published):
    before = table_rows(spark, lakehouse)
    # The state a kill between the MERGE and the progress rows leaves: events written, batch still pending.
    spark.sql(
        f"DELETE FROM {table_name(lakehouse, 'ops.stage_progress')} "
        "WHERE stage = 'publish_openmetadata' AND batch_id = 'om-b2'"
    )
    again = publish_openmetadata(spark, lakehouse, run_id="run-3")
    assert (again.batch_ids, again.rows_in, again.rows_out) == (("om-b2",), 6, 5)
    assert table_rows(spark, lakehouse) == before
    # Both batches pending again (a kill in the first run): still the same table.
    spark.sql(f"DELETE FROM {table_name(lakehouse, 'ops.stage_progress')} WHERE stage = 'publish_openmetadata'")
    both = publish_openmetadata(spark, lakehouse, run_id="run-4")
    assert (both.batch_ids, both.rows_out) == (("om-b1", "om-b2"), 9)
    assert table_rows(spark, lakehouse) == before


def test_export_writes_valid_change_events(spark, lakehouse, published, tmp_path):
    out = tmp_path / "nested" / "events.jsonl"
    assert write_openmetadata_jsonl(spark, lakehouse, out) == 9
    events = assert_valid_lines(out)
    assert [(e["timestamp"], e["eventType"]) for e in events][:3] == [
        (1_699_999_000_000, "entityUpdated"),
        (1_700_000_000_000, "entityCreated"),
        (1_700_000_001_000, "entityUpdated"),
    ]
    removed = next(e for e in events if e["timestamp"] == 1_700_000_003_000)
    assert removed == {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, "openmetadata-change-event:a5")),
        "eventType": "entityUpdated",
        "entityType": "table",
        "entityId": str(uuid.uuid5(uuid.NAMESPACE_URL, DS)),
        "entityFullyQualifiedName": "snowflake.analytics.public.orders",
        "previousVersion": Decimal("0.4"),
        "currentVersion": Decimal("1.4"),
        "userName": "jdoe",
        "timestamp": 1_700_000_003_000,
        "changeDescription": {
            "fieldsAdded": [],
            "fieldsUpdated": [],
            "fieldsDeleted": [
                {
                    "name": "columns",
                    "oldValue": '[{"name":"email","constraint":"NULL",'
                    '"fullyQualifiedName":"snowflake.analytics.public.orders.email"}]',
                }
            ],
            "previousVersion": Decimal("0.4"),
        },
    }
    created = [e for e in events if e["eventType"] == "entityCreated"]
    assert [e["entity"]["fullyQualifiedName"] for e in created] == [
        "snowflake.analytics.public.orders",
        "looker.weekly_orders_2",
    ]
    assert all("changeDescription" not in e for e in events if e["eventType"] in ("entityCreated", "entityDeleted"))
    assert all("entity" not in e for e in events if e["eventType"] != "entityCreated")


def test_export_selects_by_time_and_event_filter(spark, lakehouse, published, tmp_path):
    def exported(**kwargs) -> list[tuple]:
        out = tmp_path / "selected.jsonl"
        count = write_openmetadata_jsonl(spark, lakehouse, out, **kwargs)
        events = assert_valid_lines(out)
        assert count == len(events)
        return [(e["entityType"], e["eventType"], e["timestamp"]) for e in events]

    assert exported(event_filter={"eventType": "entityCreated"}) == [
        ("table", "entityCreated", 1_700_000_000_000),
        ("chart", "entityCreated", 1_700_086_400_000),
    ]
    assert exported(event_filter={"eventType": "entityCreated", "entities": ["chart"]}) == [
        ("chart", "entityCreated", 1_700_086_400_000)
    ]
    updated = {"eventType": "entityUpdated", "entities": ["chart", "table"]}
    assert exported(event_filter=updated, since_ms=1_700_000_002_000, until_ms=1_700_086_500_000) == [
        ("table", "entityUpdated", 1_700_000_002_000),
        ("table", "entityUpdated", 1_700_000_003_000),
    ]  # fmt: skip
    assert exported(event_filter={"eventType": "entityRestored"}) == []
    assert exported(event_filter={"eventType": "entitySoftDeleted", "entities": []}) == [
        ("table", "entitySoftDeleted", 1_700_000_004_000)
    ]


def test_export_refuses_a_bad_request_without_writing(spark, lakehouse, published, tmp_path):
    out = tmp_path / "refused.jsonl"
    with pytest.raises(RequestError, match=r"eventFilter: unknown key\(s\) \['types'\]"):
        write_openmetadata_jsonl(spark, lakehouse, out, event_filter={"eventType": "entityCreated", "types": []})
    with pytest.raises(InputError, match="since_ms: 5 is after until_ms 4"):
        write_openmetadata_jsonl(spark, lakehouse, out, since_ms=5, until_ms=4)
    assert not out.exists()


@pytest.mark.slow
def test_cli_publishes_and_exports(spark, lakehouse, published, tmp_path):
    from tests.pipelines.cli.test_cli import run_cli

    refined(spark, lakehouse, "om-b3", [
        ece("a7", 1_700_000_005_000, "LIFECYCLE", "REINSTATE", aspect="status", batch_id="om-b3"),
    ])  # fmt: skip
    result = run_cli("publish-openmetadata", home=lakehouse.home, env={"COLUMNS": "200"})
    assert "om-b3" in result.stdout and "1 silver events -> 1 ChangeEvents from 1 batch(es)" in result.stdout
    assert versions(spark, lakehouse)["a7"] == ("entityRestored", "1.5", "1.6", 7, "om-b3")

    out = tmp_path / "restored.jsonl"
    run_cli(
        "export", "events", "--format", "openmetadata-jsonl", "--out", str(out),
        "--filter", '{"eventType": "entityRestored", "entities": ["table"]}', home=lakehouse.home,
    )  # fmt: skip
    assert [(e["eventType"], e["currentVersion"]) for e in assert_valid_lines(out)] == [
        ("entityRestored", Decimal("1.6"))
    ]
    refused = run_cli(
        "export", "events", "--format", "openmetadata-jsonl", "--out", str(out), "--filter", '{"eventType": "x"}',
        home=lakehouse.home, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "eventFilter.eventType: 'x' is not one of" in refused.stdout + refused.stderr
