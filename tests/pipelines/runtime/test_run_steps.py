"""The running step of a run, seen from another process: `lakehouse status --json` and the pipeline metrics
show the stage and step a run sits in and a time that keeps growing, as a query that does not come back."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conf.settings import load_settings
from pipelines.runtime.faults import STALL_ENV
from pipelines.runtime.lock import run_in_progress, run_lock, running_step
from pipelines.runtime.metrics import HomeCollector
from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import LAKEHOUSE, run_cli


def _status(home) -> dict:
    return json.loads(run_cli("--set", "mlflow.enabled=false", "status", "--json", home=home).stdout)


def _step_samples(settings) -> dict[tuple[str, str], float]:
    return {
        (s.labels["stage"], s.labels["step"]): s.value
        for family in HomeCollector(settings, watcher_state=False).collect()
        for s in family.samples
        if s.name == "lakehouse_run_step_seconds"
    }


@pytest.mark.slow
def test_a_run_stalled_in_a_step_shows_the_step_and_a_growing_time_in_status_and_metrics(tmp_path):
    home = tmp_path / "home"
    (home / "landing").mkdir(parents=True)
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", home / "landing")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"))}
    run = subprocess.Popen([LAKEHOUSE, "--home", str(home), "--set", "mlflow.enabled=false", "run", "--no-progress"],
                           env={**env, STALL_ENV: "refine.sequenced@300"}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while (first := _status(home)["run"]) is None or first["step"] != "sequenced":
            assert run.poll() is None, run.stderr.read()
            assert time.monotonic() < deadline, f"the run never showed its stalled step: {first}"
            time.sleep(0.5)
        time.sleep(2)
        second = _status(home)["run"]
        assert (second["stage"], second["step"], second["pid"]) == ("refine", "sequenced", run.pid)
        assert second["step_seconds"] >= first["step_seconds"] + 2
        assert second["stage_seconds"] >= second["step_seconds"] and second["seconds"] >= second["stage_seconds"]
        assert not second["stale"] and second["owner"] == "lakehouse run"
        steps = _step_samples(load_settings("local", home=home, env={}))
        assert list(steps) == [("refine", "sequenced")] and steps["refine", "sequenced"] >= second["step_seconds"]
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)


def test_steps_nest_in_a_stage_and_are_gone_with_the_lock(tmp_path):
    settings = load_settings("local", home=tmp_path, env={})
    assert run_in_progress(settings) is None
    with run_lock(settings, owner="lakehouse job-refine"):
        with running_step("refine"):
            with running_step("refine", "events_merged"):
                time.sleep(1.2)  # the lease is written by its renewer thread, at most every half second
                inside = run_in_progress(settings)
            time.sleep(1.2)
            after_step = run_in_progress(settings)
    assert (inside["stage"], inside["step"]) == ("refine", "events_merged") and inside["step_seconds"] >= 1
    assert (after_step["stage"], after_step["step"], after_step["step_seconds"]) == ("refine", None, None)
    assert after_step["stage_seconds"] >= 2
    assert run_in_progress(settings) is None  # released although the token changed while held
    with running_step("refine", "sequenced"):  # outside a run lock: nothing to show, nothing fails
        assert run_in_progress(settings) is None
