"""`lakehouse serve` as a real subprocess: it says it is ready only when it answers, and a busy port is one line."""

from __future__ import annotations

import os
import re
import subprocess

import httpx
import pytest

from tests.pipelines.cli.test_cli import LAKEHOUSE

READY = re.compile(r"^ready: serving audit search on (http://127\.0\.0\.1:\d+)$")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`lakehouse serve --port 0` on an empty home; yields (base URL, home) once it says it is ready."""
    home = tmp_path_factory.mktemp("serve-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_"))}
    server = subprocess.Popen([LAKEHOUSE, "--home", str(home), "serve", "--host", "127.0.0.1", "--port", "0"],
                              env={**env, "RUST_LOG": "error"}, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lines = []
        for line in server.stderr:
            lines.append(line)
            if READY.match(line.strip()):
                break
        match = READY.match(lines[-1].strip()) if lines else None
        assert match, f"no ready line: {''.join(lines)}"
        yield match.group(1), home
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_ready_line_comes_when_the_server_answers(served):
    url, _ = served
    # The first request after the line: no retry, no connection refused.
    assert httpx.get(url + "/health", timeout=10).json() == {"status": "ok"}


def test_unknown_paths_and_methods_answer_the_documented_error_shape(served):
    url, _ = served
    missing = httpx.get(url + "/no/such/page", timeout=10)
    assert missing.status_code == 404 and missing.json() == {"error": "GET /no/such/page: not found"}
    wrong = httpx.delete(url + "/health", timeout=10)
    assert wrong.status_code == 405 and wrong.json() == {"error": "DELETE /health: method not allowed"}


def test_a_busy_port_is_one_line_naming_it_and_no_ready_line(served):
    url, home = served
    port = url.rsplit(":", 1)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_"))}
    result = subprocess.run([LAKEHOUSE, "--home", str(home), "serve", "--host", "127.0.0.1", "--port", port],
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: invalid configuration: --port: cannot listen on 127.0.0.1:{port} (Address already in use); "
        "choose another port (--port, api.port)"
    ]
