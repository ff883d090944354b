"""Every command and HTTP endpoint on a home on object storage: one home on an S3-protocol server (moto),
one pipeline run, then each command once.

An object-storage location has none of `Path`'s file-system methods (`is_dir`, `exists`, `mkdir`, ...): a
command that treats one as a local path fails here with an AttributeError (a non-zero exit, a 500).
The watcher on an S3 home is run in `test_object_storage.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conf.locations import ObjectLocation
from pipelines.serving.tokens import create_token
from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import LAKEHOUSE, run_cli
from tests.pipelines.runtime.test_object_storage import BUCKET, INPUT, S3Server, _put, s3  # noqa: F401 (s3: a fixture)

HOME = f"s3://{BUCKET}/commands"
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:postgres,appdb.public.orders_9,PROD)"
ADMIN = "urn:li:corpuser:admin"
REPO = Path(__file__).resolve().parents[3]
READY = re.compile(r"ready: serving audit search on (http://127\.0\.0\.1:\d+)")
WINDOW = ("--from", "2023-01-01", "--to", "2025-01-01")


def test_an_object_location_has_no_local_file_methods():
    location = ObjectLocation("s3", BUCKET, "commands/gold/audit_events")
    for method in ("is_dir", "is_file", "exists", "mkdir", "unlink", "rglob", "glob", "read_text", "resolve", "stat"):
        assert not hasattr(location, method), method


def test_no_table_existence_check_but_the_one():
    # A second check would be one more place where an object-storage location meets a local-path call.
    check = re.compile(r"is_deltatable|_delta_log\"\)\.(is_dir|exists)|has_files\([^)]*_delta_log")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "pipelines").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if check.search(line) and path != REPO / "pipelines" / "runtime" / "storage.py"
    ]
    assert found == [], "use pipelines.runtime.storage.table_exists"


@pytest.fixture(scope="module")
def s3_home(s3: S3Server, tmp_path_factory) -> Path:
    """The shipped history run through the pipeline on an S3 home; yields the home's local folder."""
    local_dir = tmp_path_factory.mktemp("s3-commands-local")
    _put(s3, f"commands/landing/{INPUT}", (FIXTURES / INPUT).read_bytes())
    result = _run(s3, local_dir, "run", "--no-progress")
    assert not _failure(result), _failure(result)
    return local_dir


