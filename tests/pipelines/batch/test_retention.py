"""Retention: whole batches past their period deleted and vacuumed, the chain still verifying; legal holds keep batches."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conf.errors import InputError
from conf.settings_sections import RetentionDays, RetentionSettings
from conf.tables import table_location
from pipelines.batch.chain_verification import verify_chain
from pipelines.batch.legal_holds import active_holds, add_hold, remove_hold
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.batch.retention import apply_retention
from pipelines.runtime.io import read_table
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event

DAY = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 40 * DAY
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
OTHER = "urn:li:dataset:(urn:li:dataPlatform:hive,db.customers,PROD)"
ALICE = "urn:li:corpuser:alice"
BOB = "urn:li:corpuser:bob"
CHANGE_TABLES = ("silver.entity_change_events", "gold.audit_events", "gold.openmetadata_change_events")


def _settings(home: Path):
    days = RetentionDays(audit_events=30, change_events=30, usage_events=30, quarantine=30)
    return dataclasses.replace(make_settings(home), retention=RetentionSettings(days=days))


@pytest.fixture(scope="module")
def published_home(spark, tmp_path_factory) -> Path:
    """Three published batches: two 40 days old (alice on orders, bob on customers), one from today."""
    root = tmp_path_factory.mktemp("retention")
    settings = _settings(root / "home")
    register_fresh_tables(spark, settings)
    for batch_id, actor, entity, at in (("b-old-1", ALICE, DATASET, OLD), ("b-old-2", BOB, OTHER, OLD + 1000),
                                        ("b-new", ALICE, DATASET, NOW - 1000)):  # fmt: skip
        land_refined_batch(
            spark, settings, batch_id, usage=[usage_event("LogInEvent", actor, at, batch_id, login_source="SSO_LOGIN")],
            changes=[change_event(f"cs-{batch_id}", "TAG", "ADD", actor, at + 10, entity, "globalTags", batch_id)],
        )  # fmt: skip
        publish_audit(spark, settings)
        publish_openmetadata(spark, settings)
    return root


@pytest.fixture
def home(spark, published_home, tmp_path):
    """A copy of the published home, tables registered: each test cuts its own."""
    shutil.copytree(published_home, tmp_path / "copy")
    settings = _settings(tmp_path / "copy" / "home")
    register_fresh_tables(spark, settings)
    return settings


def _batches(spark, settings, table_key: str) -> set[str]:
    return {r.batch_id for r in read_table(spark, settings, table_key).select("batch_id").distinct().collect()}


def test_batches_past_retention_are_deleted_and_vacuumed_and_verify_still_passes(spark, home):
    assert verify_chain(spark, home).ok
    report = apply_retention(spark, home, vacuum_hours=0)
    assert {(b.table_key, b.batch_id) for b in report.deleted} == {
        (table, batch) for table in (*CHANGE_TABLES, "bronze.usage_events") for batch in ("b-old-1", "b-old-2")
    }
    for table_key in (*CHANGE_TABLES, "bronze.usage_events"):
        assert _batches(spark, home, table_key) == {"b-new"}, table_key
        # Vacuumed at 0 hours: no file of the table holds the deleted rows, in any version.
        assert report.vacuumed[table_key] >= 1
        files = {Path(f).name for f in DeltaTable(str(table_location(home, table_key))).file_uris()}
        on_disk = {p.name for p in table_location(home, table_key).rglob("*.parquet")}
        assert on_disk == files, table_key
    result = verify_chain(spark, home)
    assert result.ok, result.problems
    # The cut is in the chain, and a second run finds nothing more to delete.
    cuts = read_table(spark, home, "ops.retention_cuts").collect()
    assert {c.batch_id for c in cuts} == {report.cut_id} and len(cuts) == 8
    assert apply_retention(spark, home).cut_id is None


def test_a_deletion_without_a_cut_is_still_forged(spark, home):
    # The same DELETE retention makes, but nobody recorded and linked a cut for it.
    DeltaTable(str(table_location(home, "gold.audit_events"))).delete("batch_id IN ('b-old-1')")
    result = verify_chain(spark, home)
    assert not result.ok
    by_table = {p.table_key: p for p in result.problems}
    assert "gold.audit_events" in by_table and by_table["gold.audit_events"].batch_id in ("b-old-1", None)
    assert any("DELETE" in c for p in result.problems for c in p.commits_after)


def test_a_cut_row_added_without_its_link_is_forged(spark, home):
    from tests.pipelines.audit_inputs import rows_df
    from pipelines.runtime.io import append

    forged = {"entry_id": "gold.audit_events/b-old-1", "table_key": "gold.audit_events", "deleted_batch_id": "b-old-1",
              "rows_deleted": 1, "newest_ms": OLD, "cutoff_ms": NOW, "retention_days": 30, "cut_at_ms": NOW,
              "batch_id": "cut-forged"}  # fmt: skip
    append(rows_df(spark, "ops.retention_cuts", [forged]), home, "ops.retention_cuts")
    DeltaTable(str(table_location(home, "gold.audit_events"))).delete("batch_id IN ('b-old-1')")
    result = verify_chain(spark, home)
    assert not result.ok
    assert any(p.table_key == "ops.retention_cuts" and p.batch_id == "cut-forged" for p in result.problems)


def test_a_legal_hold_keeps_the_batches_holding_its_subject_until_removed(spark, home):
    actor_hold = add_hold(spark, home, "actor", ALICE, "matter 2026-17")
    entity_hold = add_hold(spark, home, "entity", OTHER, "regulator inquiry")
    report = apply_retention(spark, home)
    # Bob's login in b-old-2 names no held subject: only that batch of that table goes.
    assert [(b.table_key, b.batch_id) for b in report.deleted] == [("bronze.usage_events", "b-old-2")]
    held = {(b.table_key, b.batch_id): ids for b, ids in report.held}
    assert held[("gold.audit_events", "b-old-1")] == (actor_hold.hold_id,)
    assert held[("gold.audit_events", "b-old-2")] == (entity_hold.hold_id,)
    assert _batches(spark, home, "gold.audit_events") == {"b-old-1", "b-old-2", "b-new"}
    remove_hold(spark, home, entity_hold.hold_id)
    assert [h.hold_id for h in active_holds(spark, home)] == [actor_hold.hold_id]
    report = apply_retention(spark, home)
    assert {b.batch_id for b in report.deleted} == {"b-old-2"} and len(report.deleted) == 3
    assert _batches(spark, home, "gold.audit_events") == {"b-old-1", "b-new"}
    assert verify_chain(spark, home).ok


def test_holds_refuse_bad_input_naming_the_field(spark, home):
    with pytest.raises(InputError, match="--actor: 'alice' is not an urn"):
        add_hold(spark, home, "actor", "alice", "x")
    with pytest.raises(InputError, match="--reason: ''"):
        add_hold(spark, home, "actor", ALICE, "  ")
    with pytest.raises(InputError, match="hold_id: 'hold-nope' is no active hold"):
        remove_hold(spark, home, "hold-nope")


def test_the_commands_hold_apply_and_verify(spark, home):
    from tests.pipelines.cli.test_cli import run_cli

    settings_args = ("--set", "mlflow.enabled=false", "--set", "retention.days.audit_events=30",
                     "--set", "retention.days.change_events=30")  # fmt: skip
    added = run_cli(*settings_args, "hold", "add", "--actor", ALICE, "--reason", "matter 2026-17", home=home.home)
    hold_id = added.stdout.split()[1]
    assert f"hold {hold_id} placed on actor {ALICE}" in added.stdout
    assert hold_id in run_cli(*settings_args, "hold", "list", home=home.home).stdout
    applied = run_cli(*settings_args, "maintain", "--retention", home=home.home)
    assert "gold.audit_events: 1 batches (2 rows) older than 30 days deleted" in applied.stdout
    assert f"gold.audit_events: batch b-old-1 kept: legal hold {hold_id}" in applied.stdout
    assert "OK" in run_cli(*settings_args, "verify", home=home.home).stdout
    both = run_cli(*settings_args, "hold", "add", "--actor", ALICE, "--entity", DATASET, "--reason", "x", home=home.home, check=False)
    unknown = run_cli(*settings_args, "hold", "remove", "hold-nope", home=home.home, check=False)
    for refused, message in ((both, "give exactly one of --actor URN or --entity URN"), (unknown, "'hold-nope' is no active hold")):
        assert refused.returncode != 0 and message in refused.stderr and "Traceback" not in refused.stderr


def test_the_quarantine_and_the_access_log_lose_their_old_batches_and_verify_still_passes(spark, home):
    from datetime import datetime, timezone

    from conf.tables import table_spec
    from pipelines.batch.audit_chain import link_batches
    from pipelines.runtime.io import append

    settings = dataclasses.replace(home, access_log=dataclasses.replace(home.access_log, retention_days=30))
    quarantined = []
    for batch_id, at in (("q-old", OLD), ("q-new", NOW - 1000)):
        when = datetime.fromtimestamp(at / 1000, tz=timezone.utc)
        quarantined.append(('{"actorUrn": "urn:li:corpuser:alice", ', "usage.jsonl", 1, "usage", "record: not JSON", "record",
                            batch_id, when, when.date()))  # fmt: skip
    append(spark.createDataFrame(quarantined, table_spec("bronze.quarantine").columns), settings, "bronze.quarantine")
    for batch_id, at in (("access-old", OLD), ("access-new", NOW - 1000)):
        read = (f"{batch_id}-1", at, "token:t1", ALICE, "POST", "/openapi/v1/events/audit/search", "{}", 3, "10.0.0.1", 200, "ok",
                batch_id, datetime.fromtimestamp(at / 1000, tz=timezone.utc).date())  # fmt: skip
        append(spark.createDataFrame([read], table_spec("ops.access_log").columns), settings, "ops.access_log")
        link_batches(spark, settings, ["ops.access_log"], [batch_id], appended=True)
    report = apply_retention(spark, settings, vacuum_hours=0)
    deleted = {(b.table_key, b.batch_id) for b in report.deleted}
    assert {("bronze.quarantine", "q-old"), ("ops.access_log", "access-old")} <= deleted
    assert _batches(spark, settings, "bronze.quarantine") == {"q-new"}
    assert _batches(spark, settings, "ops.access_log") == {"access-new"}
    result = verify_chain(spark, settings)
    assert result.ok, result.problems
