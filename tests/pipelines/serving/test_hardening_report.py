"""Report downloads on a real server: read in-process (no engine opened), and formula cells neutralised in the CSV."""

from __future__ import annotations

import csv
import io
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.serving.api import create_app, serving
from pipelines.serving.report import REPORT_PATH
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch

NOW = int(time.time() * 1000)
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
# Values a spreadsheet would run as formulas, and one it would not.
FORMULAS = ['=HYPERLINK("http://evil.test","x")', "+1+1", "-2+3", "@SUM(A1:A2)", "\tcmd", "\rcmd", "plain"]


@pytest.fixture(scope="module")
def api(spark, lakehouse):
    """Change events whose values look like formulas, chained; a server given no session (as `lakehouse serve`)."""
    changes = []
    for i, value in enumerate(FORMULAS):
        row = change_event(f"cs-{i}", "TAG", "ADD", "urn:li:corpuser:alice", NOW - 1000 + i, DATASET, "globalTags", "rep-1")
        row.update(new_value=value, old_value=None)
        changes.append(row)
    land_refined_batch(spark, lakehouse, "rep-1", changes=changes)
    publish_audit(spark, lakehouse)
    publish_openmetadata(spark, lakehouse)  # chains the change events
    token, _ = create_token(lakehouse, "urn:li:corpuser:auditor", ["audit-read"])
    with serving(create_app(lakehouse)) as base_url:
        with httpx.Client(base_url=base_url, timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
            yield client


def _download(client: httpx.Client) -> httpx.Response:
    return client.get(REPORT_PATH, params={"from": NOW - 60_000, "to": NOW + 60_000, "format": "csv"})


def _listening_ports() -> set[int]:
    """The TCP ports this process listens on (an embedded engine listens on one)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_report_downloads_open_no_engine(api):
    before = _listening_ports()
    assert _download(api).status_code == 200
    with ThreadPoolExecutor(4) as pool:
        statuses = [r.status_code for r in pool.map(lambda _: _download(api), range(4))]
    assert statuses == [200] * 4
    # Read with delta-rs in the server's process: no embedded engine was started (it would listen on a port).
    assert _listening_ports() == before


def test_the_csv_report_neutralises_formula_cells(api):
    response = _download(api)
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    body = "\r\n".join(line for line in response.text.split("\r\n") if not line.startswith("# "))
    values = [row["new_value_summary"] for row in csv.DictReader(io.StringIO(body, newline=""))]
    assert values == ["'" + v for v in FORMULAS[:-1]] + ["plain"]
