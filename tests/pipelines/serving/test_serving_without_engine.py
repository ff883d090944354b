"""`lakehouse serve` and the CLI on an install without the engine extras: pyspark made unimportable.

The subprocesses run with a finder ahead of the real ones that refuses the engine's modules (as a base
install without `[local]` or `[connect]` does) and writes down every attempt: the serving answers must
come from a process that never even tried to import them. The in-process reads that replaced the
server's Spark reads (timeline, as-of, report rows) are compared with those Spark reads on the same home.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conf.tables import table_location
from conf.values import DAY_MS
from pipelines.batch.audit_chain import head_digest
from pipelines.audit_trail.report_format import ReportQuery
from pipelines.batch.audit_report import report_rows
from pipelines.batch.landing import land_paths
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.batch.refine import refine
from pipelines.batch.timeline import aspects_as_of, entity_history
from pipelines.runtime.engine_servers import free_loopback_port, stop_process
from pipelines.serving.api import SEARCH_PATH
from pipelines.serving.as_of import read_aspects_as_of
from pipelines.serving.explorer_data import read_entity_history
from pipelines.serving.report import REPORT_PATH, chain_head, read_report_rows
from pipelines.serving.tokens import create_token
from pipelines.serving.workers import WORKER_HEADER
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event
from tests.pipelines.batch.datahub_producers import ORDERS as PATCHED, patch_proposals, upsert_proposals

REPO = Path(__file__).resolve().parents[3]
NOW = int(time.time() * 1000)
MINUTE = 60_000
ALICE = "urn:li:corpuser:alice"
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
ORDERS_FIELD = f"urn:li:schemaField:({ORDERS},amount)"
# The times of PATCHED's proposals: tags, owners and terms written at T0, the SDK's patches of them at T1.
T0, T1 = NOW - 30 * MINUTE, NOW - 20 * MINUTE
INSTALL_HINT = "pip install 'metadata-audit-lakehouse[local]'"
# Runs before the project is imported: the engine's modules cannot be found, and each attempt is logged.
WITHOUT_ENGINE = """
import os, sys
class NoEngine:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j", "pysail", "delta"):
            with open(os.environ["ENGINE_IMPORTS_LOG"], "a") as log:
                log.write(f"{os.getpid()} {name}\\n")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoEngine())
