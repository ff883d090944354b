"""`lakehouse bench silver --micro-batches`: small batches refined against the bench's state, checked against the tables."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conf.tables import table_location
from pipelines.bench.micro_batches import VERSION_STEP, micro_batch_lines
from tests.conftest import make_settings
from tests.pipelines.cli.test_cli import run_cli


def test_micro_batch_lines_are_new_versions_of_picked_records():
    pool = [
        json.dumps({"entityUrn": f"urn:{i}", "aspectName": "tags", "systemMetadata": {"version": "3"}}) for i in range(10)
    ] + [json.dumps({"entityUrn": "urn:no-metadata", "aspectName": "tags"})]
    lines = [json.loads(line) for line in micro_batch_lines(pool, 2, 11, random.Random(1))]
    assert sorted(r["entityUrn"] for r in lines) == sorted([f"urn:{i}" for i in range(10)] + ["urn:no-metadata"])
    # Batch 2's versions start at 3 * VERSION_STEP and rise by one per record.
    assert [int(r["systemMetadata"]["version"]) for r in lines] == list(range(3 * VERSION_STEP, 3 * VERSION_STEP + 11))


@pytest.mark.slow
def test_the_micro_batches_report_what_the_tables_hold(spark, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    run_cli("bench", "silver", "--versions", "2000", "--seed", "3", "--micro-batches", "2", "--micro-records", "30",
            "--work", str(work), "--out", str(out), timeout=600)  # fmt: skip
    (path,) = out.glob("silver-*.json")
    result = json.loads(path.read_text())
    micro = result["micro_batches"]
    settings = make_settings(work / "home")

    def read(key):
        return spark.read.format("delta").load(str(table_location(settings, key)))

    main_batch = result["per_batch"][0]["batch_id"]
    bronze = {r.batch_id: r["count"] for r in read("bronze.aspect_snapshots").groupBy("batch_id").count().collect()}
    events = {r.batch_id: r["count"] for r in read("silver.entity_change_events").groupBy("batch_id").count().collect()}
    micro_batches = sorted(b for b in bronze if b != main_batch)
    assert len(micro_batches) == 2 and all(bronze[b] == 30 for b in micro_batches)
    assert [b["records"] for b in micro["per_batch"]] == [30, 30]
    assert [b["events"] for b in micro["per_batch"]] == [events.get(b, 0) for b in micro_batches]
    # The state the micro-batches met is the one the main batch left: one row per (entity, aspect) of it.
    main_keys = read("bronze.aspect_snapshots").filter(f"batch_id = '{main_batch}'").select("entity_urn", "aspect_name")
    assert micro["state_keys"] == main_keys.distinct().count()
    assert micro["refine_wall_s"]["max"] == max(b["wall_s"] for b in micro["per_batch"]) > 0
    assert result["targets"]["micro_batch_refine_s"] == 3.0
