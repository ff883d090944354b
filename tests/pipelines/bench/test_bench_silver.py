"""`lakehouse bench silver`, run as a real subprocess on small inputs: what its JSON result says is checked
against the tables it wrote and against the generator's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conf.errors import ConfigError, InputError
from conf.tables import table_location
from pipelines.bench.harness import Measurement
from pipelines.bench.silver import run_silver_bench
from pipelines.bench.silver_baseline import BaselineMismatch, compare_with_baseline
from tests.conftest import make_settings
from tests.pipelines.cli.test_cli import run_cli

STEPS = ["batch_state", "sequenced", "patched", "schema_fields", "events", "skipped", "entity_status", "state",
         "events_merged", "skipped_merged", "patches_merged", "state_merged"]


def run_bench(work: Path, out: Path, *args: str) -> dict:
    """Run `lakehouse bench silver` on 2,000 versions in two batches; return its one JSON result."""
    run_cli("bench", "silver", "--versions", "2000", "--batches", "2", "--seed", "3", "--work", str(work),
            "--out", str(out), *args, timeout=600)
    (path,) = out.glob("silver-*.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def sail_bench(tmp_path_factory) -> tuple[dict, Path]:
    work = tmp_path_factory.mktemp("bench-sail")
    return run_bench(work / "work", work / "out", "--baseline", "--floors"), work / "work"


def read_delta(spark, home: Path, key: str):
    return spark.read.format("delta").load(str(table_location(make_settings(home), key)))


def test_the_result_counts_what_the_tables_hold(spark, sail_bench):
    result, work = sail_bench
    manifest = json.loads((work / "input" / "manifest.json").read_text())
    assert result["engine"] == "sail" and result["batches"] == 2
    assert result["versions"] == manifest["totals"]["aspect_versions"]
    bronze = {r.batch_id: r["count"] for r in read_delta(spark, work / "home", "bronze.aspect_snapshots")
              .groupBy("batch_id").count().collect()}
    events = {r.batch_id: r["count"] for r in read_delta(spark, work / "home", "silver.entity_change_events")
              .groupBy("batch_id").count().collect()}
    batches = result["per_batch"]
    assert sorted(b["batch_id"] for b in batches) == sorted(bronze)
    assert {b["batch_id"]: b["versions"] for b in batches} == bronze
    assert {b["batch_id"]: b["events"] for b in batches} == events
    assert result["events"] == sum(events.values()) > 0


def test_each_batch_reports_its_steps_within_its_wall_time(sail_bench):
    result, _ = sail_bench
    for batch in result["per_batch"]:
        assert list(batch["steps_s"]) == STEPS
        assert all(seconds >= 0 for seconds in batch["steps_s"].values())
        # Each figure is rounded to the millisecond: allow half of one per figure.
        assert sum(batch["steps_s"].values()) <= batch["wall_s"] + 0.0005 * (len(STEPS) + 1)
    first, last = result["per_batch"][0]["wall_s"], result["per_batch"][-1]["wall_s"]
    assert result["last_to_first_batch"] == round(last / first, 3)
    assert result["refine"]["wall_s"] >= first + last - 0.0015
    assert 0 < result["peak_rss_bytes"] <= 64 * 1024**3


def test_the_baseline_derives_the_same_event_ids_as_the_pipeline(spark, sail_bench):
    result, work = sail_bench
    baseline_ids = set((work / "baseline-event-ids.txt").read_text().split())
    sail_ids = {r.event_id for r in read_delta(spark, work / "home", "silver.entity_change_events").select("event_id").collect()}
    assert baseline_ids == sail_ids and len(sail_ids) == result["events"] == result["baseline"]["events"]
    assert result["event_ids_match"] is True
    assert result["baseline"]["records"] == result["versions"] and result["baseline"]["skipped_lines"] == 0


def test_the_result_holds_the_baseline_figures_and_the_ratio(sail_bench):
    result, _ = sail_bench
    baseline = result["baseline"]
    assert baseline["wall_s"] > 0 and baseline["cpu_s"] > 0 and baseline["peak_rss_bytes"] > 0
    assert result["pipeline_wall_s"] == round(result["landing"]["wall_s"] + result["refine"]["wall_s"], 3)
    assert result["pipeline_cpu_s"] == round(result["landing"]["cpu_s"] + result["refine"]["cpu_s"], 3)
    assert result["baseline_ratio"] == round(baseline["wall_s"] / result["pipeline_wall_s"], 3)


FLOORS = ["read_parse_input_s", "scan_bronze_s", "write_bronze_s", "sort_batch_s", "parse_aspects_once_s",
          "validate_aspects_s", "parse_aspects_only_s", "write_bronze_parsed_s", "event_ids_s", "write_events_s",
          "read_batch_state_keys_s", "read_batch_state_with_json_s"]


def test_the_floors_time_each_least_step_once_and_leave_no_scratch(sail_bench):
    result, work = sail_bench
    floors = result["floors"]
    assert list(floors) == FLOORS
    # Each floor is one engine job on the data the run wrote: it takes time, and less than all of the run.
    assert all(0 < seconds < result["landing"]["wall_s"] + result["refine"]["wall_s"] for seconds in floors.values())
    # The engine works inside this process: each job's CPU time is counted, beside its wall time.
    assert list(result["floors_cpu"]) == FLOORS
    assert all(seconds > 0 for seconds in result["floors_cpu"].values())
    assert not (work / "floors").exists()


def test_each_batch_reports_the_cpu_time_of_its_steps(sail_bench):
    result, _ = sail_bench
    for batch in result["per_batch"]:
        assert list(batch["steps_cpu_s"]) == STEPS
        assert all(seconds >= 0 for seconds in batch["steps_cpu_s"].values()) and batch["steps_cpu_s"]["events"] > 0


def test_different_event_ids_fail_naming_the_first_differences(sail_bench):
    result, work = sail_bench
    pipeline_ids = set((work / "baseline-event-ids.txt").read_text().split())
    lost = min(pipeline_ids)
    figures = {
        "event_ids": (pipeline_ids - {lost}) | {"0" * 64},
        "landing": Measurement(wall_s=1.0, cpu_s=1.0),
        "refine": Measurement(wall_s=1.0, cpu_s=1.0),
    }
    batch_dirs = [work / "input" / f"batch-{index:05d}" / "aspects" for index in range(2)]
    with pytest.raises(BaselineMismatch) as raised:
        compare_with_baseline(work, batch_dirs, figures)
    assert f"1 only from the pipeline (first: ['{'0' * 64}'])" in str(raised.value)
    assert f"1 only from the baseline (first: ['{lost}'])" in str(raised.value)


@pytest.mark.parametrize("engine", ["classic"])  # "[classic]" in its id puts it with the suite's JVM tests
def test_jvm_spark_derives_the_baselines_events_from_the_same_input(engine, classic_url, tmp_path):
    # On the suite's JVM server (the bench's own local[2] would be the same server, started once more). The
    # sail run derives the baseline's events too (test_the_baseline_derives_the_same_event_ids_as_the_pipeline): so both derive the same.
    classic = run_bench(tmp_path / "work", tmp_path / "out", "--engine", engine, "--classic-url", classic_url, "--baseline")
    assert classic["engine"] == "classic" and classic["batches"] == 2
    assert classic["event_ids_match"] is True
    assert classic["events"] == classic["baseline"]["events"] == sum(b["events"] for b in classic["per_batch"]) > 0


def test_a_classic_url_is_refused_for_another_engine_and_when_it_is_no_spark_connect_url(tmp_path):
    with pytest.raises(InputError, match=r"--classic-url: 'sc://127.0.0.1:1' is for the classic engine only, not 'sail'"):
        run_silver_bench(versions=100, engine="sail", classic_url="sc://127.0.0.1:1", work=tmp_path / "sail")
    with pytest.raises(ConfigError, match=r"engine.connect_url: 'http://127.0.0.1:1' does not start with sc://"):
        run_silver_bench(versions=100, engine="classic", classic_url="http://127.0.0.1:1", work=tmp_path / "classic")
