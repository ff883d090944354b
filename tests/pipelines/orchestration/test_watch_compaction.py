"""Watch mode's compaction: when a round is due, what it compacts, and that it leaves the rows as they were."""

from __future__ import annotations

from conf.tables import table_spec
from pipelines.runtime.state_store import read_state
from pipelines.orchestration.watch_compaction import COMPACTED_TABLES, Compaction
from pipelines.runtime.io import append, read_table
from pipelines.runtime.lock import run_lock
from tests.conftest import make_settings, register_fresh_tables

STATE = "silver.aspect_state"


def test_a_round_is_queued_every_n_micro_batches_and_never_with_0(tmp_path):
    settings = make_settings(tmp_path)
    every_3 = Compaction(settings, 3, lambda record: None)
    every_3.batch_done()
    every_3.batch_done()
    assert every_3.queue == []
    every_3.batch_done()
    assert every_3.queue == list(COMPACTED_TABLES)
    never = Compaction(settings, 0, lambda record: None)
    for _ in range(10):
        never.batch_done()
    assert never.queue == []


def test_every_table_a_micro_batch_writes_is_compacted():
    written = {
        "bronze.aspect_snapshots", "bronze.usage_events", "bronze.landed_files", "bronze.quarantine",
        "bronze.kafka_offsets", "silver.aspect_state", "silver.entity_change_events", "silver.skipped_snapshots",
        "gold.audit_events", "gold.actor_activity_daily", "gold.openmetadata_change_events",
        "ops.stage_progress", "ops.audit_chain",
    }
    assert set(COMPACTED_TABLES) == written
    assert COMPACTED_TABLES[0] == STATE


def test_one_table_per_turn_rows_unchanged_and_a_held_lock_defers_it(spark, tmp_path):
    settings = make_settings(tmp_path / "home")
    register_fresh_tables(spark, settings)
    spec = table_spec(STATE)
    for part in range(3):
        rows = [
            {**{c: None for c in spec.column_names}, "entity_urn": f"urn:li:dataset:{part}-{k}", "aspect_name": "status"}
            for k in range(4)
        ]
        append(spark.createDataFrame(rows, spec.columns), settings, STATE)
    log_spec = table_spec("silver.aspect_state_log")
    update = {**{c: None for c in log_spec.column_names}, "entity_urn": "urn:li:dataset:0-0", "aspect_name": "status",
              "order_key": "v0000000000000000002.0", "batch_id": "b9", "flag_only": False, "log_seq": 1}
    append(spark.createDataFrame([update], log_spec.columns), settings, "silver.aspect_state_log")
    before = sorted((r.entity_urn, r.batch_id) for r in read_state(spark, settings).collect())
    assert ("urn:li:dataset:0-0", "b9") in before
    records: list[dict] = []
    compaction = Compaction(settings, 1, records.append)
    compaction.batch_done()

    with run_lock(settings, owner="a batch run", wait_seconds=0):
        compaction.compact_next(spark)
    assert [r["event"] for r in records] == ["compaction_waiting"]
    assert "a batch run" in records[0]["reason"]
    assert compaction.queue == list(COMPACTED_TABLES)

    compaction.compact_next(spark)
    assert records[-1]["event"] == "compacted" and records[-1]["table"] == STATE
    # The state's turn folds its log into it first: the MERGE adds a file, the compaction merges them all.
    assert records[-1]["folded_rows"] == 1
    assert (records[-1]["files_removed"], records[-1]["files_added"]) == (4, 1)
    assert compaction.queue == list(COMPACTED_TABLES[1:])
    assert read_table(spark, settings, "silver.aspect_state_log").count() == 0
    assert sorted((r.entity_urn, r.batch_id) for r in read_table(spark, settings, STATE).collect()) == before
