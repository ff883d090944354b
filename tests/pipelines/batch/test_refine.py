"""The refine stage on real Delta tables: the shared fixture history end to end, late data, crash safety.

Bronze rows are built from the fixture's MCL lines with exactly bronze.aspect_snapshots' columns and
committed with a bronze.landed_files row, as landing does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datahub_actions.event.event_registry import EntityChangeEvent

from conf.tables import table_location, table_name
from pipelines.batch.export_ece import write_ece_jsonl
from pipelines.runtime.state_store import APPENDED, FOLDED, LOGGED, MERGED, fold_state_log, read_state
from pipelines.runtime.io import SCRATCH_ROW_GROUP_ROWS, read_table
from pipelines.runtime.storage import storage_for
from pipelines.batch.refine import (
    BATCH_STEPS,
    _stage,
    merge_events,
    refine,
    refine_batch,
    stage_batch,
)
from pipelines.batch.timeline import aspects_as_of, entity_history, replay_window
from tests.conftest import REPO, delta_log_actions, make_settings, register_fresh_tables
from tests.silver.bronze_rows import (
    FIXTURES,
    land,
    mcl,
    read_mcl_fixture,
    split_batches,
    to_bronze_rows,
)
from tests.silver.events_helpers import change_event_rows

CUSTOMERS_6 = "urn:li:dataset:(urn:li:dataPlatform:postgres,appdb.public.customers_6,PROD)"
STATE = "silver.aspect_state"
SILVER = ("silver.entity_change_events", STATE, "silver.skipped_snapshots")
# Processing timestamps differ between runs by nature; everything else must be identical.
VOLATILE = ("updated_at", "recorded_at")
COMPARED = ("event_id", "entity_urn", "entity_type", "category", "operation", "modifier", "parameters", "actor",
            "event_time", "aspect_name", "aspect_entity_urn", "change_set_id", "old_value", "new_value",
            "source_order_key")


def tables_snapshot(spark, settings) -> dict[str, list[str]]:
    """Every silver table's rows (volatile columns left out) as sorted JSON text; the state with its log applied."""
    snapshot = {}
    for key in SILVER:
        table_df = read_state(spark, settings) if key == STATE else read_table(spark, settings, key)
        columns = [c for c in table_df.columns if c not in VOLATILE]
        rows = table_df.select(*columns).collect()
        snapshot[key] = sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in rows)
    return snapshot


def use(spark, settings):
    """Point the session's table names at `settings.home` (tests in this module switch homes)."""
    register_fresh_tables(spark, settings)
    return settings


def comparable(rows) -> list[str]:
    return sorted(json.dumps({c: r[c] for c in COMPARED}, sort_keys=True) for r in rows)


@pytest.fixture(scope="module")
def fixture_home(spark, tmp_path_factory):
    """The fixture history landed as three batches and refined."""
    settings = use(spark, make_settings(tmp_path_factory.mktemp("fixture-home")))
    for rows in split_batches(read_mcl_fixture(), [120, 250]):
        land(spark, settings, rows)
    started = time.perf_counter()
    result = refine(spark, settings)
    return settings, result, time.perf_counter() - started


def test_fixture_history_refines_batch_by_batch_like_one_batch(spark, fixture_home):
    settings, result = use(spark, fixture_home[0]), fixture_home[1]
    assert result.batch_ids == ("b000", "b001", "b002")
    assert result.rows_in == 374
    stored = [r.asDict(recursive=True) for r in read_table(spark, settings, "silver.entity_change_events").collect()]
    assert result.rows_out == len(stored)
    assert comparable(stored) == comparable(change_event_rows(spark, read_mcl_fixture()))
    assert {r["batch_id"] for r in stored} == {"b000", "b001", "b002"}
    state = read_state(spark, settings).collect()
    assert len(state) == len({(r["entityUrn"], r["aspectName"]) for r in read_mcl_fixture()})
    assert {r.entity_urn for r in state if r.entity_deleted} == {CUSTOMERS_6}
    assert all(r.deleted for r in state if r.entity_urn == CUSTOMERS_6)
    assert read_table(spark, settings, "silver.skipped_snapshots").count() == 0


