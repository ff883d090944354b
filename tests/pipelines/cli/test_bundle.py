"""The Databricks Asset Bundle runs only entry points and commands that exist."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
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


# The engine packages a Databricks runtime (and any Spark 4 cluster) brings itself: installed from the
# wheel's base dependencies they would replace the runtime's own PySpark and Delta.
ENGINE_PACKAGES = {"pyspark", "pysail", "delta-spark"}


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory) -> tuple[email.message.Message, str]:
    """Build the project wheel the way the bundle does (offline) and return its METADATA and entry points."""
    out = tmp_path_factory.mktemp("wheel")
    # From a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = out / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "tests", "docs"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--wheel-dir", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (wheel,) = out.glob("metadata_audit_lakehouse-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        (entry_points_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "conf/base.yaml" in names and "conf/profiles/databricks.yaml" in names
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
        return metadata, archive.read(entry_points_name).decode()


def _requirement(line: str) -> tuple[str, str | None]:
    """(normalized name, extra or None) of one Requires-Dist line."""
    spec, _, marker = line.partition(";")
    name = re.split(r"[\[=<>!~ ]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")
    extra = re.search(r"extra\s*==\s*['\"]([a-z0-9_-]+)['\"]", marker)
    return name, extra.group(1) if extra else None


def test_the_wheel_leaves_the_engine_to_the_platform_and_the_local_extra(wheel_metadata):
    metadata, _ = wheel_metadata
    requirements = [_requirement(line) for line in metadata.get_all("Requires-Dist")]
    base = {name for name, extra in requirements if extra is None}
    local = {name for name, extra in requirements if extra == "local"}
    assert "deltalake" in base and "fastapi" in base
    assert not base & ENGINE_PACKAGES, f"the base dependencies pin {base & ENGINE_PACKAGES}"
    assert ENGINE_PACKAGES <= local
    assert {"local", "connect", "dev"} <= set(metadata.get_all("Provides-Extra"))


def test_the_wheel_installs_the_lakehouse_entry_point_the_bundle_runs(wheel_metadata):
    _, entry_points = wheel_metadata
    assert re.search(r"^lakehouse\s*=\s*pipelines\.cli\.app:main$", entry_points, re.MULTILINE)
    assert {task["entry_point"] for _, _, task in WHEEL_TASKS} == {"lakehouse"}


def test_every_job_cluster_runs_spark_4():
    # PySpark 4 APIs (DataFrame.toArrow) need Databricks Runtime 17.x; 17.3 is its LTS.
    for job_key, job in _resources()["jobs"].items():
        for cluster in job["job_clusters"]:
            version = cluster["new_cluster"]["spark_version"]
            major, minor = (int(part) for part in version.split(".")[:2])
            assert (major, minor) >= (17, 3), f"{job_key}: {version}"


def test_make_installs_the_embedded_engine():
    assert "'.[local,dev]'" in (REPO / "Makefile").read_text()
