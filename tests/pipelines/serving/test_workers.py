"""`lakehouse serve` with 2 worker processes on loopback: one port, server-wide admission, scrolls, lifecycle."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from conf.tables import table_location
from pipelines.batch.publish_audit import publish_audit
from pipelines.runtime.engine_servers import free_loopback_port
from pipelines.serving.api import SEARCH_PATH
from pipelines.serving.tokens import create_token
from pipelines.serving.workers import STOP_TIMEOUT_S, WORKER_HEADER
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

REPO = Path(__file__).resolve().parents[3]
NOW = int(time.time() * 1000)
MINUTE = 60_000
ALICE, BOB = "urn:li:corpuser:alice", "urn:li:corpuser:bob"
WINDOW = {"startTime": NOW - 24 * 60 * MINUTE, "endTime": NOW + MINUTE}
# Rows copied into the table so that a page of SLOW_PAGE rows with their raw events is a genuinely slow
# request (decoding, ordering and encoding megabytes), long enough for requests sent together to overlap.
COPIES, SLOW_PAGE, RAW_PAD = 12_000, 10_000, 2_000
SLOTS = 2
# The requests a caller may send at once in the rate-limit test, spread over both workers.
RATE_BURST = 4

pytestmark = pytest.mark.slow


def _append_copies(location: Path, count: int) -> None:
    """Commit `count` copies of the table's first row with their own times, ids and long raw events (delta-rs)."""
    row = DeltaTable(str(location)).to_pyarrow_dataset().head(1).to_pylist()[0]
    times = [NOW - 10 * MINUTE - i * 1000 - 500 for i in range(count)]  # between the published events
    rows = {name: [value] * count for name, value in row.items()}
    rows["timestamp"] = times
    rows["event_id"] = [hashlib.sha256(f"copy|{t}".encode()).hexdigest() for t in times]
    rows["raw_event"] = [row["raw_event"][:-1] + f',"pad":"{"x" * RAW_PAD}"}}' for _ in times]
    schema = DeltaTable(str(location)).schema().to_arrow()
    write_deltalake(str(location), pa.table(rows, schema=pa.schema(schema)), mode="append")


def _health(base_url: str, headers: dict[str, str]) -> dict:
    """The server's /health with its details (they need a token)."""
    return httpx.get(f"{base_url}/health", headers=headers, timeout=10).json()