def test_the_fixture_landed_by_the_landing_stage_refines_to_the_same_events(spark, tmp_path):
    from pipelines.batch.landing import land_paths

    settings = use(spark, make_settings(tmp_path / "landed"))
    land_paths(spark, settings, [FIXTURES / "history-small.mcl.jsonl"])
    result = refine(spark, settings)
    stored = [r.asDict(recursive=True) for r in read_table(spark, settings, "silver.entity_change_events").collect()]
    assert len(result.batch_ids) == 1 and result.rows_in == 374
    assert comparable(stored) == comparable(change_event_rows(spark, read_mcl_fixture()))


def test_every_exported_event_is_read_by_datahubs_consumer_class(spark, fixture_home, tmp_path):
    settings = use(spark, fixture_home[0])
    out = tmp_path / "events.jsonl"
    count = write_ece_jsonl(spark, settings, out)
    lines = out.read_text().splitlines()
    assert count == len(lines) == read_table(spark, settings, "silver.entity_change_events").count()
    parsed = [EntityChangeEvent.from_json(line) for line in lines]
    assert len(parsed) == len(lines)
    for line, event in zip(lines, parsed):
        document = json.loads(line)
        # The consumer's own serialization gives back exactly the exported object: nothing lost or renamed.
        assert json.loads(event.as_json()) == document
        assert event.version == 0 and event.auditStamp.time == document["auditStamp"]["time"]
        assert event.safe_parameters == document.get("parameters", {})
    schema_events = [json.loads(line) for line in lines if '"TECHNICAL_SCHEMA"' in line]
    assert schema_events and all(isinstance(e["parameters"]["nullable"], bool) for e in schema_events)