from pipelines.cli.app import main
main()
"""

pytestmark = pytest.mark.slow


def _lakehouse_command(home: Path, args: list[str]) -> list[str]:
    return [sys.executable, "-c", WITHOUT_ENGINE, "--home", str(home), *args]


def _environment(imports_log: Path) -> dict[str, str]:
    return {**os.environ, "ENGINE_IMPORTS_LOG": str(imports_log), "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def home(spark, lakehouse):
    """A home with alice's published audit and chained change events, and bronze snapshots of PATCHED.

    Alice's change events touch ORDERS and one of its fields; PATCHED has UPSERTs at T0, the SDK's PATCH
    proposals at T1 and, in a second batch, the T0 tags again (a copy of a version).
    """
    proposals = upsert_proposals(PATCHED, T0, tags=["urn:li:tag:legacy", "urn:li:tag:gold"], owners=[], terms=[])
    folder = lakehouse.home.parent / "proposals"
    folder.mkdir(exist_ok=True)
    for name, records in (("first", proposals + patch_proposals(PATCHED, T1)), ("again", proposals[:1])):
        path = folder / f"{name}.mcp.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        land_paths(spark, lakehouse, [path])
    refine(spark, lakehouse)
    changes = [
        change_event("cs-1", "TAG", "ADD", ALICE, NOW - 3 * MINUTE, ORDERS, "globalTags", "w-1", modifier="urn:li:tag:pii"),
        change_event("cs-2", "DOCUMENTATION", "MODIFY", ALICE, NOW - 2 * MINUTE, ORDERS, "editableSchemaMetadata", "w-1",
                     entity_urn=ORDERS_FIELD),
        change_event("cs-3", "OWNER", "ADD", ALICE, NOW - MINUTE, ORDERS, "ownership", "w-1", modifier=ALICE),
    ]  # fmt: skip
    changes[0]["parameters"] = {"tagUrn": "urn:li:tag:pii"}
    usage = [usage_event("LogInEvent", ALICE, NOW - i * MINUTE, "w-1") for i in range(5)]
    land_refined_batch(spark, lakehouse, "w-1", usage=usage, changes=changes)
    publish_audit(spark, lakehouse)
    publish_openmetadata(spark, lakehouse)  # links the change events into the audit chain
    return lakehouse


@pytest.fixture(scope="module")
def server(home, tmp_path_factory):
    """`lakehouse serve` with 2 workers, started without the engine; its URL, token header and import log."""
    folder = tmp_path_factory.mktemp("serve-without-engine")
    imports_log = folder / "engine-imports.log"
    token, _ = create_token(home, ALICE, ["audit-read"])
    headers = {"Authorization": f"Bearer {token}"}
    port = free_loopback_port()
    command = _lakehouse_command(home.home, ["--set", "serve.workers=2", "serve", "--port", str(port)])
    with open(folder / "serve.log", "w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=_environment(imports_log), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None and time.monotonic() < deadline, (folder / "serve.log").read_text()
        try:
            health = httpx.get(f"{url}/health", headers=headers, timeout=10).json()
            if all(worker["alive"] for worker in health["admission"]["workers"]):
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield {"url": url, "headers": headers, "imports_log": imports_log, "log": folder / "serve.log"}
    stop_process(process, timeout=20)


def test_the_timeline_read_in_process_equals_the_spark_read(spark, home):
    location = table_location(home, "silver.entity_change_events")
    for urn in (ORDERS, ORDERS_FIELD, "urn:li:dataset:(urn:li:dataPlatform:hive,db.absent,PROD)"):
        assert read_entity_history(location, urn) == entity_history(spark, home, urn)
    assert [e["event_id"] for e in read_entity_history(location, ORDERS)] == [
        e["event_id"] for e in entity_history(spark, home, ORDERS)
    ] and len(read_entity_history(location, ORDERS)) == 3


def test_as_of_read_in_process_equals_the_spark_read(spark, home):
    for at in (T0 - 1, T0, T1 - 1, T1, NOW):
        assert read_aspects_as_of(home, PATCHED, at) == aspects_as_of(spark, home, PATCHED, at), at
    patched = {a["aspect_name"]: a["aspect"] for a in read_aspects_as_of(home, PATCHED, T1)}
    assert sorted(t["tag"] for t in patched["globalTags"]["tags"]) == ["urn:li:tag:gold", "urn:li:tag:pii"]
    assert [o["owner"] for o in patched["ownership"]["owners"]] == ["urn:li:corpuser:jdoe"]
    assert read_aspects_as_of(home, PATCHED, T0 - 1) == []


def test_serve_answers_search_explorer_and_health_without_importing_the_engine(server):
    url, headers = server["url"], server["headers"]
    window = {"startTime": NOW - 60 * MINUTE, "endTime": NOW + MINUTE}
    workers = set()
    for _ in range(20):  # new connections land on either worker
        body = {"actorUrns": [ALICE], "eventTypes": ["LogInEvent"]}
        search = httpx.post(f"{url}{SEARCH_PATH}", params=window, json=body, headers=headers, timeout=30)
        assert search.status_code == 200 and search.json()["total"] == 5, search.text
        workers.add(search.headers[WORKER_HEADER])
    changes = httpx.get(f"{url}/api/v1/changes", params={"actor": ALICE}, headers=headers, timeout=30)
    assert changes.status_code == 200 and changes.json()["total"] == 3
    timeline = httpx.get(f"{url}/api/v1/timeline", params={"urn": ORDERS}, headers=headers, timeout=30)
    assert timeline.status_code == 200, timeline.text
    events = timeline.json()["events"]
    assert [e["category"] for e in events] == ["TAG", "DOCUMENTATION", "OWNER"]
    assert events[0]["parameters"] == {"tagUrn": "urn:li:tag:pii"}
    as_of = httpx.get(f"{url}/api/v1/timeline/as-of", params={"urn": PATCHED, "at": str(T1)}, headers=headers, timeout=30)
    assert as_of.status_code == 200, as_of.text
    assert {a["aspect_name"] for a in as_of.json()["aspects"]} == {"globalTags", "ownership", "glossaryTerms"}
    activity = httpx.get(f"{url}/api/v1/activity", headers=headers, timeout=30)
    assert activity.status_code == 200 and activity.json()["topActors"][0]["actor"] == ALICE
    health = httpx.get(f"{url}/health", headers=headers, timeout=30).json()
    assert health["status"] == "ok" and health["engine"] == "inprocess"
    assert workers == {"0", "1"}
    assert not server["imports_log"].exists(), server["imports_log"].read_text()


def test_the_report_read_in_process_equals_the_spark_read(spark, home):
    assert chain_head(home) == head_digest(spark, home)
    # Days apart (one read per UTC day), alice's three events and PATCHED's, and an entity with its field.
    queries = [ReportQuery(NOW - 3 * DAY_MS, NOW + DAY_MS), ReportQuery(0, NOW, entity=ORDERS)]
    expected = [list(report_rows(spark, home, query)) for query in queries]
    assert [list(read_report_rows(home, query, None)) for query in queries] == expected
    assert len(expected[0]) > 3 and len(expected[1]) == 3


def test_a_report_downloads_without_the_engine(server):
    url, headers = server["url"], server["headers"]
    report = httpx.get(f"{url}{REPORT_PATH}", params={"from": str(NOW - 60 * MINUTE), "to": str(NOW), "actor": ALICE},
                       headers=headers, timeout=30)  # fmt: skip
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/csv"), report.text
    lines = [line for line in report.text.splitlines() if not line.startswith("#")]
    assert lines[0].startswith("time_utc,actor,entity") and len(lines) == 1 + 3
    assert not server["imports_log"].exists(), server["imports_log"].read_text()


def test_the_cli_starts_without_the_engine_and_engine_commands_name_the_extra(home, tmp_path):
    imports_log = tmp_path / "engine-imports.log"
    environment = _environment(imports_log)
    for args in (["--help"], ["serve", "--help"], ["sql-server", "--help"], ["token", "list"]):
        done = subprocess.run(_lakehouse_command(home.home, args), cwd=REPO, env=environment,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, (args, done.stderr)
    assert not imports_log.exists(), imports_log.read_text()
    for args in (["refine"],):
        done = subprocess.run(_lakehouse_command(home.home, args), cwd=REPO, env=environment,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert INSTALL_HINT in done.stderr and "Traceback" not in done.stderr, done.stderr
