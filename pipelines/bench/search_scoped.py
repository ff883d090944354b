"""`lakehouse bench search --scope`: a scoped token with the access log on, against an unscoped one without it."""

from __future__ import annotations

import statistics
import subprocess
from typing import Any

from conf.settings import Settings
from pipelines.bench.search_clients import measure_load
from pipelines.bench.processes import server_cpu_seconds, start_search_server, stop_search_server
from pipelines.runtime.engine_servers import free_loopback_port

SCOPED_ROUNDS = 3


def bench_scoped(settings: Settings, *, scope: tuple[str, ...], kinds: dict, clients: int, duration_s: float,
                 seed: int, p95_target_ms: float) -> dict[str, Any]:  # fmt: skip
    """The in-process engine with a token of `scope` and the access log on, against an unscoped token with it off.

    Both servers run at once and their load phases alternate (SCOPED_ROUNDS each, the first of a round
    swapped each round), so the machine's other load weighs on both alike; besides throughput, each phase records the server's CPU time per request,
    which other processes do not change. The scoped server meets its target at 90% of the unscoped
    throughput and a p95 of at most `p95_target_ms`.
    """
    from gold.scopes import parse_scope
    from pipelines.serving.tokens import create_token

    tokens = {
        "unscoped": create_token(settings, "urn:li:corpuser:bench", ["audit-read-sensitive"])[0],
        "scoped": create_token(settings, "urn:li:corpuser:bench", ["audit-read-sensitive"], scope=parse_scope(scope))[0],
    }
    overrides = {"unscoped": ("access_log.enabled=false",), "scoped": ("access_log.enabled=true",)}
    ports = {name: free_loopback_port() for name in tokens}
    servers: dict[str, subprocess.Popen] = {}
    phases: dict[str, list[dict[str, Any]]] = {name: [] for name in tokens}
    try:
        for name in tokens:
            servers[name] = start_search_server(settings, "inprocess", ports[name], settings.home / f"server-{name}.log",
                                          overrides=overrides[name])  # fmt: skip
        for name in tokens:  # warm the row cache of each before measuring
            measure_load(ports[name], tokens[name], kinds, clients, min(duration_s, 3.0), seed)
        for round_index in range(SCOPED_ROUNDS):
            # Each round swaps which server goes first, so a trend in the machine's other load weighs on both.
            for name in list(tokens)[:: 1 if round_index % 2 == 0 else -1]:
                before = server_cpu_seconds(servers[name].pid)
                load = measure_load(ports[name], tokens[name], kinds, clients, duration_s, seed + round_index)
                load["server_cpu_ms_per_request"] = round(
                    (server_cpu_seconds(servers[name].pid) - before) * 1000 / max(load["requests"], 1), 3
                )
                phases[name].append(load)
    finally:
        for server in servers.values():
            stop_search_server(server)

    def median(name: str, key: str) -> float:
        return statistics.median(phase.get(key) or 0.0 for phase in phases[name])

    share = median("scoped", "throughput_rps") / (median("unscoped", "throughput_rps") or 1.0)
    p95 = median("scoped", "p95_ms")
    return {
        "scope": list(scope), "access_log": True, "clients": clients, "rounds": phases,
        "median_rps": {name: median(name, "throughput_rps") for name in tokens},
        "median_p95_ms": {name: median(name, "p95_ms") for name in tokens},
        "median_cpu_ms_per_request": {name: median(name, "server_cpu_ms_per_request") for name in tokens},
        "throughput_share_of_unscoped": round(share, 3),
        "target": {"share": 0.9, "p95_ms": p95_target_ms, "met": share >= 0.9 and p95 <= p95_target_ms},
    }  # fmt: skip
