"""Kill a real `lakehouse run` at named points, run it again, and compare with an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conf.tables import LINEAGE_EDGES, TABLES, table_location
from gold.lineage import to_current_edges
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
    "published_seq",  # the lineage table's version at the publish: a resumed run appends under a later one
    "source_version",
}

# Kill points in pipeline order, run one after another on one home. A point with a delay (`@ms`) kills
# at an instant, not at a step: the step after it may be done by then, so it lives through its own home.
CRASH_POINTS = [
    "land.after_data",  # data rows written, ledger (the batch's commit) not yet
    "after_land",  # between stages
    "refine.events_merged",
    "refine.state_merged",
    "publish_audit.merged",
    "between_publish_audit_and_openmetadata",
    "publish_openmetadata.merged",
    "publish_lineage.merged",
]
TIMED_CRASH_POINTS = ["refine.staged@300"]  # 0.3 s into the events MERGE


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


@pytest.fixture(scope="module")
def expected(spark, uninterrupted: Path) -> dict:
    """The uninterrupted run's tables and chain, read once for the module."""
    return {"tables": table_contents(spark, uninterrupted), "chain": chain_shape(spark, uninterrupted)}


def table_contents(spark, home: Path) -> dict[str, list[str]]:
    """Every table's rows (volatile columns left out) as sorted JSON strings."""
    settings = make_settings(home)
    contents = {}
    for key in TABLES:
        df = spark.read.format("delta").load(str(table_location(settings, key)))
        if key == LINEAGE_EDGES:
            df = to_current_edges(df)  # as every reader sees it: each owner's newest publish
        kept = [c for c in df.columns if c not in VOLATILE]
        rows = [json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in df.select(*kept).collect()]
        contents[key] = sorted(rows)
    return contents


def assert_same_tables(spark, home: Path, expected: dict, after: str) -> None:
    """Every table but the run-specific ones, and the chain's shape, equal the uninterrupted run's."""
    actual = table_contents(spark, home)
    for key in TABLES:
        if key in ("ops.stage_progress", "ops.audit_chain"):
            continue  # which run consumed a batch differs; chain digests cover the (per-run) batch ids
        assert actual[key] == expected["tables"][key], f"{key} differs after {after}"
    assert chain_shape(spark, home) == expected["chain"], f"the chain differs after {after}"


@pytest.mark.parametrize("points", [CRASH_POINTS, TIMED_CRASH_POINTS], ids=["in-turn", "timed"])
def test_a_run_killed_at_each_point_in_turn_resumes_to_the_same_tables(spark, inputs, expected, points, tmp_path):
    """One home lives through a kill at every point in pipeline order, then a run that finishes.

    Each run after the first starts by resuming what the kill before it left, and is itself killed at
    the next point: every point is both a kill and a resume. A run per point would repeat the whole
    pipeline nine times to prove the same. Before the kill in publish, a run whose publish fails
    (an engine error, not a kill) says where it stopped, and the next run resumes from there too.
    """
    assert expected["tables"]["silver.entity_change_events"], "the uninterrupted run derived no events"
    happened = []
    for point in points:
        if point == "publish_audit.merged":
            assert_a_failed_stage_says_where_and_what_was_committed(spark, inputs, tmp_path, after=happened)
            happened.append("a failed publish")
        killed = run_cli(*RUN, str(inputs), home=tmp_path, env={"LAKEHOUSE_CRASH_AT": point}, check=False)
        after = f"kills at {', '.join(happened) or 'no point'}"
        assert killed.returncode == -signal.SIGKILL, f"{point} was never reached after {after}:\n{killed.stdout}\n{killed.stderr}"
        happened.append(point)
    run_cli(*RUN, str(inputs), home=tmp_path)
    assert_same_tables(spark, tmp_path, expected, f"kills at {', '.join(happened)}")


def assert_a_failed_stage_says_where_and_what_was_committed(spark, inputs: Path, home: Path, after: list[str]) -> None:
    """A run whose publish raises exits 1 with one line: the stage, the batch, the tables committed, what next."""
    failed = run_cli(*RUN, str(inputs), home=home, env={"LAKEHOUSE_FAIL_AT": "publish_audit.merged"}, check=False)
    assert failed.returncode == 1, f"after {after}: {failed.stderr}"
    assert "Traceback" not in failed.stderr
    [message] = [line for line in failed.stderr.splitlines() if line.strip()]
    [batch_id] = _landed_batches(spark, home)
    assert message.startswith(f"error: stage publish failed on batch {batch_id};"), message
    assert "gold.audit_events" in message, message
    assert "The next run resumes at publish" in message and "InjectedFailure" in message, message


def chain_shape(spark, home: Path) -> list[tuple]:
    """The chain's links as sorted (table, rows) pairs, after checking that it verifies: no link twice, none broken."""
    from pipelines.batch.audit_chain import read_chain
    from pipelines.batch.chain_verification import verify_chain
    from tests.conftest import register_fresh_tables

    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    result = verify_chain(spark, settings)
    assert result.ok, result.broken
    return sorted((link["table_key"], link["row_count"]) for link in read_chain(spark, settings))


def test_a_second_run_of_the_same_inputs_changes_nothing(spark, inputs, uninterrupted, expected):
    run_cli(*RUN, str(inputs), home=uninterrupted)
    assert table_contents(spark, uninterrupted) == expected["tables"]


def test_two_runs_started_together_do_not_corrupt_anything(spark, inputs, expected, tmp_path):
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
    assert_same_tables(spark, tmp_path, expected, "two runs started together")


def _landed_batches(spark, home: Path) -> list[str]:
    location = table_location(make_settings(home), "bronze.landed_files")
    return sorted({r.batch_id for r in spark.read.format("delta").load(str(location)).select("batch_id").collect()})
