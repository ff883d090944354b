"""`lakehouse bench search`: audit search latency and throughput through the real HTTP server, per engine.

Loads N generated usage events into gold.audit_events of a scratch lakehouse (or reuses a loaded one),
then for each serving engine (in-process, Spark) starts `lakehouse serve` as a separate process on
loopback and measures (1) the latency of representative requests one at a time, (2) load phases of 1 and
of N concurrent clients for a bounded duration, after a warm-up of N clients that is not measured, (3) how
soon a newly committed Delta version is visible to searches. Writes one JSON result.

The load phases measure the server as it runs once started: before the warm-up, the files the server
wrote at start (the index and row files, gigabytes at 10M rows) are flushed to disk, so their writeback
does not run during the phases; the warm-up then reaches every worker, where the latency phase's one
connection reaches one. Both are reported (`start_flush_s`, `warmup`).

One module over 400 lines: the phases of one benchmark run in order against one server; the clients
and the request mix are in their own modules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import statistics
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import AUDIT_EVENTS, IDENTITIES, table_location
from conf.values import DAY_MS
from pipelines.bench.harness import measure, write_result
from pipelines.bench.search_clients import Client, load_in_child, measure_latency
from pipelines.bench.search_mix import MIXES, request_mix
from pipelines.bench.search_privacy import bench_pseudonymisation, pseudonymised_usage_rows
from pipelines.bench.search_scoped import bench_scoped
from pipelines.bench.processes import server_cpu_seconds, start_search_server, stop_search_server
from pipelines.runtime.engine_servers import free_loopback_port
from pipelines.runtime.storage import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ENGINES = ("inprocess", "spark")
# The targets of the in-process engine per request mix (docs/benchmarks.md): the contract mix's searches
# cost more, and its throughput must rise with the clients (load_ratio: N clients over 1 client).
_COMMON_TARGETS = {"load_p95_ms": 100.0, "single_p95_ms": 30.0, "rss_bytes": 2 * 1024**3, "visible_s": 2.0}
TARGETS = {"basic": {"load_rps": 300.0, **_COMMON_TARGETS},
           "contract": {"load_rps": 250.0, "load_ratio": 1.5, **_COMMON_TARGETS}}  # fmt: skip
VISIBILITY_PROBES = 5
PRIVACY_ROUNDS = 3
# The usage document as DataHub writes it (BEHAVIOR.md 1b), read with an explicit schema.
USAGE_DOCUMENT_DDL = (
    "type STRING, actorUrn STRING, timestamp BIGINT, entityUrn STRING, entityType STRING, aspectName STRING, "
    "eventSource STRING, sourceIP STRING, userAgent STRING, traceId STRING, loginSource STRING, "
    "loginDenialReason STRING, usageSource STRING"
)


def to_usage_rows(lines_df: DataFrame, batch_id: str) -> DataFrame:
    """Turn usage document lines (`value`) into rows with the bronze.usage_events columns."""
    from pyspark.sql import functions as F

    doc = F.from_json(F.col("value"), USAGE_DOCUMENT_DDL)
    return lines_df.select(
        doc.getField("type").alias("event_type"),
        doc.getField("actorUrn").alias("actor_urn"),
        doc.getField("timestamp").alias("timestamp"),
        doc.getField("entityUrn").alias("entity_urn"),
        doc.getField("entityType").alias("entity_type"),
        doc.getField("aspectName").alias("aspect_name"),
        doc.getField("eventSource").alias("event_source"),
        doc.getField("sourceIP").alias("source_ip"),
        doc.getField("userAgent").alias("user_agent"),
        doc.getField("traceId").alias("trace_id"),
        doc.getField("loginSource").alias("login_source"),
        doc.getField("loginDenialReason").alias("login_denial_reason"),
        doc.getField("usageSource").alias("usage_source"),
        F.col("value").alias("raw_document"),
        F.sha2(F.col("value"), 256).alias("record_hash"),
        F.lit(batch_id).alias("batch_id"),
    )


def load_audit_events(spark: SparkSession, settings: Settings, usage_dir: Path) -> int:
    """Bulk-load generated usage documents into gold.audit_events (then `build_table` compacts it).

    Rows go to their event_date partition, sorted by time within each file. Returns the number of rows
    in the table.
    """
    from gold.audit import to_audit_events_from_usage
    from pipelines.runtime.io import append, read_table

    lines_df = spark.read.text(str(usage_dir))
    rows_df = to_usage_rows(lines_df, "bench")
    if settings.privacy.pseudonymise:
        rows_df = pseudonymised_usage_rows(settings, rows_df)
    audit_df = to_audit_events_from_usage(rows_df)
    append(audit_df.repartition("event_date").sortWithinPartitions("timestamp"), settings, AUDIT_EVENTS)
    return read_table(spark, settings, AUDIT_EVENTS).count()


def append_probe_event(location: Path, actor_urn: str, timestamp_ms: int) -> None:
    """Commit one new Delta version to gold.audit_events holding one event of `actor_urn` (delta-rs append).

    The row is a copy of an existing one with a new actor, time and event id, so every column keeps its type.
    """
    from datetime import datetime, timezone

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    row = DeltaTable(str(location)).to_pyarrow_dataset().head(1)
    if row.num_rows == 0:
        raise InputError(f"bench: {location} holds no audit events to copy a probe event from")
    values = {
        "actor_urn": actor_urn,
        "timestamp": timestamp_ms,
        "event_id": hashlib.sha256(f"probe|{actor_urn}|{timestamp_ms}".encode()).hexdigest(),
        "event_date": datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc).date(),
    }
    for name, value in values.items():
        index = row.schema.get_field_index(name)
        row = row.set_column(index, row.schema.field(index), pa.array([value], type=row.schema.field(index).type))
    write_deltalake(str(location), row, mode="append")


def measure_visibility(port: int, token: str, location: Path, probes: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """Commit `probes` new versions one after another; time each until a search first returns its event."""
    client = Client(port, token)
    seconds: list[float] = []
    try:
        for probe in range(probes):
            actor = f"urn:li:corpuser:bench-probe-{time.time_ns()}-{probe}"
            append_probe_event(location, actor, int(time.time() * 1000) - 1000)
            committed = time.monotonic()
            while time.monotonic() - committed < timeout_s:
                status, payload, _ = client.post({"size": 1, "includeRaw": "false"}, {"actorUrns": [actor]})
                if status == 200 and payload["total"] >= 1:
                    seconds.append(time.monotonic() - committed)
                    break
                time.sleep(0.02)
    finally:
        client.close()
    return {
        "probes": probes,
        "visible": len(seconds),
        "median_s": round(statistics.median(seconds), 3) if seconds else None,
        "max_s": round(max(seconds), 3) if seconds else None,
    }


def build_table(settings: Settings, *, events: int, days: int, actor_urns: list[str], seed: int,
                now_ms: int) -> dict[str, Any]:  # fmt: skip
    """Generate `events` usage documents, bulk-load them into gold.audit_events and compact it; return the figures.

    The compaction is publish-audit's own (`optimize_audit_events`): each day sorted by time in small row
    groups, the layout the serving engine reads by row group.
    """
    from datagen.history import generate_usage_events
    from pipelines.batch.publish_audit import optimize_audit_events
    from pipelines.runtime.engine import open_session

    usage_dir = settings.home / "bench-input"
    payload: dict[str, Any] = {}
    with measure() as generated:
        generate_usage_events(usage_dir, events=events, seed=seed, start_ms=now_ms - days * DAY_MS, end_ms=now_ms,
                              actors=actor_urns, overwrite=True)  # fmt: skip
    payload["generate"] = generated
    with open_session(settings) as spark:
        with measure() as loaded:
            payload["rows"] = load_audit_events(spark, settings, usage_dir / "usage")
        payload["load"] = loaded
        with measure() as optimized:
            metrics = optimize_audit_events(spark, settings)
        payload["optimize"] = {**dataclasses.asdict(optimized), "files_added": metrics.get("numFilesAdded"),
                               "files_removed": metrics.get("numFilesRemoved")}  # fmt: skip
    shutil.rmtree(usage_dir, ignore_errors=True)
    return payload


def bench_engine(settings: Settings, engine: str, *, token: str, mix: tuple[str, list[str], int, int], requests: int,
                 clients: int, duration_s: float, seed: int, overrides: tuple[str, ...] = (),
                 warmup_s: float = 0.0, probes: int = VISIBILITY_PROBES) -> dict[str, Any]:  # fmt: skip
    """Serve the lakehouse with one engine (and `overrides`, `key=value` settings) and measure latency, load at 1
    and `clients` clients and their ratio, visibility.

    Args:
        mix: the arguments of `request_mix` (mix name, actors, now_ms, days).
        warmup_s: seconds of `clients` clients before the load phases, not measured (0: none).
        probes: new versions committed to measure visibility (0: not measured).
    """
    port = free_loopback_port()
    started = time.monotonic()
    server = start_search_server(settings, engine, port, settings.home / f"server-{engine}.log", overrides=overrides)
    figures: dict[str, Any] = {"server_startup_s": round(time.monotonic() - started, 2)}
    try:
        figures["latency"] = measure_latency(port, token, request_mix(*mix), requests, seed)
        if warmup_s:
            flushing = time.monotonic()
            os.sync()
            figures["start_flush_s"] = round(time.monotonic() - flushing, 2)
            figures["warmup"] = load_in_child(port, token, mix, clients, warmup_s, seed + clients)
        for phase, count in (("load_1_client", 1), (f"load_{clients}_clients", clients)):
            cpu_before = server_cpu_seconds(server.pid)
            figures[phase] = load_in_child(port, token, mix, count, duration_s, seed)
            cpu_ms = (server_cpu_seconds(server.pid) - cpu_before) * 1000
            figures[phase]["server_cpu_ms_per_request"] = round(cpu_ms / max(1, figures[phase]["requests"]), 3)
        single = figures["load_1_client"]["throughput_rps"]
        figures["load_ratio"] = round(figures[f"load_{clients}_clients"]["throughput_rps"] / single, 2) if single else None
        if probes:
            figures["new_version_visible"] = measure_visibility(port, token, table_location(settings, AUDIT_EVENTS), probes)
    finally:
        memory = stop_search_server(server)
        figures["server_peak_rss_bytes"] = memory["peak_rss_bytes"]
        figures["server_memory"] = memory
    return figures


def check_targets(figures: dict[str, Any], clients: int, mix: str = "basic") -> dict[str, Any]:
    """Compare one engine's figures with the TARGETS of `mix`; `met` only when every one is met."""
    targets = TARGETS[mix]
    load = figures[f"load_{clients}_clients"]
    single = figures["load_1_client"]
    visible = figures["new_version_visible"]
    errors = sum(v.get("errors", 0) for v in figures["latency"].values()) + load["errors"] + single["errors"]
    checks = {
        "load_rps": (load["throughput_rps"], load["throughput_rps"] >= targets["load_rps"]),
        "load_p95_ms": (load.get("p95_ms"), (load.get("p95_ms") or 1e9) <= targets["load_p95_ms"]),
        "single_p95_ms": (single.get("p95_ms"), (single.get("p95_ms") or 1e9) <= targets["single_p95_ms"]),
        "rss_bytes": (figures["server_peak_rss_bytes"], (figures["server_peak_rss_bytes"] or 0) <= targets["rss_bytes"]),
        "visible_s": (visible["max_s"], visible["visible"] == visible["probes"] and visible["max_s"] <= targets["visible_s"]),
        "errors": (errors, errors == 0),
    }
    if "load_ratio" in targets:
        checks["load_ratio"] = (figures["load_ratio"], (figures["load_ratio"] or 0) >= targets["load_ratio"])
    return {
        "targets": {**targets, "errors": 0, "clients": clients, "mix": mix},
        "measured": {name: value for name, (value, _) in checks.items()},
        "failed": [name for name, (_, ok) in checks.items() if not ok],
        "met": all(ok for _, ok in checks.values()),
    }