def test_export_window_is_half_open(spark, fixture_home, tmp_path):
    settings = use(spark, fixture_home[0])
    times = sorted(r.event_time for r in read_table(spark, settings, "silver.entity_change_events").collect())
    middle = times[len(times) // 2]
    before = write_ece_jsonl(spark, settings, tmp_path / "a.jsonl", until_ms=middle)
    after = write_ece_jsonl(spark, settings, tmp_path / "b.jsonl", since_ms=middle)
    assert before == sum(t < middle for t in times) and after == sum(t >= middle for t in times)


def test_as_of_gives_the_newest_snapshot_created_before_the_time(spark, fixture_home):
    settings = use(spark, fixture_home[0])
    aspects = {a["aspect_name"]: a for a in aspects_as_of(spark, settings, CUSTOMERS_6, 1701200000000)}
    # By hand from the fixture: the versions of customers_6 written up to 2023-11-28T19:33:20Z.
    assert {name: a["version"] for name, a in aspects.items()} == {
        "datasetKey": 1, "datasetProperties": 1, "schemaMetadata": 2, "status": 3, "ownership": 2,
        "globalTags": 1, "domains": 1,
    }
    assert aspects["status"]["aspect"] == {"removed": False}
    assert aspects["ownership"]["aspect"]["owners"][0]["type"] == "DATA_STEWARD"
    after_delete = aspects_as_of(spark, settings, CUSTOMERS_6, 1704246625016)
    assert len(after_delete) == 12 and all(a["deleted"] and a["aspect"] is None for a in after_delete)


def test_history_lists_the_entity_and_its_field_events_in_order(spark, fixture_home):
    settings = use(spark, fixture_home[0])
    events = entity_history(spark, settings, CUSTOMERS_6)
    assert (events[0]["category"], events[0]["operation"]) == ("LIFECYCLE", "CREATE")
    assert (events[-1]["category"], events[-1]["operation"]) == ("LIFECYCLE", "HARD_DELETE")
    assert [e["event_time"] for e in events] == sorted(e["event_time"] for e in events)
    assert any(e["entity_type"] == "schemaField" for e in events)


def test_the_entity_events_of_one_fixture_dataset_are_the_hand_derived_ones(spark, fixture_home):
    # customers_6's history in the fixture, read by hand (schema field events are left out here; the
    # rules tests cover them): (time, category, operation, modifier, parameters).
    settings = use(spark, fixture_home[0])
    classification = "urn:li:structuredProperty:io.acryl.privacy.classification"
    certifier = "urn:li:structuredProperty:io.acryl.dataManagement.certifier"
    rgarcia = "urn:li:corpuser:rgarcia"
    technical = {"ownerUrn": rgarcia, "ownerType": "TECHNICAL_OWNER",
                 "ownerTypeUrn": "urn:li:ownershipType:__system__technical_owner"}
    steward = {"ownerUrn": rgarcia, "ownerType": "DATA_STEWARD",
               "ownerTypeUrn": "urn:li:ownershipType:__system__data_steward"}
    raw, raw4 = "Raw appdb.public.customers_6 table", "Raw appdb.public.customers_6 table (rev 4)"
    curated = "Curated description #{} of appdb.public.customers_6 by {}".format
    note = "Replaced; migrate before Q2"
    deleted_at = 1704246625000
    expected = [
        (1700593423000, "LIFECYCLE", "CREATE", None, {}),
        (1700593423001, "DOCUMENTATION", "ADD", None, {"description": raw}),
        (1700593423004, "OWNER", "ADD", rgarcia, technical),
        (1700728913005, "TAG", "ADD", "urn:li:tag:Sensitive", {"tagUrn": "urn:li:tag:Sensitive"}),
        (1700792243005, "LIFECYCLE", "SOFT_DELETE", None, {}),
        (1700920380005, "DOMAIN", "ADD", "urn:li:domain:finance", {"domainUrn": "urn:li:domain:finance"}),
        (1701125932005, "LIFECYCLE", "REINSTATE", None, {}),
        (1701184082005, "OWNER", "REMOVE", rgarcia, technical),
        (1701184082005, "OWNER", "ADD", rgarcia, steward),
        (1701358195005, "DOMAIN", "REMOVE", "urn:li:domain:finance", {"domainUrn": "urn:li:domain:finance"}),
        (1701503344005, "GLOSSARY_TERM", "ADD", "urn:li:glossaryTerm:Finance.Revenue",
         {"termUrn": "urn:li:glossaryTerm:Finance.Revenue"}),
        (1701614947005, "LIFECYCLE", "SOFT_DELETE", None, {}),
        (1701701721005, "GLOSSARY_TERM", "ADD", "urn:li:glossaryTerm:Finance.Cost",
         {"termUrn": "urn:li:glossaryTerm:Finance.Cost"}),
        (1701782160005, "STRUCTURED_PROPERTY", "ADD", classification,
         {"propertyUrn": classification, "propertyValues": '["Public"]'}),
        # datasetProperties v2 and v3 change only customProperties: no event.
        (1702019895005, "GLOSSARY_TERM", "REMOVE", "urn:li:glossaryTerm:Finance.Cost",
         {"termUrn": "urn:li:glossaryTerm:Finance.Cost"}),
        (1702092437005, "DOCUMENTATION", "ADD", None, {"description": curated(1, "rgarcia")}),
        (1702348508005, "STRUCTURED_PROPERTY", "REMOVE", classification, {}),
        (1702605602005, "TAG", "ADD", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}),
        (1702850957005, "DEPRECATION", "MODIFY", "DEPRECATED",
         {"status": "DEPRECATED", "note": note, "decommissionTime": "1705442957005"}),
        (1703352244005, "DEPRECATION", "MODIFY", "ACTIVE", {"status": "ACTIVE"}),
        (1703382211005, "DOCUMENTATION", "MODIFY", None, {"description": curated(2, "jdoe")}),
        (1703487314005, "TAG", "REMOVE", "urn:li:tag:Sensitive", {"tagUrn": "urn:li:tag:Sensitive"}),
        (1703527148005, "OWNER", "REMOVE", rgarcia, steward),
        (1703527148005, "OWNER", "ADD", rgarcia, technical),
        (1703592269005, "DOMAIN", "ADD", "urn:li:domain:sales", {"domainUrn": "urn:li:domain:sales"}),
        (1703751271005, "OWNER", "REMOVE", rgarcia, technical),
        (1703751271005, "OWNER", "ADD", rgarcia, steward),
        (1703869430005, "STRUCTURED_PROPERTY", "ADD", certifier,
         {"propertyUrn": certifier, "propertyValues": '["urn:li:corpuser:rgarcia"]'}),
        (1704148008005, "DEPRECATION", "MODIFY", "DEPRECATED",
         {"status": "DEPRECATED", "note": note, "decommissionTime": "1706740008005"}),
        (1704148769005, "DOCUMENTATION", "MODIFY", None, {"description": raw4}),
        (1704209509005, "DOCUMENTATION", "MODIFY", None, {"description": curated(3, "mlee")}),
        # The hard delete: every aspect's DELETE (deleting deprecation or status flips nothing), then the key.
        (deleted_at + 5, "DOCUMENTATION", "REMOVE", None, {"description": raw4}),
        (deleted_at + 7, "DOMAIN", "REMOVE", "urn:li:domain:sales", {"domainUrn": "urn:li:domain:sales"}),
        (deleted_at + 8, "DOCUMENTATION", "REMOVE", None, {"description": curated(3, "mlee")}),
        (deleted_at + 10, "TAG", "REMOVE", "urn:li:tag:Gold", {"tagUrn": "urn:li:tag:Gold"}),
        (deleted_at + 11, "GLOSSARY_TERM", "REMOVE", "urn:li:glossaryTerm:Finance.Revenue",
         {"termUrn": "urn:li:glossaryTerm:Finance.Revenue"}),
        (deleted_at + 12, "OWNER", "REMOVE", rgarcia, steward),
        (deleted_at + 15, "STRUCTURED_PROPERTY", "REMOVE", certifier, {}),
        (deleted_at + 16, "LIFECYCLE", "HARD_DELETE", None, {}),
    ]  # fmt: skip
    events_df = read_table(spark, settings, "silver.entity_change_events").filter(
        f"entity_urn = '{CUSTOMERS_6}' AND category <> 'TECHNICAL_SCHEMA'"
    )
    found = [(r.event_time, r.category, r.operation, r.modifier, dict(r.parameters or {})) for r in events_df.collect()]

    def order(event):
        return event[0], event[1], event[2], event[3] or "", json.dumps(event[4], sort_keys=True)

    assert sorted(found, key=order) == sorted(expected, key=order)


