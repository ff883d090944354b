"""`lakehouse bench subscriptions`: delivery throughput to a loopback receiver, and watch-mode latency.

Throughput: a home holding a generated history; a subscription replaying every event is delivered to
a receiver on loopback, timed from the start of the delivery to its last acknowledged POST.
Latency: `lakehouse run --watch` on the same home with a subscription, small files dropped at a steady
rate; for each file the time from the micro-batch that published it to the receipt of its events.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import typer

from pipelines.bench.harness import bench_settings, latency_summary, write_result
from pipelines.bench.processes import drop_file, mcl_lines, start_watch, stop, wait_for, watch_log_records
from pipelines.bench.watch import build_home

BENCH_ACTOR = "urn:li:corpuser:subscriptions-bench"

# The receiver listens on loopback, a target subscriptions may use only when allow-listed.
LOOPBACK = "subscriptions.allowed_networks=[127.0.0.0/8]"


class CountingReceiver:
    """A webhook receiver on loopback that answers 200 and keeps each POST's arrival time and body."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posts: list[tuple[float, int, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                count = int(self.headers.get("X-Lakehouse-Event-Count", "0"))
                with receiver.lock:
                    receiver.posts.append((time.time(), count, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def events(self) -> int:
        with self.lock:
            return sum(count for _, count, _ in self.posts)

    def first_receipt(self, marker: bytes) -> float | None:
        """When a POST holding `marker` (a file's tag) first arrived."""
        with self.lock:
            return next((at for at, _, body in self.posts if marker in body), None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_throughput(home: Path, runs: int, events_per_post: int) -> dict[str, Any]:
    """Deliver every event of `home` to a loopback receiver `runs` times; events/s per run."""
    from gold.subscriptions import EventFilters
    from pipelines.runtime.engine import open_session
    from pipelines.subscriptions.delivery import deliver_outcomes
    from pipelines.subscriptions.store import add_subscription, remove_subscription

    settings = bench_settings(home, LOOPBACK, f"subscriptions.max_events_per_post={events_per_post}")
    receiver = CountingReceiver()
    rates, seconds, delivered = [], [], []
    try:
        with open_session(settings) as spark:
            for run in range(runs):
                name = f"throughput-{run}"
                add_subscription(
                    spark, settings, name=name, url=receiver.url, payload_format="ece", filters=EventFilters(), since_ms=1
                )  # fmt: skip
                before = receiver.events()
                started = time.monotonic()
                (outcome,) = deliver_outcomes(spark, settings, names=[name])
                elapsed = time.monotonic() - started
                received = receiver.events() - before
                if outcome.delivered != received or outcome.state != "delivered":
                    raise RuntimeError(f"run {run}: {outcome} but the receiver counted {received} events")
                remove_subscription(spark, settings, name)
                rates.append(received / elapsed)
                seconds.append(elapsed)
                delivered.append(received)
    finally:
        receiver.close()
    return {
        "events": delivered[0],
        "events_per_post": events_per_post,
        "runs_s": [round(s, 3) for s in seconds],
        "events_per_s": {"median": round(statistics.median(rates), 1), "runs": [round(r, 1) for r in rates]},
    }


def run_latency(home: Path, files: int, records: int, interval: float, timeout: float = 120.0) -> dict[str, Any]:
    """Drop `files` small files into a watched home with a subscription; time publish -> receipt per file."""
    from gold.subscriptions import EventFilters
    from pipelines.runtime.engine import open_session
    from pipelines.subscriptions.store import add_subscription, remove_subscription

    settings = bench_settings(home, LOOPBACK)
    receiver = CountingReceiver()
    name = f"latency-{time.strftime('%H%M%S')}"
    with open_session(settings) as spark:
        add_subscription(spark, settings, name=name, url=receiver.url, payload_format="ece", filters=EventFilters())
    logs = Path(tempfile.mkdtemp(prefix="subscriptions-bench-"))
    watcher = start_watch(home, logs / "watch.log", None, LOOPBACK)
    renamed: dict[str, float] = {}
    received: dict[str, float] = {}
    try:
        wait_for(lambda: watch_log_records(logs / "watch.log", "started"), 120, "the watcher to start")
        landing = settings.landing_paths[0]
        next_drop = time.time()
        while len(received) < files:
            now = time.time()
            if len(renamed) < files and now >= next_drop:
                tag = f"s{time.strftime('%H%M%S')}_{len(renamed)}"
                lines = mcl_lines(BENCH_ACTOR, records, int(now * 1000), tag)
                renamed[tag] = drop_file(landing, f"{tag}.mcl.jsonl", lines)
                next_drop += interval
            for tag in renamed.keys() - received.keys():
                if (at := receiver.first_receipt(f"watch.{tag}_0,".encode())) is not None:
                    received[tag] = at
            waiting = [at for tag, at in renamed.items() if tag not in received]
            if waiting and time.time() - min(waiting) > timeout:
                raise RuntimeError(f"a file's events were not delivered within {timeout} s; log: {logs / 'watch.log'}")
            time.sleep(0.05)
    finally:
        code = stop(watcher)
        receiver.close()
        with open_session(settings) as spark:
            remove_subscription(spark, settings, name)
    published = {
        name: batch["finished_at"]
        for batch in watch_log_records(logs / "watch.log", "micro_batch")
        for name in batch["file_names"]
    }
    beyond = [received[tag] - published[f"{tag}.mcl.jsonl"] for tag in renamed]
    end_to_end = [received[tag] - at for tag, at in renamed.items()]
    return {
        "files": files,
        "records_per_file": records,
        "interval_s": interval,
        "publish_to_receipt_s": latency_summary(beyond),
        "rename_to_receipt_s": latency_summary(end_to_end),
        "watch_exit_code": code,
        "logs": str(logs),
    }


def register(bench_app: typer.Typer) -> None:
    """Add `bench subscriptions` to the bench group."""

    @bench_app.command("subscriptions")
    def bench_subscriptions_command(
        home: Path | None = typer.Option(None, "--home", help="Reuse this home (built first when it is empty)."),
        entities: int = typer.Option(2000, "--entities", min=11, help="Entities of the generated history (when built)."),
        seed: int = typer.Option(7, "--seed", help="Generator seed."),
        runs: int = typer.Option(3, "--runs", min=1, help="Throughput runs (the median is reported)."),
        events_per_post: int = typer.Option(500, "--events-per-post", min=1, help="subscriptions.max_events_per_post."),
        files: int = typer.Option(20, "--files", min=0, help="Files dropped for the watch-mode latency (0: skip)."),
        records: int = typer.Option(20, "--records", min=1, help="Records per dropped file."),
        interval: float = typer.Option(2.0, "--interval", min=0.05, help="Seconds between two files."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure webhook delivery: events/s to a loopback receiver, publish -> receipt in watch mode."""
        work = (home or Path(tempfile.mkdtemp(prefix="subscriptions-bench-home-")) / "home").resolve()
        if not (work / "silver").exists():
            build_home(work, entities, seed)
        result: dict[str, Any] = {"home": str(work), "throughput": run_throughput(work, runs, events_per_post)}
        if files:
            result["latency"] = run_latency(work, files, records, interval)
        path = write_result(out, "subscriptions", result)
        rate = result["throughput"]["events_per_s"]["median"]
        line = f"delivery {rate} events/s (median of {runs}, {result['throughput']['events']} events)"
        if files:
            line += f"; publish -> receipt p95 {result['latency']['publish_to_receipt_s']['p95']} s"
        typer.echo(f"{line} -> {path}")
