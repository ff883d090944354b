"""The README's quick start, pasted in order into bash as a new user would, and what it prints."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICK_START = re.compile(r"^## Quick start\n(.*?)^## ", re.S | re.M)
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.S | re.M)
MARK = "=== README block {} ==="
URN = "urn:li:dataset:(urn:li:dataPlatform:postgres,appdb.public.orders_9,PROD)"


def quick_start() -> str:
    return QUICK_START.search((ROOT / "README.md").read_text(encoding="utf-8")).group(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def pasted(tmp_path_factory) -> list[str]:
    """Run the quick start's bash blocks in order in one bash session; return each block's output.

    Only the home and the port change: a fresh temporary home for /tmp/quickstart, a free port for 8080
    (the suite's other servers may hold it). The venv is this interpreter's, which is the repository's.
    """
    home = tmp_path_factory.mktemp("quickstart")
    port = str(free_port())
    blocks = [b.replace("/tmp/quickstart", str(home)).replace("8080", port) for b in BASH_BLOCK.findall(quick_start())]
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + "".join(
        f"echo; echo '{MARK.format(n)}'\n{block}\n" for n, block in enumerate(blocks)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_"))}
    env.update({"COLUMNS": "80", "PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "RUST_LOG": "error"})
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    # Each marker follows a line break: curl's answer ends without one.
    outputs = [o.strip("\n") for o in re.split(r"^=== README block \d+ ===\n", result.stdout, flags=re.M)[1:]]
    assert len(outputs) == len(blocks) == 3
    return outputs


def test_the_run_prints_the_numbers_the_readme_quotes(pasted):
    quoted = re.search(r"lakehouse run +# ends: (.+)$", quick_start(), re.M).group(1)
    assert quoted in pasted[0].splitlines()


def test_sql_shows_the_real_column_names_and_history_and_as_of_read_as_utc(pasted):
    lines = pasted[0].splitlines()
    assert any(line.split() == ["actor", "category", "operation", "events"] for line in lines)
    assert f"Change events of {URN} (39)" in " ".join(pasted[0].split())
    assert "event_time   2023-11-19T17:30:32Z" in lines
    assert f"{URN} at 2024-01-01T00:00:00Z" in " ".join(pasted[0].split())
    # Wider than the terminal only to keep one identifier whole (a schema field's urn is 101 characters).
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in lines)


def test_the_served_search_answers_as_the_readme_shows(pasted):
    shown = JSON_BLOCK.search(quick_start()).group(1)
    answer = json.loads(pasted[1])
    assert answer["count"] == int(re.search(r'"count": (\d+)', shown).group(1))
    assert answer["total"] == int(re.search(r'"total": (\d+)', shown).group(1))
    assert answer["usageEvents"][0]["timestamp"] == int(re.search(r'"timestamp": (\d+)', shown).group(1))


def test_the_shell_search_finds_the_same_events(pasted):
    answer = json.loads(pasted[2])
    assert answer["count"] == 2 and answer["total"] == json.loads(pasted[1])["total"]
