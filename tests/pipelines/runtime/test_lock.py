"""The run lock between pipeline runs of one home."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf.errors import ConcurrencyError
from pipelines.runtime.lock import lock_path, run_lock
from tests.conftest import make_settings


def _left_lock(settings, pid: int, host: str, owner: str, started_at: float) -> Path:
    """Write the lock file another process would have left; return its path."""
    path = lock_path(settings)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": pid, "host": host, "owner": owner, "started_at": started_at}))
    return path


def _taken_over(settings, path: Path) -> bool:
    """Whether a new run gets the lock at `path` and writes itself into it."""
    with run_lock(settings, owner="new run"):
        return json.loads(path.read_text())["owner"] == "new run"


def test_a_second_holder_is_refused_with_the_holder_named(tmp_path):
    settings = make_settings(tmp_path)
    with run_lock(settings, owner="first run"):
        with pytest.raises(ConcurrencyError, match="first run .*pid"):
            with run_lock(settings, owner="second run"):
                pass
    assert not lock_path(settings).exists()


def test_waiting_gets_the_lock_once_it_is_released(tmp_path):
    settings = make_settings(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tests.conftest import make_settings\n"
            "from pipelines.runtime.lock import run_lock\n"
            "from pathlib import Path\n"
            "with run_lock(make_settings(Path(sys.argv[1])), owner='holder'):\n"
            "    print('held', flush=True); time.sleep(2)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with run_lock(settings, owner="waiter", wait_seconds=30):
        waited = time.monotonic() - started
    holder.wait(timeout=30)
    assert waited > 0.5


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    settings = make_settings(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = _left_lock(settings, dead.pid, socket.gethostname(), "x", time.time())
    assert _taken_over(settings, path)


def test_a_lock_older_than_the_stale_timeout_is_taken_over(tmp_path):
    settings = make_settings(tmp_path)
    old = time.time() - settings.locks.stale_after_seconds - 5
    path = _left_lock(settings, 1, "another-host", "old", old)
    assert _taken_over(settings, path)


def test_a_fresh_lock_from_another_host_is_respected(tmp_path):
    settings = make_settings(tmp_path)
    path = _left_lock(settings, 1, "another-host", "remote", time.time())
    with pytest.raises(ConcurrencyError, match="remote"):
        with run_lock(settings, owner="new run"):
            pass
    assert json.loads(path.read_text())["owner"] == "remote"
