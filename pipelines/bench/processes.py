"""The lakehouse as benchmarks' and tests' child processes: the watcher and the server on a home, landing
files dropped the hand-off way, the watcher's log read, the server's CPU time and memory, waiting and stopping.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conf.errors import ConfigError
from conf.settings import Settings
from pipelines.bench.harness import process_tree
from pipelines.runtime.engine_servers import free_loopback_port as free_port  # noqa: F401 - the benchmarks' name for it
from pipelines.runtime.engine_servers import stop_process as stop

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
SEARCH_PATH = "/openapi/v1/events/audit/search"


def mcl_lines(actor: str, records: int, now_ms: int, tag: str) -> list[str]:
    """`records` MetadataChangeLog lines (JSON) that create datasets, made by `actor` at `now_ms`.

    Args:
        actor: the actor urn of every record (a search filter finds exactly these rows).
        records: how many datasets (one dataset properties aspect each).
        now_ms: event time (epoch ms): recent, so the search API's default window holds it.
        tag: makes the dataset names unique to one file.
    """
    lines = []
    for i in range(records):
        urn = f"urn:li:dataset:(urn:li:dataPlatform:hive,watch.{tag}_{i},PROD)"
        properties = {"name": f"{tag}_{i}", "description": f"watch file {tag}", "customProperties": {}}
        lines.append(
            json.dumps(
                {
                    "entityType": "dataset",
                    "entityUrn": urn,
                    "changeType": "UPSERT",
                    "aspectName": "datasetProperties",
                    "aspect": {"value": json.dumps(properties), "contentType": "application/json"},
                    "systemMetadata": {"lastObserved": now_ms + i, "runId": f"watch-{tag}", "version": "1"},
                    "created": {"time": now_ms + i, "actor": actor},
                }
            )
        )
    return lines


def drop_file(folder: Path, name: str, lines: list[str]) -> float:
    """Write a landing file as the hand-off contract says (`.tmp`, then rename); return the rename time."""
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / f"{name}.tmp"
    scratch.write_text("\n".join(lines) + "\n")
    os.replace(scratch, folder / name)
    return time.time()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the lakehouse's and Spark Connect's own variables (a child picks its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_"))}
    return {**env, **(extra or {})}


def start_watch(home: Path, log: Path, env: dict[str, str] | None = None, *settings: str) -> subprocess.Popen:
    """Start `lakehouse run --watch` on `home` (MLflow off unless overridden), its output into `log`."""
    command = [LAKEHOUSE, "--home", str(home), "--set", "mlflow.enabled=false", *_sets(settings), "run", "--watch"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=child_env(env))


def start_serve(home: Path, port: int, log: Path) -> subprocess.Popen:
    """Start `lakehouse serve` on loopback `port` and wait until /health answers."""
    command = [LAKEHOUSE, "--home", str(home), "--set", "mlflow.enabled=false", "serve", "--port", str(port)]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=child_env())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"lakehouse serve exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            http_json(f"http://127.0.0.1:{port}/health")
            return process
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"lakehouse serve did not answer /health within 60 s: {log.read_text()[-2000:]}")


def http_json(url: str, body: Any = None, token: str | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST `body` as JSON) and return the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def search_actor(port: int, token: str, actor: str, size: int = 1000) -> list[dict[str, Any]]:
    """The audit events of `actor` in the search API's default window (the last day)."""
    answer = http_json(f"http://127.0.0.1:{port}{SEARCH_PATH}?size={size}", {"actorUrns": [actor]}, token)
    return answer["usageEvents"]


def watch_log_records(log: Path, event: str) -> list[dict[str, Any]]:
    """The structured lines of one kind (`micro_batch`, `quarantined`, ...) in a watcher's log."""
    records = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                records.append(record)
    return records


def rss_bytes(pid: int) -> dict[str, int]:
    """Current and peak resident memory of a process and its children, summed (Linux /proc; a server's workers)."""
    fields: dict[str, int] = {}
    for member in process_tree(pid):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    name = "rss_bytes" if key == "VmRSS" else "peak_rss_bytes"
                    fields[name] = fields.get(name, 0) + int(value.split()[0]) * 1024
    return fields


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` until it returns something truthy, and return that.

    Raises:
        RuntimeError: naming `what`, after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def _sets(settings: tuple[str, ...]) -> list[str]:
    return [part for setting in settings for part in ("--set", setting)]


REPO = Path(__file__).resolve().parents[1]


def start_search_server(settings: Settings, engine: str, port: int, log_path: Path, timeout: float = 120.0,
                        overrides: tuple[str, ...] = ()) -> subprocess.Popen:  # fmt: skip
    """Start `lakehouse serve` with serve.engine=`engine` (and `overrides`, `key=value` settings) on loopback
    as a child process and wait for /health."""
    sets = [part for override in (f"serve.engine={engine}", *overrides) for part in ("--set", override)]
    command = [sys.executable, "-m", "pipelines.cli", "--profile", settings.profile, "--home", str(settings.home),
               *sets, "serve", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ConfigError(f"bench: the server exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process
        except OSError:
            pass
        time.sleep(0.2)
    process.terminate()
    raise ConfigError(f"bench: the server did not answer /health within {timeout} s")


def server_memory(pid: int) -> dict[str, int | None]:
    """The memory of a server process and its workers (Linux /proc; None where the OS does not tell).

    Returns:
        processes: the processes counted; peak_rss_bytes: the sum of each one's peak resident memory (an
        upper bound: pages the workers share since the fork count once per process); pss_bytes: their
        proportional set size now (shared pages split between the processes sharing them).
    """
    pids = process_tree(pid)
    peak = pss = 0
    for member in pids:
        with contextlib.suppress(OSError):
            peak += _proc_kb(Path(f"/proc/{member}/status"), "VmHWM:")
            pss += _proc_kb(Path(f"/proc/{member}/smaps_rollup"), "Pss:")
    return {"processes": len(pids), "peak_rss_bytes": peak * 1024 or None, "pss_bytes": pss * 1024 or None}


def server_cpu_seconds(pid: int) -> float:
    """The CPU seconds (user + system) a server process and its running workers have used (Linux /proc).

    CPU per request holds up on a busy machine where throughput does not: other jobs slow the server
    down, but do not make it work more.
    """
    ticks = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _proc_kb(path: Path, field: str) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def stop_search_server(process: subprocess.Popen) -> dict[str, int | None]:
    """Stop the server (SIGTERM, as a supervisor does); return its memory figures taken just before."""
    memory = server_memory(process.pid)
    stop(process)
    return memory
