"""Homes built by earlier releases keep working: today's code migrates them in place and runs on.

Each folder under tests/fixtures/homes/ is a small home written by one release's code (its README names
the commit and the commands). The test copies it, checks it verifies as it is, runs today's pipeline over
new input large enough to MERGE into the state, and checks every table and column today's code declares
is there, verify passes and search answers with the old and the new events (docs/operations.md, Upgrades).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conf.tables import TABLES, table_location, table_spec
from datagen.history import generate_history
from tests.conftest import REPO, make_settings
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow

HOMES = sorted(p for p in (REPO / "tests" / "fixtures" / "homes").iterdir() if p.is_dir())
# After the fixtures' histories (which start on the generator's default, 2023-11-14, and last 30 days).
NEW_INPUT_START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
NO_MLFLOW = ("--set", "mlflow.enabled=false")


@pytest.fixture(scope="module")
def new_input(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("upgrade-input")
    generate_history(out, entities=400, seed=60, start_ms=NEW_INPUT_START_MS, days=10, workers=1)
    return out


def test_every_release_home_is_kept_with_its_commit_named():
    assert HOMES, "no home of an earlier release is kept under tests/fixtures/homes"
    for home in HOMES:
        assert home.name.startswith("release-") and (home / "README.md").is_file(), home


@pytest.mark.parametrize("release_home", HOMES, ids=[p.name for p in HOMES])
def test_a_home_of_an_earlier_release_migrates_runs_verifies_and_answers(release_home, new_input, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(release_home, home, ignore=shutil.ignore_patterns("README.md"))
    before = run_cli("verify", home=home)
    assert before.stdout.startswith("OK"), before.stdout
    old_events = _rows(home, "silver.entity_change_events")

    # A small state log: the new input's batch is MERGEd into the old state (the path a release broke).
    run_cli(*NO_MLFLOW, "--set", "refine.state_log_max_rows=100", "run", "--no-progress", "--path", str(new_input), home=home)

    settings = make_settings(home)
    for key, spec in TABLES.items():
        location = str(table_location(settings, key))
        assert DeltaTable.is_deltatable(location), f"{key} was not created in the old home"
        columns = {field.name for field in DeltaTable(location).schema().fields}
        assert set(table_spec(key).column_names) <= columns, f"{key} lacks {set(spec.column_names) - columns}"
    assert _rows(home, "silver.entity_change_events") > old_events
    after = run_cli("verify", home=home)
    assert after.stdout.startswith("OK"), after.stdout
    found = json.loads(run_cli("search", "--start-time", "0", "--size", "1", home=home).stdout)
    assert found["total"] >= _rows(home, "gold.audit_events") > 0


def _rows(home: Path, key: str) -> int:
    return DeltaTable(str(table_location(make_settings(home), key))).to_pyarrow_dataset().count_rows()
