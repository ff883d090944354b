"""The HTTP clients of `lakehouse bench search`: keep-alive connections, the latency phase, the load phases.

A load phase runs in a process of its own (`load_in_child`), its clients threads of that process, so the
clients' work neither shares an interpreter lock with the bench nor hides in the server's figures.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pipelines.bench.harness import percentile
from pipelines.bench.search_mix import RequestKind, request_mix

SEARCH_PATH = "/openapi/v1/events/audit/search"
PAGING_DEPTH = 10
PAGING_SIZE = 25


class Client:
    """One keep-alive HTTP connection to the server, posting search requests."""

    def __init__(self, port: int, token: str):
        self._port = port
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, query: dict[str, Any], body: dict[str, Any], decode: bool = True) -> tuple[int, dict[str, Any] | None, float]:
        """Send one search; return (status, decoded JSON or None when not `decode`, milliseconds)."""
        path = SEARCH_PATH
        if query:
            path += "?" + "&".join(f"{k}={v}" for k, v in query.items())
        started = time.perf_counter()
        try:
            self._connection.request("POST", path, body=json.dumps(body), headers=self._headers)
            response = self._connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self._connection.close()
            self._connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=60)
            raise
        elapsed = (time.perf_counter() - started) * 1000
        return response.status, json.loads(payload) if decode or response.status != 200 else None, elapsed

    def send(self, kind: RequestKind, rng: random.Random, decode: bool = False) -> list[tuple[int, dict | None, float]]:
        """Send one search of `kind` and its further pages; return each page's (status, JSON, milliseconds)."""
        query, body = kind.make(rng)
        answers = []
        for page in range(kind.pages):
            last = page == kind.pages - 1
            status, payload, elapsed = self.post(query, body, decode=decode or not last)
            answers.append((status, payload, elapsed))
            scroll = payload.get("nextScrollId") if status == 200 and payload is not None else None
            if last or not scroll:
                break
            query = {**query, "scrollId": scroll}
        return answers

    def close(self) -> None:
        self._connection.close()


def summary(latencies: list[float]) -> dict[str, float]:
    """Count, percentiles, mean and max of latencies in milliseconds."""
    if not latencies:
        return {"n": 0}
    return {
        "n": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "mean_ms": round(sum(latencies) / len(latencies), 2),
        "max_ms": round(max(latencies), 2),
    }


def _walk_pages(client: Client, latencies: list[float]) -> int:
    """Follow nextScrollId PAGING_DEPTH pages deep without filters; return the number of non-200 answers."""
    kind = RequestKind(lambda rng: ({"size": PAGING_SIZE, "includeRaw": "false"}, {}), pages=PAGING_DEPTH)
    answers = client.send(kind, random.Random(0))
    latencies.extend(elapsed for _, _, elapsed in answers)
    return sum(1 for status, _, _ in answers if status != 200)


def measure_latency(port: int, token: str, kinds: dict[str, RequestKind], requests: int, seed: int) -> dict[str, Any]:
    """Send each kind of request `requests` times, one at a time, and summarize the latencies per kind."""
    rng = random.Random(seed)
    client = Client(port, token)
    results: dict[str, Any] = {}
    try:
        for name, kind in kinds.items():
            for _ in range(3):  # warm the server's caches for this request shape
                client.send(kind, rng)
            latencies, errors, totals = [], 0, []
            for _ in range(requests):
                for status, payload, elapsed in client.send(kind, rng, decode=True):
                    latencies.append(elapsed)
                    if status != 200:
                        errors += 1
                    else:
                        totals.append(payload["total"])
            results[name] = {**summary(latencies), "errors": errors,
                             "median_total": sorted(totals)[len(totals) // 2] if totals else 0}  # fmt: skip
        page_latencies: list[float] = []
        errors = 0
        walks = max(1, requests // PAGING_DEPTH)
        for _ in range(walks):
            errors += _walk_pages(client, page_latencies)
        results[f"paging_{PAGING_DEPTH}_deep"] = {**summary(page_latencies), "errors": errors, "walks": walks}
    finally:
        client.close()
    return results


def measure_load(port: int, token: str, kinds: dict[str, RequestKind], clients: int, duration_s: float,
                 seed: int) -> dict[str, Any]:  # fmt: skip
    """Run `clients` concurrent clients (threads) for `duration_s` seconds, each cycling through the request kinds."""
    deadline = time.monotonic() + duration_s
    latencies: list[float] = []
    errors: list[str] = []
    workers: dict[str, int] = {}
    lock = threading.Lock()
    ordered = list(kinds.values())

    def client_loop(index: int) -> None:
        rng = random.Random(seed + index)
        client = Client(port, token)
        mine: list[float] = []
        my_errors: list[str] = []
        try:
            turn = index
            while time.monotonic() < deadline:
                try:
                    for status, _, elapsed in client.send(ordered[turn % len(ordered)], rng):
                        mine.append(elapsed)
                        if status != 200:
                            my_errors.append(f"HTTP {status}")
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    my_errors.append(f"{type(exc).__name__}: {exc}")
                turn += 1
        finally:
            client.close()
            with lock:
                latencies.extend(mine)
                errors.extend(my_errors)

    started = time.monotonic()
    cpu_started = time.process_time()
    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=duration_s + 120)
    elapsed = time.monotonic() - started
    # The clients' own CPU: on a machine of few cores they take a share of what the server could use.
    client_cpu_ms = (time.process_time() - cpu_started) * 1000
    return {
        "clients": clients,
        "duration_s": round(elapsed, 2),
        "requests": len(latencies),
        "throughput_rps": round(len(latencies) / elapsed, 2) if elapsed else 0.0,
        **summary(latencies),
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:5],
        "client_cpu_ms_per_request": round(client_cpu_ms / max(1, len(latencies)), 3),
    }


def _load_of_mix(port: int, token: str, mix: tuple[str, list[str], int, int], clients: int, duration_s: float,
                 seed: int) -> dict[str, Any]:  # fmt: skip
    return measure_load(port, token, request_mix(*mix), clients, duration_s, seed)


def load_in_child(port: int, token: str, mix: tuple[str, list[str], int, int], clients: int, duration_s: float,
                  seed: int) -> dict[str, Any]:  # fmt: skip
    """Run `measure_load` in a new process (spawned: the bench's own threads and engine stay behind).

    Args:
        port: the server's loopback port.
        token: a token with the audit-read role.
        mix: the arguments of `request_mix` (mix name, actors, now_ms, days), rebuilt in the child.
        clients: concurrent clients.
        duration_s: seconds of load.
        seed: the random seed of the first client (the others follow it).
    """
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_load_of_mix, port, token, mix, clients, duration_s, seed).result()