def run_search_bench(
    settings: Settings,
    *,
    events: int,
    duration_s: float,
    clients: int,
    requests: int,
    days: int,
    actors: int,
    engines: tuple[str, ...] = ENGINES,
    mix: str = "basic",
    seed: int = 7,
    scope: tuple[str, ...] = (),
    warmup_s: float = 0.0,
    pseudonymise: bool = False,
) -> dict[str, Any]:
    """Load `events` audit rows into the lakehouse of `settings` (unless loaded), serve them and measure search.

    A home whose gold.audit_events already holds rows is reused as it is: the generated history ends when it
    was built, so the time-range requests are drawn from the days the table holds.

    With `scope` (kind=value texts), the engines are measured with the access log off, then `bench_scoped`
    compares the in-process engine under a token of that scope with the access log on against it
    (`inprocess_scoped`). `warmup_s`: seconds of load, not measured, before each engine's load phases.
    With `pseudonymise`, the table is loaded as landing stores it with privacy on and the in-process engine
    is measured with the setting on and off instead (`bench_pseudonymisation`, medians of three each).

    Returns:
        The measured figures: the build (or reuse), then per engine latency, load phases, visibility,
        server peak RSS, and for the in-process engine the target check.
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    from pipelines.serving.tokens import create_token

    actor_urns = [f"urn:li:corpuser:user{i:05d}" for i in range(actors)]
    payload: dict[str, Any] = {"events": events, "days": days, "actors": actors, "engines": list(engines), "mix": mix}
    if pseudonymise:
        settings = dataclasses.replace(settings, privacy=dataclasses.replace(settings.privacy, pseudonymise=True))
        payload["engines"] = ["inprocess"]
    audit_dir = table_location(settings, AUDIT_EVENTS)
    if table_exists(audit_dir) and DeltaTable(str(audit_dir)).to_pyarrow_dataset().count_rows():
        import pyarrow.compute as pc

        dataset = DeltaTable(str(audit_dir)).to_pyarrow_dataset()
        now_ms = int(pc.max(dataset.to_table(columns=["timestamp"]).column("timestamp")).as_py()) + 1
        payload["reused"] = True
        payload["rows"] = dataset.count_rows()
    else:
        now_ms = int(time.time() * 1000)
        payload["reused"] = False
        payload.update(build_table(settings, events=events, days=days, actor_urns=actor_urns, seed=seed, now_ms=now_ms))
    # The files of the version served, not every file in the folder (compaction leaves the old ones until VACUUM).
    sizes = pa.table(DeltaTable(str(audit_dir)).get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    payload["table"] = {"files": len(sizes), "bytes": sum(sizes)}
    # Every field of the contract, source IPs and raw events included: the sensitive role.
    token, _ = create_token(settings, "urn:li:corpuser:bench", ["audit-read-sensitive"])
    mix_arguments = (mix, actor_urns, now_ms, days)
    if pseudonymise:
        if not table_exists(table_location(settings, IDENTITIES)):
            raise InputError("--pseudonymise: the kept home was loaded without it; use another --work-dir")
        payload["pseudonymisation"] = bench_pseudonymisation(
            settings, bench_engine, token=token, mix=mix_arguments, rounds=PRIVACY_ROUNDS, clients=clients,
            duration_s=duration_s, requests=requests, seed=seed, warmup_s=warmup_s,
        )  # fmt: skip
        return payload
    plain = ("access_log.enabled=false",) if scope else ()
    for engine in engines:
        payload[engine] = bench_engine(settings, engine, token=token, mix=mix_arguments, requests=requests,
                                       clients=clients, duration_s=duration_s, seed=seed, overrides=plain,
                                       warmup_s=warmup_s)  # fmt: skip
        payload[engine]["target"] = check_targets(payload[engine], clients, mix)
    if scope:
        payload["inprocess_scoped"] = bench_scoped(settings, scope=scope, kinds=request_mix(*mix_arguments),
                                                   clients=clients, duration_s=duration_s, seed=seed,
                                                   p95_target_ms=TARGETS[mix]["load_p95_ms"])  # fmt: skip
    return payload


def bench_search_command(
    ctx: typer.Context,
    events: int = typer.Option(1_000_000, "--events", help="Audit events to load."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of each load phase (max 600)."),
    warmup: float = typer.Option(5.0, "--warmup", help="Seconds of load at --clients before the load phases, not measured (0: none)."),
    clients: int = typer.Option(16, "--clients", help="Concurrent clients in the second load phase (max 64)."),
    requests: int = typer.Option(50, "--requests", help="Requests per kind in the latency phase."),
    days: int = typer.Option(30, "--days", help="Days the events are spread over (ending now)."),
    actors: int = typer.Option(1000, "--actors", help="Distinct actors."),
    engine: list[str] = typer.Option(list(ENGINES), "--engine", help="Serving engine(s) to measure: inprocess, spark."),
    mix: str = typer.Option("basic", "--mix", help="Request mix: basic (three kinds) or contract (twelve searches "
                            "shaped like DataHub's contract, one read to page 2)."),
    work_dir: Path | None = typer.Option(
        None, "--work-dir", help="Lakehouse home kept after the run; one already loaded is reused (default: a temp dir, removed)."
    ),
    out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    scope: list[str] = typer.Option(
        [], "--scope", help="Also measure in-process with a token of this scope (kind=value, repeatable) and the access log on."
    ),
    pseudonymise: bool = typer.Option(
        False, "--pseudonymise", help="Load the events pseudonymised and measure in-process with privacy.pseudonymise on and off, alternating."
    ),
) -> None:
    """Measure audit search per serving engine: latency, throughput at 1 and N clients and their ratio, new-version visibility."""
    from pipelines.cli.app import state_of
    from pipelines.cli.console import console

    if events < 1:
        raise InputError(f"--events: {events} must be at least 1")
    if not 1 <= clients <= 64:
        raise InputError(f"--clients: {clients} must be 1..64")
    if not 0 < duration <= 600:
        raise InputError(f"--duration: {duration} must be in (0, 600] seconds")
    if not 0 <= warmup <= 600:
        raise InputError(f"--warmup: {warmup} must be in [0, 600] seconds")
    if requests < 1 or days < 1 or actors < 1:
        raise InputError(f"--requests {requests}, --days {days}, --actors {actors}: each must be at least 1")
    if mix not in MIXES:
        raise InputError(f"--mix: {mix!r} is not one of {', '.join(MIXES)}")
    unknown = [e for e in engine if e not in ENGINES]
    if unknown or not engine:
        raise InputError(f"--engine: {unknown or engine!r} is not one of {', '.join(ENGINES)}")
    base = state_of(ctx).settings
    home = work_dir.resolve() if work_dir else Path(tempfile.mkdtemp(prefix="bench-search-"))
    settings = dataclasses.replace(base, home=home, table_locations={})
    try:
        payload = run_search_bench(settings, events=events, duration_s=duration, clients=clients, requests=requests,
                                   days=days, actors=actors, engines=tuple(dict.fromkeys(engine)), mix=mix,
                                   scope=tuple(scope), warmup_s=warmup, pseudonymise=pseudonymise)  # fmt: skip
    finally:
        if work_dir is None:
            shutil.rmtree(home, ignore_errors=True)
    path = write_result(out, "search", payload)
    if pseudonymise:
        privacy = payload["pseudonymisation"]
        on, off = privacy["medians"]["on"], privacy["medians"]["off"]
        console.print(f"pseudonymisation on / off, {clients} clients, medians of {privacy['rounds']} alternating runs: "
                      f"{on['throughput_rps']} / {off['throughput_rps']} req/s, p95 {on['p95_ms']} / {off['p95_ms']} ms; "
                      f"time {privacy['time_ratio']}x, server CPU {privacy['cpu_ratio']}x")  # fmt: skip
        console.print(f"wrote {path}")
        return
    for name in dict.fromkeys(engine):
        figures = payload[name]
        for phase in ("load_1_client", f"load_{clients}_clients"):
            load = figures[phase]
            console.print(f"{name} {phase}: {load['throughput_rps']} req/s, p50 {load.get('p50_ms')} ms, "
                          f"p95 {load.get('p95_ms')} ms, {load['errors']} errors, "
                          f"CPU per request: server {load['server_cpu_ms_per_request']} ms, "
                          f"clients {load['client_cpu_ms_per_request']} ms")  # fmt: skip
        console.print(f"{name}: {clients} clients / 1 client throughput {figures['load_ratio']}x ({mix} mix)")
        visible = figures["new_version_visible"]
        console.print(f"{name}: new version visible in {visible['median_s']} s (median), peak RSS "
                      f"{figures['server_peak_rss_bytes']} bytes, targets met: {figures['target']['met']}")  # fmt: skip
    if scope:
        scoped = payload["inprocess_scoped"]
        console.print(f"scoped + access log vs unscoped, {clients} clients, medians of {len(scoped['rounds']['scoped'])} alternating "
                      f"phases: {scoped['median_rps']} req/s, p95 {scoped['median_p95_ms']} ms, server CPU "
                      f"{scoped['median_cpu_ms_per_request']} ms/request; share {scoped['throughput_share_of_unscoped']:.1%}, "
                      f"targets met: {scoped['target']['met']}")  # fmt: skip
    console.print(f"wrote {path}")


def register(bench_app: typer.Typer) -> None:
    """Add `bench search` to the bench group."""
    bench_app.command("search")(bench_search_command)