def test_replay_leaves_out_batches_not_refined_yet_and_takes_windows_without_events(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "home"))
    first, second = split_batches(read_mcl_fixture(), [200])
    land(spark, settings, first)
    refine(spark, settings)
    land(spark, settings, second)  # landed, not refined: silver holds none of its events yet
    whole = replay_window(spark, settings, 0, 2**62)
    assert whole.equal and whole.recomputed == whole.stored > 0
    empty = replay_window(spark, settings, 0, 1000)
    assert empty.equal and (empty.recomputed, empty.stored) == (0, 0)


def test_replay_of_the_whole_history_equals_what_silver_holds(spark, fixture_home):
    settings = use(spark, fixture_home[0])
    result = replay_window(spark, settings, 0, 2**62)
    assert result.equal and result.recomputed == result.stored > 0


@pytest.mark.slow
def test_the_cli_prints_as_of_aspects_and_proves_the_replay(spark, fixture_home):
    home = str(use(spark, fixture_home[0]).home)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", home, *args], cwd=REPO,
                              env={**os.environ, "RUST_LOG": "error"}, capture_output=True, text=True, timeout=300)

    as_of = cli("as-of", CUSTOMERS_6, "2023-11-28T19:33:20Z", "--json")
    assert as_of.returncode == 0, as_of.stderr[-2000:]
    lines = [json.loads(line) for line in as_of.stdout.splitlines()]
    assert [(a["aspect_name"], a["version"]) for a in lines] == [
        ("datasetKey", 1), ("datasetProperties", 1), ("domains", 1), ("globalTags", 1), ("ownership", 2),
        ("schemaMetadata", 2), ("status", 3)]
    replay = cli("replay", "--from", "2023-11-01", "--to", "2024-02-01")
    assert replay.returncode == 0, replay.stdout + replay.stderr[-2000:]
    assert "equal" in replay.stdout


