"""The Databricks Asset Bundle runs only entry points and commands that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from conf.settings import load_settings
from tests.conftest import REPO
from tests.pipelines.cli.test_cli import run_cli

BUNDLE = yaml.safe_load((REPO / "databricks.yml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _resources() -> dict:
    merged: dict = {}
    for pattern in BUNDLE["include"]:
        for path in sorted(REPO.glob(pattern)):
            for kind, items in yaml.safe_load(path.read_text())["resources"].items():
                merged.setdefault(kind, {}).update(items)
    return merged


def _substitute(value: str) -> str:
    defaults = {name: spec["default"] for name, spec in BUNDLE["variables"].items()}

    def replace(match: re.Match) -> str:
        assert match.group(1) in defaults, f"undefined bundle variable {match.group(1)}"
        return str(defaults[match.group(1)])

    return re.sub(r"\$\{var\.([a-z_]+)\}", replace, value)


WHEEL_TASKS = [
    (job_key, task["task_key"], task["python_wheel_task"])
    for job_key, job in _resources()["jobs"].items()
    for task in job["tasks"]
    if "python_wheel_task" in task
]


def test_the_pipeline_job_is_scheduled_with_one_task_per_stage():
    job = _resources()["jobs"]["lakehouse_pipeline"]
    assert job["schedule"]["quartz_cron_expression"]
    assert job["max_concurrent_runs"] == 1
    assert [t["task_key"] for t in job["tasks"]] == ["land", "refine", "publish"]


@pytest.mark.parametrize("job_key,task_key,task", WHEEL_TASKS, ids=[f"{j}.{t}" for j, t, _ in WHEEL_TASKS])
def test_each_task_calls_an_existing_entry_point_and_command(job_key, task_key, task, tmp_path: Path):
    assert task["package_name"] == PYPROJECT["project"]["name"].replace("-", "_")
    assert task["entry_point"] in PYPROJECT["project"]["scripts"]
    parameters = [_substitute(p) for p in task["parameters"]]
    home_index = parameters.index("--home") + 1
    parameters[home_index] = str(tmp_path)
    # --help after the full argument list makes the real CLI resolve every option and sub-command.
    result = run_cli(*parameters, "--help", check=False)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    # The settings the task passes are valid for its profile.
    overrides = [parameters[i + 1] for i, p in enumerate(parameters) if p == "--set"]
    profile = parameters[parameters.index("--profile") + 1]
    settings = load_settings(profile, home=tmp_path, env={}, overrides=overrides)
    assert settings.catalog.name == BUNDLE["variables"]["catalog"]["default"]


def test_catalog_and_schema_are_bundle_variables():
    assert {"catalog", "schema_prefix", "home"} <= set(BUNDLE["variables"])
    text = (REPO / "resources" / "lakehouse_pipeline.job.yml").read_text()
    assert "catalog.name=${var.catalog}" in text
