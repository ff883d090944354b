"""`lakehouse bench silver` comparing the embedded engine on a local home with `sail spark server` in
local-cluster mode on a home on an S3-protocol server (moto on loopback), in one run, as a real subprocess."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conf.errors import InputError
from pipelines.bench.silver import ENGINES
from pipelines.bench.silver_remote import EngineChoice, parse_assignments, parse_engine_choice
from tests.pipelines.cli.test_cli import run_cli


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("bench-remote")
    run_cli("bench", "silver", "--versions", "1000", "--batches", "2", "--seed", "3", "--engine", "sail",
            "--engine", "sail-cluster:s3", "--storage", "local", "--baseline", "--work", str(folder / "work"),
            "--out", str(folder / "out"), timeout=600)  # fmt: skip
    (path,) = (folder / "out").glob("silver-compare-*.json")
    return json.loads(path.read_text()), folder / "work"


@pytest.mark.slow
def test_both_engines_derive_the_baselines_event_ids_and_the_s3_run_writes_nothing_local(compared):
    result, work = compared
    assert result["engines"] == ["sail:local", "sail-cluster:s3"]
    local, remote = result["runs"]
    assert (local["engine"], local["storage"]) == ("sail", "local")
    assert (remote["engine"], remote["storage"]) == ("sail-cluster", "s3")
    # Each run's event ids were checked against the one-process baseline on the same input files.
    assert local["event_ids_match"] is remote["event_ids_match"] is True
    assert local["events"] == remote["events"] == remote["baseline"]["events"] > 0
    assert [b["versions"] for b in local["per_batch"]] == [b["versions"] for b in remote["per_batch"]]
    # The S3 run ran second and removed the local run's home first: its tables were all on the S3 server.
    assert not (work / "home").exists()


@pytest.mark.slow
def test_each_run_hashes_its_tables_and_the_remote_run_equals_the_embedded_one(compared):
    result, _ = compared
    local, remote = result["runs"]
    assert set(local["table_hashes"]) == {"silver.entity_change_events", "silver.aspect_state"}
    assert local["table_hashes"]["silver.entity_change_events"]["rows"] == local["events"]
    assert remote["table_hashes"] == local["table_hashes"]
    assert result["tables_equal"] is True


@pytest.mark.slow
def test_each_run_reports_its_own_driver_memory_and_the_servers(compared):
    result, _ = compared
    local, remote = result["runs"]
    # Each run had a process of its own: the remote run's driver holds no engine, so it peaks lower than the
    # embedded run's, which would be its peak too had both run in one process (a peak never goes down).
    assert 0 < remote["peak_rss_bytes"] < local["peak_rss_bytes"]
    assert "engine_server_peak_rss_bytes" not in local
    assert remote["engine_server_peak_rss_bytes"] > remote["peak_rss_bytes"]
    assert result["median"]["sail-cluster:s3"]["engine_server_peak_rss_bytes"] == remote["engine_server_peak_rss_bytes"]
    less_s3 = (result["median"]["sail-cluster:s3"]["pipeline_wall_s"] - result["median"]["sail-cluster:s3"]["s3_server_cpu_s"])
    assert result["ratio_to_first_less_s3_cpu"]["sail-cluster:s3"] == round(less_s3 / result["median"]["sail:local"]["pipeline_wall_s"], 3)


@pytest.mark.slow
def test_the_servers_cpu_is_reported_per_step_apart_from_the_client(compared):
    result, _ = compared
    local, remote = result["runs"]
    assert "engine_server_cpu_s" not in local and "s3_server_cpu_s" not in local
    for figures in (remote["engine_server_cpu_s"], remote["s3_server_cpu_s"]):
        assert list(figures) == ["landing", "refine"] and all(seconds > 0 for seconds in figures.values())


@pytest.mark.slow
def test_the_cluster_run_reports_the_plans_its_driver_sent_the_workers_per_step(compared):
    result, _ = compared
    local, remote = result["runs"]
    assert "task_definitions" not in local
    steps = remote["task_definitions"]
    assert len(steps["refine"]) == remote["batches"] == 2
    for step in (steps["landing"], *steps["refine"]):
        assert step["requests"] > 0 and step["tasks"] >= step["requests"]
        assert step["total_bytes"] >= step["max_bytes"] > 0


@pytest.mark.slow
def test_the_medians_and_the_ratio_come_from_the_runs(compared):
    result, _ = compared
    walls = {
        label: statistics.median(r["landing"]["wall_s"] + r["refine"]["wall_s"] for r in result["runs"] if r["label"] == label)
        for label in result["engines"]
    }
    for label, wall in walls.items():
        assert result["median"][label]["pipeline_wall_s"] == round(wall, 3)
    assert result["ratio_to_first"]["sail-cluster:s3"] == round(
        round(walls["sail-cluster:s3"], 3) / round(walls["sail:local"], 3), 3
    )
    assert result["load_average_1m"]["before"] >= 0


def test_an_engine_names_its_storage_or_takes_the_default():
    assert parse_engine_choice("sail-cluster:s3", ENGINES, "local") == EngineChoice("sail-cluster", "s3")
    assert parse_engine_choice("sail", ENGINES, "s3").label == "sail:s3"


@pytest.mark.parametrize(
    ("text", "message"),
    [("spark", "--engine: 'spark' is not one of"), ("sail:hdfs", "--storage: 'hdfs'"),
     ("classic:s3", "--storage: 'classic' runs on a local folder only")],
)  # fmt: skip
def test_an_unknown_engine_or_storage_is_refused_naming_it(text, message):
    with pytest.raises(InputError, match=message):
        parse_engine_choice(text, ENGINES, "local")


def test_cluster_variables_are_sail_names_with_values():
    pairs = ["SAIL_CLUSTER__WORKER_TASK_SLOTS=2", "SAIL_MODE=local=x"]
    assert parse_assignments(pairs, "--cluster-env", "SAIL_") == {"SAIL_CLUSTER__WORKER_TASK_SLOTS": "2", "SAIL_MODE": "local=x"}
    for bad in ("SAIL_CLUSTER__WORKER_TASK_SLOTS", "PATH=/bin"):
        with pytest.raises(InputError, match=f"--cluster-env: '{bad}' is not SAIL_<name>=<value>"):
            parse_assignments([bad], "--cluster-env", "SAIL_")
