"""Kill a real `lakehouse run` at named points, run it again, and compare with an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conf.tables import TABLES, table_location
from tests.conftest import FIXTURES, make_settings
from tests.pipelines.cli.test_cli import LAKEHOUSE, run_cli

pytestmark = pytest.mark.slow

# Columns that name a run or record wall-clock time: they differ between any two runs by design.
VOLATILE = {
    "batch_id",
    "landed_at",
    "processed_at",
    "recorded_at",
    "updated_at",
    "refreshed_at",
    "quarantined_at",
    "land_date",
    "run_id",
    "source_version",
}

CRASH_POINTS = [
    "land.after_data",  # data rows written, ledger (the batch's commit) not yet
    "after_land",  # between stages
    "refine.staged@300",  # 0.3 s into the events MERGE
    "refine.events_merged",
    "refine.state_merged",
    "publish_audit.merged",
    "between_publish_audit_and_openmetadata",
    "publish_openmetadata.merged",
    "publish_lineage.merged",
]


# MLflow tracking is covered by the pipeline tests; here it would only add seconds to every run.
RUN = ("--set", "mlflow.enabled=false", "run", "--no-progress", "--path")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A landing folder with the shared fixture history and a small generated history."""
    from datagen.history import generate_history

    landing = tmp_path_factory.mktemp("inputs")
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", landing / "history-small.mcl.jsonl")
    generate_history(landing / "generated", entities=12, seed=5, usage_events=300, action_requests=14)
    return landing


@pytest.fixture(scope="module")
def uninterrupted(inputs: Path, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("uninterrupted")
    run_cli(*RUN, str(inputs), home=home)
    return home


def table_contents(spark, home: Path) -> dict[str, list[str]]:
    """Every table's rows (volatile columns left out) as sorted JSON strings."""
    settings = make_settings(home)
    contents = {}
    for key in TABLES:
        df = spark.read.format("delta").load(str(table_location(settings, key)))
        kept = [c for c in df.columns if c not in VOLATILE]
        rows = [json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in df.select(*kept).collect()]
        contents[key] = sorted(rows)
    return contents


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_run_killed_at_a_point_resumes_to_the_same_tables(spark, inputs, uninterrupted, point, tmp_path):
    killed = run_cli(*RUN, str(inputs), home=tmp_path, env={"LAKEHOUSE_CRASH_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL, f"{point} was never reached:\n{killed.stdout}\n{killed.stderr}"
    run_cli(*RUN, str(inputs), home=tmp_path)
    expected = table_contents(spark, uninterrupted)
    actual = table_contents(spark, tmp_path)
    assert expected["silver.entity_change_events"], "the uninterrupted run derived no events"
    for key in TABLES:
        if key in ("ops.stage_progress", "ops.audit_chain"):
            continue  # which run consumed a batch differs; chain digests cover the (per-run) batch ids
        assert actual[key] == expected[key], f"{key} differs after a crash at {point}"
    assert chain_shape(spark, tmp_path) == chain_shape(spark, uninterrupted), f"the chain differs after a crash at {point}"


def chain_shape(spark, home: Path) -> list[tuple]:
    """The chain's links as sorted (table, rows) pairs, after checking that it verifies: no link twice, none broken."""
    from pipelines.batch.audit_chain import read_chain, verify_chain
    from tests.conftest import register_fresh_tables

    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    result = verify_chain(spark, settings)
    assert result.ok, result.broken
    return sorted((link["table_key"], link["row_count"]) for link in read_chain(spark, settings))


def test_a_second_run_of_the_same_inputs_changes_nothing(spark, inputs, uninterrupted):
    before = table_contents(spark, uninterrupted)
    run_cli(*RUN, str(inputs), home=uninterrupted)
    after = table_contents(spark, uninterrupted)
    assert after == before


def test_two_runs_started_together_do_not_corrupt_anything(spark, inputs, uninterrupted, tmp_path):
    command = [LAKEHOUSE, "--home", str(tmp_path), *RUN, str(inputs)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = [p.communicate(timeout=600) + (p.returncode,) for p in (first, second)]
    codes = sorted(r[2] for r in results)
    assert codes[0] == 0, results
    if codes[1] != 0:
        refused = next(r for r in results if r[2] != 0)
        assert "another run holds the lock" in refused[1]
        assert "Traceback" not in refused[1]
    expected = table_contents(spark, uninterrupted)
    actual = table_contents(spark, tmp_path)
    for key in TABLES:
        if key not in ("ops.stage_progress", "ops.audit_chain"):
            assert actual[key] == expected[key], key
    assert chain_shape(spark, tmp_path) == chain_shape(spark, uninterrupted)


def test_a_stage_that_fails_says_where_what_was_committed_and_the_next_run_resumes(spark, inputs, uninterrupted, tmp_path):
    failed = run_cli(*RUN, str(inputs), home=tmp_path, env={"LAKEHOUSE_FAIL_AT": "publish_audit.merged"}, check=False)
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    [message] = [line for line in failed.stderr.splitlines() if line.strip()]
    [batch_id] = _landed_batches(spark, tmp_path)
    assert message.startswith(f"error: stage publish failed on batch {batch_id};"), message
    assert "committed to bronze." in message and "gold.audit_events" in message, message
    assert "The next run resumes at publish" in message and "InjectedFailure" in message, message
    run_cli(*RUN, str(inputs), home=tmp_path)
    expected = table_contents(spark, uninterrupted)
    actual = table_contents(spark, tmp_path)
    for key in TABLES:
        if key not in ("ops.stage_progress", "ops.audit_chain"):
            assert actual[key] == expected[key], f"{key} differs after a failed publish and a second run"
    assert chain_shape(spark, tmp_path) == chain_shape(spark, uninterrupted)


def _landed_batches(spark, home: Path) -> list[str]:
    location = table_location(make_settings(home), "bronze.landed_files")
    return sorted({r.batch_id for r in spark.read.format("delta").load(str(location)).select("batch_id").collect()})