def test_refine_reports_the_seconds_of_every_staged_part_and_write_of_its_batches(fixture_home):
    _, result, wall_s = fixture_home
    seconds = {k: v for k, v in result.metrics.items() if k.startswith("seconds.")}
    assert list(seconds) == [
        "seconds.batch_state", "seconds.sequenced", "seconds.patched", "seconds.schema_fields", "seconds.events", "seconds.skipped",
        "seconds.entity_status", "seconds.state", "seconds.events_merged", "seconds.skipped_merged", "seconds.patches_merged",
        "seconds.state_merged"]
    assert all(v >= 0 for v in seconds.values())
    # Every batch of the fixture writes events and state rows, so those steps took time; the last one
    # updates entities the second one logged, so it read them through the log.
    assert min(seconds["seconds.sequenced"], seconds["seconds.events"], seconds["seconds.state_merged"]) > 0
    assert seconds["seconds.batch_state"] > 0
    # Steps are timed one after another inside the run, never overlapping; each batch's figures are
    # rounded to the millisecond (half of one each, for the fixture's three batches).
    assert sum(seconds.values()) <= wall_s + 0.0005 * len(seconds) * 3


def test_running_refine_or_a_batch_again_adds_nothing(spark, fixture_home):
    settings = use(spark, fixture_home[0])
    before = tables_snapshot(spark, settings)
    assert refine(spark, settings).batch_ids == ()
    assert refine_batch(spark, settings, "b001") is None
    assert tables_snapshot(spark, settings) == before


def test_late_and_replayed_versions_are_skipped_and_change_nothing(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "late"))
    urn = "urn:li:dataset:(urn:li:dataPlatform:hive,late,PROD)"

    def tags(version, *names, time=None):
        value = {"tags": [{"tag": f"urn:li:tag:{n}"} for n in names]}
        return mcl(urn, "globalTags", value, version=version, time=time or 1700000000000 + version)

    land(spark, settings, to_bronze_rows([tags(1, "A"), tags(3, "A", "C")], "b000"))
    land(spark, settings, to_bronze_rows([tags(2, "A", "B"), tags(3, "A", "C"), tags(4, "C")], "b001", batch_index=1))
    refine(spark, settings)
    skipped = read_table(spark, settings, "silver.skipped_snapshots").orderBy("version").collect()
    assert [(s.version, s.reason, s.state_order_key) for s in skipped] == [
        (2, "LATE", "v0000000000000000003.0"),
        (3, "DUPLICATE", "v0000000000000000003.0"),
    ]
    events = read_table(spark, settings, "silver.entity_change_events").orderBy("source_order_key", "operation").collect()
    assert [(e.source_version, e.operation, e.modifier) for e in events] == [
        (1, "ADD", "urn:li:tag:A"), (3, "ADD", "urn:li:tag:C"), (4, "REMOVE", "urn:li:tag:A")]
    state = read_state(spark, settings).collect()
    assert [(s.version, s.batch_id, s.prev_version, s.prev_batch_id) for s in state] == [(4, "b001", 3, "b000")]
    # From scratch the late version 2 is a step of the history, so the replay shows what it changed.
    result = replay_window(spark, settings, 0, 2**62)
    assert not result.equal and not result.unexpected
    assert sorted((m["source_version"], m["operation"], m["modifier"]) for m in result.missing) == [
        (2, "ADD", "urn:li:tag:B"), (3, "REMOVE", "urn:li:tag:B")]


