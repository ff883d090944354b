"""The jobs as a scheduler runs them: `run`, `job land|refine|publish`, MLflow runs, the demo."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from conf.errors import InputError
from pipelines.orchestration.jobs import OPENMETADATA_ALONGSIDE, OPENMETADATA_LATER, run_job
from pipelines.runtime.io import read_table
from tests.conftest import FIXTURES, make_settings, register_fresh_tables
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.batch.test_crash_resume import assert_same_tables, chain_shape, table_contents

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("landing")
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", folder / "history-small.mcl.jsonl")
    from datagen.history import generate_usage_events

    generate_usage_events(folder / "usage", events=200, seed=3, start_ms=1_700_000_000_000, end_ms=1_700_600_000_000)
    return folder


@pytest.fixture(scope="module")
def tracked_home(landing: Path, tmp_path_factory) -> Path:
    """A home where one tracked `lakehouse run` landed the fixture history and usage events."""
    home = tmp_path_factory.mktemp("tracked")
    result = run_cli("run", "--path", str(landing), "--no-progress", home=home, env={"COLUMNS": "200"})
    assert "Change events derived" in result.stdout
    return home


def test_run_is_an_mlflow_run_with_params_metrics_and_summary(tracked_home: Path):
    runs = [json.loads(line) for line in run_cli("runs", "--json", home=tracked_home).stdout.splitlines()]
    assert len(runs) == 1
    run = runs[0]
    assert run["name"] == "run" and run["status"] == "FINISHED"
    assert run["params"]["profile"] == "local"
    assert run["params"]["stages"] == "land,refine,publish"
    assert run["params"]["version_before.silver.entity_change_events"] == "0"
    assert int(run["params"]["version_after.silver.entity_change_events"]) > 0
    metrics = run["metrics"]
    assert metrics["land.records_read"] == 374 + 200
    assert metrics["land.records_landed"] + metrics["land.records_quarantined"] + metrics[
        "land.duplicates_skipped"
    ] == metrics["land.records_read"]
    assert metrics["events.OWNER"] > 0 and metrics["events.TECHNICAL_SCHEMA"] > 0
    assert metrics["publish.rows_out"] > 0
    # The publish step's stages, each with its own rows; together the step's (the fixture holds no lineage).
    assert metrics["publish_audit.rows_out"] > 0 and metrics["publish_openmetadata.rows_out"] > 0
    assert metrics["publish_lineage.rows_out"] == 0
    assert metrics["publish_audit.rows_out"] + metrics["publish_openmetadata.rows_out"] == metrics["publish.rows_out"]
    for stage in ("land", "refine", "publish"):
        assert metrics[f"{stage}.duration_s"] > 0
    summary_files = list((tracked_home / "mlruns").rglob("summary.json"))
    assert len(summary_files) == 1
    summary = json.loads(summary_files[0].read_text())
    assert [s["stage"] for s in summary["run"]["stages"]] == ["land", "refine", "publish"]


def test_runs_prints_a_table(tracked_home: Path):
    result = run_cli("runs", home=tracked_home, env={"COLUMNS": "200"})
    assert "Recent runs" in result.stdout and "FINISHED" in result.stdout
    run = json.loads(run_cli("runs", "--json", home=tracked_home).stdout.splitlines()[0])
    # The audit_rows column shows the publish_audit stage's rows.
    audit_rows = run["metrics"]["publish_audit.rows_out"]
    row = next(line for line in result.stdout.splitlines() if "FINISHED" in line)
    assert audit_rows > 0 and row.split()[-1] == str(int(audit_rows))


def test_stages_run_separately_give_the_tables_one_run_gives(spark, landing: Path, tracked_home: Path, tmp_path):
    config = ["--set", "mlflow.enabled=false", "--set", f"ingest.landing_dirs=[{landing}]"]
    for stage in ("land", "refine", "publish"):
        run_cli(*config, "job", stage, "--no-progress", home=tmp_path)
    expected = {"tables": table_contents(spark, tracked_home), "chain": chain_shape(spark, tracked_home)}
    assert_same_tables(spark, tmp_path, expected, "the stages run one job each")


def test_openmetadata_alongside_publishes_what_earlier_runs_refined_and_two_runs_give_one_run_s_tables(
    spark, landing: Path, tracked_home: Path, tmp_path
):
    settings = make_settings(tmp_path / "home")
    settings = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False))
    register_fresh_tables(spark, settings)
    first = run_job(settings, paths=[landing], spark=spark, openmetadata=OPENMETADATA_ALONGSIDE)
    reports = {r.stage: r for r in first.stages}
    assert list(reports) == ["land", "refine", "publish", "publish_openmetadata"]
    # Nothing was refined before the first run: its batch's ChangeEvents wait for the next one.
    assert reports["refine"].batch_ids and reports["publish_openmetadata"].batch_ids == ()
    assert read_table(spark, settings, "gold.openmetadata_change_events").count() == 0
    assert read_table(spark, settings, "gold.audit_events").count() > 0
    # A run told to leave them for later does.
    later = run_job(settings, ("refine", "publish"), spark=spark, openmetadata=OPENMETADATA_LATER)
    assert [r.stage for r in later.stages] == ["refine", "publish"]
    assert read_table(spark, settings, "gold.openmetadata_change_events").count() == 0

    second = run_job(settings, ("refine", "publish"), spark=spark, openmetadata=OPENMETADATA_ALONGSIDE)
    reports = {r.stage: r for r in second.stages}
    assert reports["publish_openmetadata"].batch_ids == {r.stage: r for r in first.stages}["refine"].batch_ids
    assert reports["publish_openmetadata"].rows_out > 0
    # Its events were counted by the run that refined them, not again.
    assert second.events_by_category == {} and sum(first.events_by_category.values()) > 0
    expected, actual = table_contents(spark, tracked_home), table_contents(spark, settings.home)
    for key in expected:
        if not key.startswith("ops."):  # run ids and per-run batch ids
            assert actual[key] == expected[key], key


def test_an_unknown_openmetadata_mode_is_refused_naming_it(tmp_path):
    with pytest.raises(InputError, match="openmetadata: 'sometimes' must be one of after_audit, alongside, later"):
        run_job(make_settings(tmp_path / "home"), openmetadata="sometimes")


def test_a_stage_with_nothing_upstream_does_nothing(spark, tmp_path):
    result = run_cli("--set", "mlflow.enabled=false", "job", "refine", "--no-progress", home=tmp_path, env={"COLUMNS": "200"})
    assert "refine" in result.stdout
    assert all(rows == [] for rows in table_contents(spark, tmp_path).values())


def test_demo_generates_runs_and_summarises(tmp_path):
    result = run_cli(
        "demo", "--entities", "15", "--usage-events", "400", "--days", "3", home=tmp_path, env={"COLUMNS": "200"}
    )
    for heading in (
        "Table row counts",
        "Change events by category",
        "Top actors, last day",
        "Sample audit search",
        "MLflow runs",
    ):
        assert heading in result.stdout, heading
    runs = [json.loads(line) for line in run_cli("runs", "--json", home=tmp_path).stdout.splitlines()]
    assert [r["name"] for r in runs] == ["run"]