def _run(s3: S3Server, local_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `lakehouse` on the S3 home."""
    return run_cli("--home", HOME, "--set", "mlflow.enabled=false", "--set", f"storage.local_dir={local_dir}", *args,
                   env=s3.env, check=False)  # fmt: skip


def _failure(result: subprocess.CompletedProcess) -> str:
    """What went wrong: a non-zero exit or a traceback (an expected failure is one line, never a traceback)."""
    if result.returncode == 0 and "Traceback" not in result.stderr:
        return ""
    return f"exit {result.returncode}: {result.stderr[-2000:]}"


# Commands that only read the home: run side by side (each is a process of its own), so the module stays short.
READING_COMMANDS = [
    ("status", "--json"),
    ("tables", "--json"),
    ("runs",),
    ("quarantine",),
    ("sql", "select count(*) as n from gold.audit_events"),
    ("describe", "gold.audit_events"),
    ("history", ORDERS),
    ("as-of", ORDERS, "2024-01-01"),
    ("impact", ORDERS, "--start-time", "2023-01-01", "--end-time", "2025-01-01"),
    ("search", "--start-time", "2023-01-01", "--size", "2", "--no-raw"),
    ("replay", *WINDOW),
    ("report", *WINDOW),
    ("verify",),
    ("access-log", "search"),
    ("anomalies", "list"),
    ("maintain", "--history", "--table", "gold.audit_events"),
]
# Commands that write, in this order.
WRITING_COMMANDS = [
    ("job", "land"),
    ("refine",),
    ("publish-audit",),
    ("publish-openmetadata",),
    ("access-log", "prune"),
    ("subscriptions", "add", "audit-hook", "--url", "https://receiver.example/hook"),
    ("subscriptions", "list"),
    ("subscriptions", "deliver"),
    ("subscriptions", "status"),
    ("maintain", "--optimize", "--table", "gold.audit_events"),
    ("maintain", "--vacuum", "--table", "gold.audit_events"),
]


@pytest.mark.slow
def test_every_reading_command_runs_on_an_s3_home(s3, s3_home, tmp_path):
    out = tmp_path / "events.jsonl"
    commands = [*READING_COMMANDS, ("export", "events", "--format", "ece-jsonl", "--out", str(out))]
    # The first command alone: a first open of the local MLflow store creates it, which two at once would both migrate.
    results = {commands[0]: _run(s3, s3_home, *commands[0])}
    with ThreadPoolExecutor(max_workers=3) as pool:
        results.update(zip(commands[1:], pool.map(lambda args: _run(s3, s3_home, *args), commands[1:])))
    failed = {" ".join(args): _failure(result) for args, result in results.items() if _failure(result)}
    assert failed == {}
    assert results["verify",].stdout.startswith("OK:"), results["verify",].stdout
    assert len(out.read_text().splitlines()) == 401


@pytest.mark.slow
@pytest.mark.parametrize("args", WRITING_COMMANDS, ids=" ".join)
def test_each_writing_command_runs_on_an_s3_home(s3, s3_home, args):
    result = _run(s3, s3_home, *args)
    assert not _failure(result), f"{args}: {_failure(result)}"


@pytest.fixture(scope="module")
def served(s3: S3Server, s3_home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`lakehouse serve` on the S3 home; yields its URL and tokens by role."""
    settings = s3.settings(HOME, s3_home)
    tokens = {role: create_token(settings, ADMIN, [role])[0] for role in ("admin", "audit-read-sensitive", "metrics-read")}
    command = [LAKEHOUSE, "--home", HOME, "--set", f"storage.local_dir={s3_home}", "--set", "mlflow.enabled=false",
               "serve", "--host", "127.0.0.1", "--port", "0"]  # fmt: skip
    env = {**_child_env(), **s3.env, "RUST_LOG": "error"}
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in server.stderr:
            lines.append(line)
            if READY.search(line):
                break
        match = READY.search(lines[-1]) if lines else None
        assert match, f"no ready line: {''.join(lines)}"
        yield match.group(1), tokens
    finally:
        server.terminate()
        server.wait(timeout=30)


def _child_env() -> dict[str, str]:
    """This process's environment without the lakehouse's and Spark Connect's own variables (as `run_cli`)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"))}


@pytest.mark.slow
def test_every_endpoint_answers_on_an_s3_home(served):
    url, tokens = served
    reader = {"Authorization": f"Bearer {tokens['audit-read-sensitive']}"}
    search = httpx.post(f"{url}/openapi/v1/events/audit/search", params={"startTime": 0, "size": 2}, json={},
                        headers=reader, timeout=60)  # fmt: skip
    assert search.status_code == 200 and search.json()["total"] == 351, search.text
    gets = [
        ("/", {}, reader),
        ("/api/v1/timeline", {"urn": ORDERS}, reader),
        ("/api/v1/timeline/as-of", {"urn": ORDERS, "at": "2024-01-01"}, reader),
        ("/api/v1/changes", {}, reader),
        ("/api/v1/activity", {"since": "2023-01-01", "until": "2025-01-01"}, reader),
        ("/api/v1/activity/actor", {"actor": "urn:li:corpuser:mlee"}, reader),
        ("/openapi/v1/audit/report", {"from": "2023-01-01", "to": "2025-01-01"}, reader),
        ("/api/v1/anomalies", {}, reader),
        ("/api/v1/access-log", {}, {"Authorization": f"Bearer {tokens['admin']}"}),
        ("/metrics", {}, {"Authorization": f"Bearer {tokens['metrics-read']}"}),
    ]
    for path, params, headers in gets:
        response = httpx.get(url + path, params=params, headers=headers, timeout=60)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:500]}"
    timeline = httpx.get(f"{url}/api/v1/timeline", params={"urn": ORDERS}, headers=reader, timeout=60).json()
    assert timeline, "the timeline of a changed dataset is empty"
    # The reads above were recorded, and the admin's search of the access log finds them.
    access = httpx.get(f"{url}/api/v1/access-log", headers={"Authorization": f"Bearer {tokens['admin']}"}, timeout=60)
    assert access.status_code == 200 and access.json(), access.text[:500]


@pytest.mark.slow
def test_sql_server_replicates_an_s3_home_once(s3, s3_home):
    from pipelines.runtime.engine_servers import free_loopback_port

    # PostgreSQL runs as an unprivileged user when the tests run as root: its folder must be reachable.
    root = Path(tempfile.mkdtemp(prefix="lakehouse-s3-bi-"))
    root.chmod(0o711)
    try:
        result = run_cli("--home", HOME, "--set", "mlflow.enabled=false", "--set", f"storage.local_dir={s3_home}",
                         "--set", f"bi.data_dir={root / 'postgres'}", "sql-server", "--once", "--port",
                         str(free_loopback_port()), env={**s3.env, "LAKEHOUSE_BI_PASSWORD": "s3-reader"},
                         check=False)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "gold.audit_events" in result.stdout + result.stderr, result.stdout