def test_a_hard_delete_and_a_re_creation_flag_every_state_row_of_the_entity(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "flags"))
    gone, kept = (f"urn:li:dataset:(urn:li:dataPlatform:hive,{n},PROD)" for n in ("gone", "kept"))

    def key(urn, version, time, change_type="UPSERT"):
        return mcl(urn, "datasetKey", {"platform": "urn:li:dataPlatform:hive", "name": urn}, version=version,
                   time=time, change_type=change_type)

    def tags(urn, time):
        return mcl(urn, "globalTags", {"tags": [{"tag": "urn:li:tag:A"}]}, version=1, time=time)

    def flags():
        rows = read_state(spark, settings).collect()
        return sorted((r.entity_urn, r.aspect_name, r.entity_deleted, r.batch_id) for r in rows)

    land(spark, settings, to_bronze_rows([key(gone, 1, 1), tags(gone, 2), key(kept, 1, 3), tags(kept, 4)], "b000"))
    land(spark, settings, to_bronze_rows([key(gone, 1, 5, "DELETE")], "b001", batch_index=1))
    refine(spark, settings)
    # The globalTags row of the deleted entity keeps the batch that wrote it and gains the flag.
    assert flags() == [
        (gone, "datasetKey", True, "b001"), (gone, "globalTags", True, "b000"),
        (kept, "datasetKey", False, "b000"), (kept, "globalTags", False, "b000"),
    ]
    land(spark, settings, to_bronze_rows([key(gone, 2, 6)], "b002", batch_index=2))
    refine(spark, settings)
    assert flags() == [
        (gone, "datasetKey", False, "b002"), (gone, "globalTags", False, "b000"),
        (kept, "datasetKey", False, "b000"), (kept, "globalTags", False, "b000"),
    ]


def test_new_keys_are_appended_small_updates_logged_and_folded_and_large_ones_merged(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "append-log-merge"))
    first, second = (f"urn:li:dataset:(urn:li:dataPlatform:hive,{n},PROD)" for n in ("first", "second"))

    def tags(urn, tag, version, time):
        return mcl(urn, "globalTags", {"tags": [{"tag": f"urn:li:tag:{tag}"}]}, version=version, time=time)

    def commits(key):
        actions = delta_log_actions(table_location(settings, key))
        return [a["commitInfo"]["operation"] for a in actions if "commitInfo" in a][1:]  # after CREATE TABLE

    def versions(state_df):
        return sorted((r.entity_urn, r.version, r.batch_id, r.prev_version) for r in state_df.collect())

    def refine_next(index, rows, batch_settings):
        land(spark, batch_settings, to_bronze_rows(rows, f"b00{index}", batch_index=index))
        return refine_batch(spark, batch_settings, f"b00{index}").state_write

    batches = [[tags(first, "A", 1, 1)], [tags(second, "A", 1, 2)], [tags(first, "B", 2, 3), tags(second, "B", 2, 4)]]
    assert [refine_next(i, rows, settings) for i, rows in enumerate(batches)] == [[APPENDED], [APPENDED], [LOGGED]]
    assert (commits(STATE), commits("silver.aspect_state_log")) == (["WRITE", "WRITE"], ["WRITE"])
    updated = [(first, 2, "b002", 1), (second, 2, "b002", 1)]
    assert versions(read_state(spark, settings)) == updated
    assert versions(read_table(spark, settings, STATE)) == [(first, 1, "b000", None), (second, 1, "b001", None)]

    assert fold_state_log(spark, settings) == 2
    assert (commits(STATE)[-1], commits("silver.aspect_state_log")[-1]) == ("MERGE", "DELETE")
    assert read_table(spark, settings, "silver.aspect_state_log").count() == 0
    assert versions(read_table(spark, settings, STATE)) == versions(read_state(spark, settings)) == updated
    assert fold_state_log(spark, settings) == 0

    # With room for one row: a larger batch is MERGEd; one that fills the log past it is logged, then folded.
    one_row = dataclasses.replace(settings, refine=dataclasses.replace(settings.refine, state_log_max_rows=1))
    assert refine_next(3, [tags(first, "C", 3, 5), tags(second, "C", 3, 6)], one_row) == [MERGED]
    assert commits(STATE)[-1] == "MERGE"
    assert versions(read_table(spark, settings, STATE)) == [(first, 3, "b003", 2), (second, 3, "b003", 2)]
    assert refine_next(4, [tags(first, "D", 4, 7)], one_row) == [LOGGED]
    assert refine_next(5, [tags(second, "D", 4, 8)], one_row) == [FOLDED]
    assert (commits(STATE)[-1], commits("silver.aspect_state_log")[-2:]) == ("MERGE", ["WRITE", "DELETE"])
    assert versions(read_table(spark, settings, STATE)) == [(first, 4, "b004", 3), (second, 4, "b005", 3)]
    events = read_table(spark, settings, "silver.entity_change_events").collect()
    assert sorted((r.entity_urn, r.operation, r.modifier) for r in events if r.category == "TAG") == sorted(
        [(urn, op, f"urn:li:tag:{tag}") for urn in (first, second)
         for op, tag in (("ADD", "A"), ("ADD", "B"), ("REMOVE", "A"), ("ADD", "C"), ("REMOVE", "B"),
                         ("ADD", "D"), ("REMOVE", "C"))]
    )


