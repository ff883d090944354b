"""The files a command writes under the home are its owner's only (storage.file_access), checked after real runs.

`lakehouse run` (the embedded engine and delta-rs writing tables, MLflow its store, the logs) and
`lakehouse serve` (its workers, the access log, last-used times) run as subprocesses on a fresh home;
then every file and folder under the home is looked at.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from pipelines.runtime.engine_servers import free_loopback_port, stop_process
from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import LAKEHOUSE, run_cli

# A pipeline run and a server in subprocesses: tens of seconds.
pytestmark = pytest.mark.slow


def _modes(home: Path) -> dict[str, int]:
    """The permission bits of the home and of every file and folder below it, by path relative to the home."""
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for folder, folders, files in os.walk(home):
        for name in folders + files:
            path = Path(folder) / name
            found[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _serve_one_search(home: Path, token: str) -> None:
    """Run `lakehouse serve` (two workers), make one search, stop it with SIGTERM (the access log is flushed)."""
    port = free_loopback_port()
    command = [LAKEHOUSE, "--home", str(home), "--set", "serve.workers=2", "serve", "--port", str(port)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_"))}
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            try:
                if httpx.post(f"{url}/openapi/v1/events/audit/search", json={}, headers=headers, timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    finally:
        stop_process(process, timeout=30)


def test_a_run_and_a_server_write_files_for_their_owner_only(tmp_path):
    home = tmp_path / "home"
    run_cli("run", "--no-progress", "--path", str(FIXTURES / "history-small.mcl.jsonl"), home=home)
    token = run_cli("token", "create", "--actor", "urn:li:corpuser:auditor", home=home).stdout.strip().splitlines()[-1]
    _serve_one_search(home, token)
    modes = _modes(home)
    written = {"ops/access_log", "gold/audit_events", "silver/entity_change_events", "bronze/aspect_snapshots"}
    assert written <= set(modes), sorted(modes)[:40]  # the tables are where the check looks
    assert any(path.startswith("ops/access_log/") and path.endswith(".parquet") for path in modes)
    assert any(path.endswith(".db") or "mlruns" in path for path in modes), "the MLflow store is under the home"
    open_to_others = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert open_to_others == {}


def test_group_access_lets_the_group_read_and_nobody_else(tmp_path):
    home = tmp_path / "home"
    run_cli("--set", "storage.file_access=group", "token", "create", "--actor", "urn:li:corpuser:auditor", home=home)
    modes = _modes(home)
    assert modes["."] == 0o750 and modes["auth"] == 0o750
    assert all(mode & 0o027 == 0 for mode in modes.values()), {p: oct(m) for p, m in modes.items()}
    assert any(mode & 0o040 for path, mode in modes.items() if (home / path).is_file())


def test_an_unknown_file_access_is_a_configuration_error(tmp_path):
    result = run_cli("--set", "storage.file_access=everyone", "tables", home=tmp_path / "home", check=False)
    assert result.returncode == 2
    assert "storage.file_access: 'everyone' is not one of owner, group" in result.stderr + result.stdout
