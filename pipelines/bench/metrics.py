"""`lakehouse bench metrics`: what request metrics cost the search API, two servers measured in turns.

Starts `lakehouse serve` twice on a home `lakehouse bench search --work-dir` built, one with
serve.metrics on and one with it off, and runs short load bursts against each in turn (the order flips
every round), so both see the same machine. Per burst it records throughput and the server's CPU time
per request (from /proc), which a busy machine disturbs far less than throughput. Then the same searches go
straight through two apps in this process (no sockets), metrics on and off, in alternating rounds, timed
in CPU microseconds. Writes one JSON result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import AUDIT_EVENTS, table_location
from pipelines.bench.harness import write_result
from pipelines.bench.search_clients import measure_load
from pipelines.bench.search_mix import request_mix
from pipelines.bench.processes import server_cpu_seconds, start_search_server, stop_search_server
from pipelines.runtime.engine_servers import free_loopback_port
from pipelines.runtime.storage import table_exists

VARIANTS = ("on", "off")
# The actors `bench search` generates (its --actors default).
BENCH_ACTORS = [f"urn:li:corpuser:user{i:05d}" for i in range(1000)]


async def _asgi_search(app: Any, token: str, query: dict[str, Any], body: dict[str, Any]) -> int:
    """One search straight through the ASGI app (no socket, no HTTP parsing); returns the status."""
    from pipelines.serving.api import SEARCH_PATH

    sent = False
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": SEARCH_PATH, "raw_path": SEARCH_PATH.encode(), "root_path": "",
        "query_string": "&".join(f"{k}={v}" for k, v in query.items()).encode(),
        "headers": [(b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    await app(scope, receive, send)
    return statuses[0]


def measure_in_process(settings: Settings, token: str, kinds: dict, rounds: int, requests: int) -> dict[str, Any]:
    """CPU microseconds per search of two apps in this process, metrics on and off, in alternating rounds.

    The same process and request stream for both: a busy machine moves both alike.
    """
    from pipelines.serving.api import create_app

    apps = {v: create_app(dataclasses.replace(settings, serve=dataclasses.replace(settings.serve, metrics=v == "on")))
            for v in VARIANTS}  # fmt: skip
    makers = list(kinds.values())
    cpu_us: dict[str, list[float]] = {v: [] for v in VARIANTS}

    async def burst(app: Any, seed: int) -> None:
        rng = random.Random(seed)
        for turn in range(requests):
            status = await _asgi_search(app, token, *makers[turn % len(makers)](rng))
            if status != 200:
                raise InputError(f"bench metrics: a search answered {status}")

    for variant in VARIANTS:  # warm both
        asyncio.run(burst(apps[variant], seed=0))
    for number in range(rounds):
        for variant in VARIANTS if number % 2 == 0 else VARIANTS[::-1]:
            before = time.process_time()
            asyncio.run(burst(apps[variant], seed=number))
            cpu_us[variant].append(round(1e6 * (time.process_time() - before) / requests, 1))
    return {
        "requests_per_round": requests,
        **{v: {"cpu_us_per_request": cpu_us[v], "median": statistics.median(cpu_us[v])} for v in VARIANTS},
        "cpu_ratio_on_off": round(statistics.median(a / b for a, b in zip(cpu_us["on"], cpu_us["off"])), 4),
    }


def measure_micro_batch_counting(settings: Settings, repeats: int = 7) -> dict[str, Any]:
    """What counting a micro-batch costs: the watch loop's hand-off, and the counting thread's work.

    Lands a file of 50 records with 2 bad lines and one of 50 good ones into a scratch home under
    `settings.home`, then times `observe_micro_batch` on both run summaries and `WatcherMetrics.micro_batch`
    (what the loop itself does), in milliseconds (medians).
    """
    from prometheus_client import CollectorRegistry

    from pipelines.orchestration.jobs import run_job
    from pipelines.bench.processes import mcl_lines
    from pipelines.runtime.engine import open_session
    from pipelines.orchestration.metrics import PipelineMetrics, WatcherMetrics

    scratch = dataclasses.replace(settings, home=settings.home / "metrics-micro-batch", table_locations={})
    inputs = scratch.home / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    now_ms = int(time.time() * 1000)
    bad_file, good_file = inputs / f"bad-{now_ms}.mcl.jsonl", inputs / f"good-{now_ms}.mcl.jsonl"
    bad_file.write_text("\n".join([*mcl_lines("urn:li:corpuser:a", 50, now_ms, f"a{now_ms}"), "not json", '{"x": 1}']) + "\n")
    good_file.write_text("\n".join(mcl_lines("urn:li:corpuser:b", 50, now_ms, f"b{now_ms}")) + "\n")
    record = {"files": 1, "lag_seconds": 1.0, "audit_rows": 50, "finished_at": time.time(), "quarantined_files": []}
    with open_session(scratch) as spark:
        summaries = {
            "quarantined": run_job(scratch, ("land", "refine", "publish"), paths=[bad_file], spark=spark, deliver=False),
            "clean": run_job(scratch, ("land", "refine", "publish"), paths=[good_file], spark=spark, deliver=False),
        }
        metrics = PipelineMetrics(CollectorRegistry())
        figures: dict[str, Any] = {f"micro_batch_s.{k}": v.seconds for k, v in summaries.items()}
        for name, summary in summaries.items():
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                metrics.observe_micro_batch(spark, scratch, summary, record)
                times.append(time.perf_counter() - started)
            figures[f"counting_ms.{name}"] = round(statistics.median(times) * 1000, 3)
        watcher = WatcherMetrics(scratch, free_loopback_port(), dict, lambda: None)
        times = []
        for _ in range(200):
            started = time.perf_counter()
            watcher.micro_batch(spark, summaries["clean"], record)
            times.append(time.perf_counter() - started)
        watcher.stop()  # waits for the queued counting
        figures["loop_handoff_us"] = round(statistics.median(times) * 1e6, 1)
    return figures


def run_metrics_bench(
    settings: Settings, *, rounds: int, seconds: float, clients: int, days: int, asgi_requests: int
) -> dict[str, Any]:
    """Measure bursts against a server with metrics on and one with them off, alternating.

    Returns:
        Per variant: every burst's throughput and CPU ms per request, and their medians; the overhead
        of metrics as the median of the per-round ratios.
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from pipelines.serving.tokens import create_token

    audit_dir = table_location(settings, AUDIT_EVENTS)
    if not table_exists(audit_dir):
        raise InputError(f"--work-dir: {settings.home} holds no gold.audit_events; build it with `lakehouse bench search --work-dir`")
    dataset = DeltaTable(str(audit_dir)).to_pyarrow_dataset()
    now_ms = int(pc.max(dataset.to_table(columns=["timestamp"]).column("timestamp")).as_py()) + 1
    kinds = request_mix("basic", BENCH_ACTORS, now_ms, days)
    token, _ = create_token(settings, "urn:li:corpuser:bench", ["audit-read"])
    servers, configs = {}, {}
    results: dict[str, dict[str, list[float]]] = {v: {"throughput_rps": [], "cpu_ms_per_request": []} for v in VARIANTS}
    try:
        for variant in VARIANTS:
            config = Path(tempfile.mkstemp(prefix=f"metrics-{variant}-", suffix=".yaml")[1])
            config.write_text(f"serve: {{metrics: {'true' if variant == 'on' else 'false'}}}\n")
            configs[variant] = config
            port = free_loopback_port()
            os.environ["LAKEHOUSE_CONFIG"] = str(config)
            servers[variant] = (port, start_search_server(settings, "inprocess", port, settings.home / f"server-metrics-{variant}.log"))
        os.environ.pop("LAKEHOUSE_CONFIG", None)
        for variant in VARIANTS:  # warm both: indexes built, caches filled
            measure_load(servers[variant][0], token, kinds, clients, min(seconds, 2.0), seed=1)
        for number in range(rounds):
            for variant in VARIANTS if number % 2 == 0 else VARIANTS[::-1]:
                port, process = servers[variant]
                before = server_cpu_seconds(process.pid)
                load = measure_load(port, token, kinds, clients, seconds, seed=number)
                used = server_cpu_seconds(process.pid) - before
                results[variant]["throughput_rps"].append(load["throughput_rps"])
                results[variant]["cpu_ms_per_request"].append(round(1000 * used / max(load["requests"], 1), 4))
    finally:
        for _, process in servers.values():
            stop_search_server(process)
        for config in configs.values():
            config.unlink(missing_ok=True)
    payload: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "clients": clients}
    for variant in VARIANTS:
        figures = results[variant]
        payload[variant] = {
            **figures,
            "median_throughput_rps": statistics.median(figures["throughput_rps"]),
            "median_cpu_ms_per_request": statistics.median(figures["cpu_ms_per_request"]),
        }
    if asgi_requests:
        payload["in_process"] = measure_in_process(settings, token, kinds, rounds, asgi_requests)
    on, off = results["on"], results["off"]
    payload["throughput_ratio_on_off"] = round(statistics.median(a / b for a, b in zip(on["throughput_rps"], off["throughput_rps"])), 4)
    payload["cpu_ratio_on_off"] = round(statistics.median(a / b for a, b in zip(on["cpu_ms_per_request"], off["cpu_ms_per_request"])), 4)
    return payload