def test_the_state_table_uses_deletion_vectors(spark, fixture_home):
    settings = use(spark, fixture_home[0])
    before = tables_snapshot(spark, settings)
    assert fold_state_log(spark, settings) > 0  # the later batches were logged; the fold MERGEs them
    assert tables_snapshot(spark, settings) == before
    actions = delta_log_actions(table_location(settings, "silver.aspect_state"))
    assert any(a.get("metaData", {}).get("configuration", {}).get("delta.enableDeletionVectors") == "true" for a in actions)
    # Later batches replaced rows written by earlier ones: those are marked, not rewritten with their files.
    assert any(a.get("add", {}).get("deletionVector") for a in actions)


def test_a_batch_of_replays_only_changes_nothing_but_the_skipped_table(spark, tmp_path):
    settings = use(spark, make_settings(tmp_path / "replays"))
    records = read_mcl_fixture()[:30]
    land(spark, settings, to_bronze_rows(records, "b000"))
    refine(spark, settings)
    before = tables_snapshot(spark, settings)
    land(spark, settings, to_bronze_rows(records, "b001", batch_index=1))
    assert refine(spark, settings).batch_ids == ("b001",)
    after = tables_snapshot(spark, settings)
    assert after["silver.entity_change_events"] == before["silver.entity_change_events"]
    assert after["silver.aspect_state"] == before["silver.aspect_state"]
    skipped = read_table(spark, settings, "silver.skipped_snapshots").collect()
    assert len(skipped) == 30 and {s.batch_id for s in skipped} == {"b001"}
    # A replay of the state's own version is a duplicate; of an older version (superseded in b000), late.
    assert {s.reason for s in skipped} == {"DUPLICATE", "LATE"}
    assert all((s.reason == "DUPLICATE") == (s.order_key == s.state_order_key) for s in skipped)
    assert all(s.order_key <= s.state_order_key for s in skipped)


# ---- crash safety: stop the second batch after each step, run refine again, compare with an uninterrupted run


@pytest.fixture(scope="module")
def crash_base(spark, tmp_path_factory) -> Path:
    """A home where b000 is refined and b001 (it updates state rows and hard-deletes an entity) is landed only."""
    settings = use(spark, make_settings(tmp_path_factory.mktemp("crash-base")))
    first, second = split_batches(read_mcl_fixture(), [250])
    land(spark, settings, first)
    refine(spark, settings)
    land(spark, settings, second)
    return settings.home


def copy_home(spark, base: Path, target: Path):
    shutil.copytree(base, target)
    return use(spark, make_settings(target))


@pytest.fixture(scope="module")
def uninterrupted(spark, crash_base, tmp_path_factory) -> dict[str, list[str]]:
    settings = copy_home(spark, crash_base, tmp_path_factory.mktemp("uninterrupted") / "home")
    refine(spark, settings)
    return tables_snapshot(spark, settings)