def _start_serve(home: Path, sets: list[str], log: Path, headers: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`lakehouse serve` with the settings `sets` on a free port, once every worker is alive; (process, base URL)."""
    port = free_loopback_port()
    command = [sys.executable, "-m", "pipelines.cli", "--home", str(home),
               *(arg for s in sets for arg in ("--set", s)), "serve", "--port", str(port)]  # fmt: skip
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        try:
            if all(w["alive"] for w in _health(base_url, headers)["admission"]["workers"]):
                return process, base_url
        except httpx.HTTPError:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def server(spark, lakehouse, tmp_path_factory):
    """A published table of 12,040 events and `lakehouse serve` with 2 workers, 2 query slots, no queue."""
    land_refined_batch(spark, lakehouse, "w-1", usage=[usage_event("LogInEvent", (ALICE, BOB)[i % 2], NOW - i * MINUTE, "w-1")
                                                      for i in range(40)])  # fmt: skip
    publish_audit(spark, lakehouse)
    _append_copies(table_location(lakehouse, "gold.audit_events"), COPIES)
    # Sensitive: the slow pages are slow for the raw events they carry.
    token, _ = create_token(lakehouse, ALICE, ["audit-read-sensitive"])
    headers = {"Authorization": f"Bearer {token}"}
    sets = ["serve.workers=2", f"serve.query_slots={SLOTS}", "serve.queue_depth=0", "serve.row_cache_mb=0"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    process, base_url = _start_serve(lakehouse.home, sets, log, headers)
    yield {"process": process, "url": base_url, "headers": headers, "log": log}
    if process.poll() is None:
        process.kill()
        process.wait()


def _search(server: dict, client: httpx.Client | None = None, **params) -> httpx.Response:
    post = client.post if client is not None else httpx.post
    return post(f"{server['url']}{SEARCH_PATH}", params={**WINDOW, **params}, json={"actorUrns": [ALICE, BOB]},
                headers=server["headers"], timeout=60)  # fmt: skip


def test_concurrent_searches_are_answered_by_both_workers(server):
    """SLOTS clients at once (the most the server runs, no queue), each connecting anew per search."""
    seen: list[str] = []

    def client_loop() -> None:
        for _ in range(20):
            response = _search(server, size=5, includeRaw="false")
            assert response.status_code == 200 and response.json()["count"] == 5
            seen.append(response.headers[WORKER_HEADER])
            if len(set(seen)) == 2:
                return

    threads = [threading.Thread(target=client_loop) for _ in range(SLOTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(seen) == {"0", "1"}


def test_a_scroll_id_issued_by_one_worker_is_accepted_by_the_other(server):
    first = _search(server, size=30, includeRaw="false")
    issuer = first.headers[WORKER_HEADER]
    scroll = first.json()["nextScrollId"]
    for _ in range(50):  # new connections land on either worker
        second = _search(server, size=30, includeRaw="false", scrollId=scroll)
        if second.headers[WORKER_HEADER] != issuer:
            break
    assert second.headers[WORKER_HEADER] != issuer, "every connection went to the issuing worker"
    assert second.status_code == 200 and second.json()["total"] == first.json()["total"]
    page_1, page_2 = first.json()["usageEvents"], second.json()["usageEvents"]
    assert len(page_2) == 30 and page_2[0]["timestamp"] <= page_1[-1]["timestamp"]
    assert not {e["timestamp"] for e in page_1} & {e["timestamp"] for e in page_2}


def _connections_to_both_workers(server: dict, count: int) -> list[httpx.Client]:
    """`count` kept-alive connections, at least one to each worker (a connection stays with its worker)."""
    by_worker: dict[str, list[httpx.Client]] = {"0": [], "1": []}
    for _ in range(100):
        client = httpx.Client(timeout=60)
        by_worker[client.get(f"{server['url']}/health").headers[WORKER_HEADER]].append(client)
        if all(by_worker.values()) and sum(map(len, by_worker.values())) >= count:
            break
    chosen = [by_worker["0"][0], by_worker["1"][0]] + [c for cs in by_worker.values() for c in cs[1:]]
    for extra in chosen[count:]:
        extra.close()
    assert all(by_worker.values()), "no connection reached one of the workers"
    return chosen[:count]


def test_the_query_slots_bound_the_whole_server_not_each_worker(server):
    """SLOTS + 1 slow pages sent at once over both workers, no queue: exactly one is turned away with 503."""
    clients = _connections_to_both_workers(server, SLOTS + 1)
    barrier = threading.Barrier(SLOTS + 1)
    answers: list[httpx.Response] = []

    def slow_page(client: httpx.Client) -> None:
        barrier.wait()
        answers.append(_search(server, client, size=SLOW_PAGE))

    threads = [threading.Thread(target=slow_page, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * SLOTS + [503], statuses
    refused = next(r for r in answers if r.status_code == 503)
    assert refused.headers["retry-after"] == "1" and "server busy" in refused.json()["error"]
    assert {r.headers[WORKER_HEADER] for r in answers} == {"0", "1"}
    assert all(len(r.json()["usageEvents"]) == SLOW_PAGE for r in answers if r.status_code == 200)
    # The places are given back: the server is idle again.
    admission = _health(server["url"], server["headers"])["admission"]
    assert (admission["running"], admission["admitted"]) == (0, 0)


def test_a_worker_killed_with_sigkill_is_replaced_and_the_server_keeps_answering(server):
    workers = _health(server["url"], server["headers"])["admission"]["workers"]
    victim = workers[0]
    os.kill(victim["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        replaced = _health(server["url"], server["headers"])["admission"]["workers"][0]
        if replaced["alive"] and replaced["pid"] not in (victim["pid"], 0):
            break
        assert time.monotonic() < deadline, server["log"].read_text()
        time.sleep(0.1)
    answered = {_search(server, size=3, includeRaw="false").headers[WORKER_HEADER] for _ in range(20)}
    assert answered <= {"0", "1"} and answered
    assert workers[1]["pid"] == _health(server["url"], server["headers"])["admission"]["workers"][1]["pid"]  # the other one kept running


def test_a_callers_rate_is_counted_for_the_whole_server_not_each_worker(server, lakehouse, tmp_path):
    """A burst of RATE_BURST requests spread over both workers empties the caller's one bucket: the next is a 429."""
    sets = ["serve.workers=2", "serve.rate_limit_per_minute=1", f"serve.rate_limit_burst={RATE_BURST}"]
    process, base_url = _start_serve(lakehouse.home, sets, tmp_path / "serve.log", server["headers"])
    rated = {**server, "url": base_url}
    clients = _connections_to_both_workers(rated, 2)
    try:
        statuses = [_search(rated, clients[i % 2], size=1, includeRaw="false").status_code for i in range(RATE_BURST)]
        assert statuses == [200] * RATE_BURST
        refused = [_search(rated, client, size=1, includeRaw="false") for client in clients]
        # Each worker alone has seen half the burst; only a rate counted server-wide is spent.
        assert [r.status_code for r in refused] == [429, 429], [r.text for r in refused]
        assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    finally:
        for client in clients:
            client.close()
        process.terminate()
        process.wait(timeout=30)


def test_sigterm_stops_every_worker_within_30_seconds(server):
    process = server["process"]
    pids = [w["pid"] for w in _health(server["url"], server["headers"])["admission"]["workers"]]
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - started < STOP_TIMEOUT_S + 5
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