def register(bench_app: typer.Typer) -> None:
    """Add `bench metrics` to the bench group."""

    @bench_app.command("metrics")
    def bench_metrics_command(
        ctx: typer.Context,
        work_dir: Path = typer.Option(..., "--work-dir", help="A home `lakehouse bench search --work-dir` loaded."),
        rounds: int = typer.Option(10, "--rounds", min=1, help="Bursts per server (alternating)."),
        seconds: float = typer.Option(3.0, "--seconds", min=0.5, help="Seconds of each burst."),
        clients: int = typer.Option(1, "--clients", min=1, max=64, help="Concurrent clients of each burst."),
        days: int = typer.Option(30, "--days", help="Days the bench search events span (its --days)."),
        asgi_requests: int = typer.Option(
            300, "--asgi-requests", min=0, help="Searches per round straight through the app in this process (0: skip)."
        ),
        micro_batch: bool = typer.Option(
            False, "--micro-batch", help="Only time what counting a micro-batch costs (a scratch home under --work-dir)."
        ),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure what request metrics cost search: throughput and CPU per request with serve.metrics on and off."""
        from pipelines.cli.app import state_of
        from pipelines.cli.console import console

        settings = dataclasses.replace(state_of(ctx).settings, home=work_dir.resolve(), table_locations={})
        if micro_batch:
            figures = measure_micro_batch_counting(settings)
            console.print(" ".join(f"{k}={v}" for k, v in figures.items()))
            console.print(f"wrote {write_result(out, 'metrics-micro-batch', figures)}")
            return
        payload = run_metrics_bench(settings, rounds=rounds, seconds=seconds, clients=clients, days=days,
                                    asgi_requests=asgi_requests)  # fmt: skip
        path = write_result(out, "metrics", payload)
        for variant in VARIANTS:
            figures = payload[variant]
            console.print(f"metrics {variant}: {figures['median_throughput_rps']} req/s, "
                          f"{figures['median_cpu_ms_per_request']} CPU ms/request (medians of {rounds})")  # fmt: skip
        console.print(f"on/off: throughput {payload['throughput_ratio_on_off']}, CPU per request {payload['cpu_ratio_on_off']}")
        if asgi_requests:
            inside = payload["in_process"]
            console.print(f"in process: {inside['on']['median']} us/search with metrics, {inside['off']['median']} without "
                          f"(on/off {inside['cpu_ratio_on_off']})")  # fmt: skip
        console.print(f"wrote {path}")