@pytest.mark.parametrize("steps_done", range(len(BATCH_STEPS) + 1))
def test_a_batch_stopped_after_any_step_resumes_to_the_same_tables(spark, crash_base, uninterrupted, tmp_path, steps_done):
    settings = copy_home(spark, crash_base, tmp_path / "home")
    staged = stage_batch(spark, settings, "b001")
    for _, step in BATCH_STEPS[:steps_done]:
        step(spark, settings, staged)
    assert refine(spark, settings).batch_ids == ("b001",)
    assert tables_snapshot(spark, settings) == uninterrupted


def test_a_batch_s_events_are_appended_on_its_first_run_and_merged_without_copies_on_a_re_run(spark, crash_base, tmp_path):
    settings = copy_home(spark, crash_base, tmp_path / "home")
    staged = stage_batch(spark, settings, "b001")
    assert staged.events > 0

    def commits():
        actions = delta_log_actions(table_location(settings, "silver.entity_change_events"))
        return [a["commitInfo"]["operation"] for a in actions if "commitInfo" in a]

    before = len(commits())
    merge_events(spark, settings, staged)
    assert commits()[before:] == ["WRITE"]
    # The re-run's MERGE finds every event stored: it inserts nothing (and the engine commits nothing).
    merge_events(spark, settings, staged)
    assert commits()[before + 1 :] in ([], ["MERGE"])
    events_df = read_table(spark, settings, "silver.entity_change_events").filter("batch_id = 'b001'")
    assert events_df.count() == events_df.select("event_id").distinct().count() == staged.events


@pytest.mark.slow
def test_a_killed_refine_process_resumes_to_the_same_tables(spark, crash_base, uninterrupted, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(crash_base, home)
    env = {**os.environ, "LAKEHOUSE_CRASH_AT": "refine.state_merged", "RUST_LOG": "error"}
    killed = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "--home", str(home), "refine"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    settings = use(spark, make_settings(home))
    state_rows = read_state(spark, settings).filter("batch_id = 'b001'").count()
    assert state_rows > 0  # the kill came after the state write
    assert refine(spark, settings).batch_ids == ("b001",)
    assert tables_snapshot(spark, settings) == uninterrupted
    assert spark.sql(f"SELECT count(*) AS n FROM {table_name(settings, 'ops.stage_progress')}").collect()[0].n == 2


@pytest.mark.slow
def test_a_fold_killed_between_its_merge_and_emptying_the_log_gives_the_same_state(spark, crash_base, uninterrupted, tmp_path):
    settings = copy_home(spark, crash_base, tmp_path / "home")
    assert refine_batch(spark, settings, "b001").state_write == [LOGGED]
    env = {**os.environ, "LAKEHOUSE_CRASH_AT": "state.folded", "RUST_LOG": "error"}
    killed = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "--home", str(settings.home), "maintain", "--optimize", "-t", STATE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    settings = use(spark, settings)
    logged = read_table(spark, settings, "silver.aspect_state_log").count()
    assert logged > 0  # the kill came after the MERGE and before the log was emptied
    assert read_table(spark, settings, STATE).filter("batch_id = 'b001'").count() > 0
    assert tables_snapshot(spark, settings) == uninterrupted
    assert fold_state_log(spark, settings) == logged
    assert tables_snapshot(spark, settings) == uninterrupted


def test_staged_files_are_cut_into_row_groups_that_cores_read_in_parallel(spark, tmp_path):
    rows = 2 * SCRATCH_ROW_GROUP_ROWS + 1000
    # Partitioned like the sequenced rows: each partition value is one file.
    one_value_df = spark.range(rows).selectExpr("id", "concat('row-', id) AS text", "'all' AS part")
    read_back_df = _stage(one_value_df, tmp_path / "staged", storage_for(tmp_path), {}, {}, {}, partition_by="part")
    metadata = [pq.ParquetFile(path).metadata for path in sorted((tmp_path / "staged").rglob("*.parquet"))]
    groups = [m.row_group(i).num_rows for m in metadata for i in range(m.num_row_groups)]
    assert len(metadata) == 1 and len(groups) == 3
    assert max(groups) <= SCRATCH_ROW_GROUP_ROWS and read_back_df.count() == rows
