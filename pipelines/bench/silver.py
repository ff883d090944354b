"""`lakehouse bench silver`: generate aspect versions, land them, refine them, and write the measured figures.

Generation uses `datagen.history.generate_aspect_versions` (reported, not counted). Landing is
measured on its own: the project's landing (`pipelines.batch.landing.land_paths`) when it exists, otherwise
the bench's own JSON-lines loader. Refine is measured per batch, and on the embedded engine per step
of the batch too (`steps_s`: the wall time of each staged part and write, `pipelines.batch.refine.STEP_NAMES`).
`--engine classic` runs the same silver transforms on JVM Spark local[2] through Spark Connect, with
Parquet in and out and the state carried between batches as Parquet (JVM Spark here has no Delta, so
no MERGE: `pipelines.bench.silver_classic`).

`--baseline` then runs the one-process Python baseline (`pipelines.bench.baseline`) on the same input
files, checks that it derives the same event ids, and reports its wall time over land + refine's
(`baseline_ratio`, `pipelines.bench.silver_baseline`). `--floors` times the least work the steps can do. `--micro-batches K` then refines
K small batches against the state the run built (`pipelines.bench.micro_batches`). A `--work` folder keeps the
generated input, so a repeated run measures the same files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from conf.errors import InputError
from conf.settings import Settings, load_settings
from conf.tables import ASPECT_STATE, ENTITY_CHANGE_EVENTS
from pipelines.bench.harness import Measurement, measure, write_result
from pipelines.bench.silver_baseline import BaselineMismatch, compare_with_baseline
from pipelines.bench.silver_classic import event_ids, part_files, run_classic
from pipelines.bench.silver_remote import (
    CLUSTER_ENVIRONMENT,
    CLUSTER_SPARK_CONF,
    OtherProcessesCpu,
    S3Endpoint,
    bench_home,
    engine_server_peak_rss_bytes,
    parse_assignments,
    parse_engine_choice,
    print_compared,
    run_compared,
    s3_server,
)
from pipelines.bench.table_hashes import identity_hashes
from pipelines.bench.task_definitions import TASK_LOG_FILTER, log_offset, task_definition_figures
from pipelines.cli.console import console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# sail-cluster: Sail as its own process in local-cluster mode (a driver and workers over the network),
# reached through Spark Connect with the `connect` profile: the remote engine on the same cores.
ENGINES = ("sail", "sail-cluster", "classic")
TARGETS = {
    "versions": 2_000_000,
    "wall_s": 60.0,
    "last_to_first_batch": 1.3,
    "peak_rss_bytes": 4 * 1024**3,
    # A 100-record micro-batch against a state of 1M (entity, aspect) keys (`--micro-batches`).
    "micro_batch_refine_s": 3.0,
}


def register(bench_app: typer.Typer) -> None:
    """Add `bench silver` to the bench group."""

    @bench_app.command("silver")
    def bench_silver_command(
        versions: int = typer.Option(..., "--versions", min=100, help="Aspect versions to generate (about)."),
        batches: int = typer.Option(1, "--batches", min=1, help="Land them as this many equal batches."),
        engines: list[str] = typer.Option(
            ["sail"], "--engine",
            help="sail (embedded, Delta + MERGE), sail-cluster (sail spark server in local-cluster mode, its own "
            "process, through Spark Connect) or classic (JVM local[2], Parquet); ENGINE:STORAGE names the home's "
            "storage too (sail-cluster:s3). Repeat to compare engines in one run (the first is the reference).",
        ),
        storage: str = typer.Option(
            "local", "--storage", help="local (a folder) or s3 (moto's S3 server on loopback) for the home and input."
        ),
        runs: int = typer.Option(1, "--runs", min=1, help="Run each engine this many times, in alternating order."),
        cluster_env: list[str] = typer.Option(
            [], "--cluster-env", help="SAIL_<NAME>=<VALUE> for the sail-cluster server, over the bench's defaults."
        ),
        cluster_conf: list[str] = typer.Option(
            [], "--cluster-conf", help="spark.sql.<name>=<value> for the sail-cluster session, over the bench's defaults."
        ),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
        seed: int = typer.Option(7, "--seed", help="Generator seed."),
        work: Path | None = typer.Option(None, "--work", help="Scratch folder (default: a temporary one, removed after)."),
        baseline: bool = typer.Option(
            False, "--baseline", help="Also run the one-process Python baseline on the same input; compare event ids."
        ),
        floors: bool = typer.Option(
            False, "--floors", help="Also time the least work each step can do, each alone (sail only)."
        ),
        micro_batches: int = typer.Option(
            0, "--micro-batches", min=0, help="Then land and refine this many small batches against the state (sail)."
        ),
        micro_records: int = typer.Option(100, "--micro-records", min=1, help="Records per micro-batch."),
        pseudonymise: bool = typer.Option(
            False, "--pseudonymise", help="Run each engine with privacy.pseudonymise off and on, alternating (--runs rounds)."
        ),
        classic_url: str | None = typer.Option(
            None, "--classic-url",
            help="classic: the sc:// URL of a JVM Spark Connect server already running (default: start local[2]).",
        ),
    ) -> None:
        """Measure bronze -> silver: wall time, CPU, peak memory, versions/s and events/s (per batch too)."""
        choices = [parse_engine_choice(text, ENGINES, storage) for text in engines]
        if pseudonymise:
            choices = [dataclasses.replace(c, pseudonymise=on) for c in choices for on in (False, True)]
        environment = parse_assignments(cluster_env, "--cluster-env", "SAIL_")
        spark_conf = parse_assignments(cluster_conf, "--cluster-conf", "spark.sql.")
        if len(choices) > 1 or runs > 1:
            compared = run_compared(
                run_silver_bench, choices, runs, work, versions=versions, batches=batches, seed=seed,
                baseline=baseline, floors=floors, micro_batches=micro_batches, micro_records=micro_records,
                cluster_environment=environment, cluster_spark_conf=spark_conf, hash_tables=True, classic_url=classic_url,
            )  # fmt: skip
            print_compared(compared, write_result(out, "silver-compare", compared))
            return
        (choice,) = choices
        engine = choice.engine
        result = run_silver_bench(
            versions=versions, batches=batches, engine=engine, seed=seed, work=work, baseline=baseline, floors=floors,
            micro_batches=micro_batches, micro_records=micro_records, storage=choice.storage,
            cluster_environment=environment, cluster_spark_conf=spark_conf, classic_url=classic_url,
        )  # fmt: skip
        path = write_result(out, f"silver-{engine}" + ("" if choice.storage == "local" else f"-{choice.storage}"), result)
        refine = result["refine"]
        console.print(
            f"{result['versions']} versions in {result['batches']} batch(es) on {engine}: refine {refine['wall_s']} s "
            f"({result['versions_per_s']} versions/s, {result['events_per_s']} events/s), "
            f"peak RSS {round(result['peak_rss_bytes'] / 2**20)} MiB, landing {result['landing']['wall_s']} s -> {path}"
        )
        if micro_batches:
            micro = result["micro_batches"]
            console.print(
                f"{micro_batches} micro-batches of {micro_records} records against {micro['state_keys']} state keys: "
                f"refine median {micro['refine_wall_s']['median']} s, max {micro['refine_wall_s']['max']} s"
            )
        if baseline:
            console.print(
                f"baseline {result['baseline']['wall_s']} s vs land + refine {result['pipeline_wall_s']} s: "
                f"ratio {result['baseline_ratio']} (same {result['baseline']['events']} event ids)"
            )


def run_silver_bench(
    *,
    versions: int,
    batches: int = 1,
    engine: str = "sail",
    seed: int = 7,
    work: Path | None = None,
    baseline: bool = False,
    floors: bool = False,
    micro_batches: int = 0,
    micro_records: int = 100,
    storage: str = "local",
    s3: S3Endpoint | None = None,
    cluster_environment: dict[str, str] | None = None,
    cluster_spark_conf: dict[str, str] | None = None,
    pseudonymise: bool = False,
    hash_tables: bool = False,
    classic_url: str | None = None,
) -> dict[str, Any]:
    """Generate, land and refine `versions` aspect versions in `batches` batches; return the measured figures.

    With `baseline`, the one-process Python baseline (`pipelines.bench.baseline`) then runs on the same
    files, in a child process so its memory stays out of the pipeline's peak RSS; both must derive
    the same event ids. `baseline_ratio` is the baseline's wall time over land + refine's. With `floors`
    (sail only), `floors` holds the wall time of the least work each step can do (`pipelines.bench.floors`)
    and `floors_cpu` the CPU time of the same jobs.
    With `micro_batches` (sail only), that many batches of `micro_records` records then run against the
    state (`pipelines.bench.micro_batches`).
    With `storage="s3"`, the home and the input files are on an S3-protocol server (`s3`, or moto's server
    started for this run; `pipelines.bench.silver_remote`); `cluster_environment` goes to the sail-cluster
    server over `silver_remote.CLUSTER_ENVIRONMENT`, `cluster_spark_conf` to its session over
    `silver_remote.CLUSTER_SPARK_CONF`. With `pseudonymise` (sail only), the home lands with
    privacy.pseudonymise on. With `hash_tables` (sail only, without pseudonyms: each home's secret makes
    its pseudonyms its own), `table_hashes` holds the identity hashes of the change events and the state
    (`pipelines.bench.table_hashes`), taken after refine and not timed. `classic_url` runs the classic
    engine on a JVM Spark Connect server already running there instead of starting one (whose memory is
    then not the run's).

    Raises:
        InputError: for an unknown engine or storage, a batch count larger than the versions, or a step
            measured on one engine or storage only asked of another.
        BaselineMismatch: when the baseline and the pipeline derive different event ids.
    """
    parse_engine_choice(f"{engine}:{storage}", ENGINES, storage)
    if classic_url is not None and engine != "classic":
        raise InputError(f"--classic-url: {classic_url!r} is for the classic engine only, not {engine!r}")
    if batches < 1 or batches > versions:
        raise InputError(f"--batches: {batches!r} must be between 1 and --versions ({versions})")
    folder = Path(work) if work else Path(tempfile.mkdtemp(prefix="bench-silver-"))
    try:
        from datagen.history import generate_aspect_versions

        input_dir = folder / "input"
        wanted = {"versions": versions, "seed": seed, "batches": batches}
        marker = input_dir / "_bench.json"
        with measure() as generation:
            # A --work folder keeps its generated input: the same request reuses it (generation not re-measured).
            if not (marker.exists() and json.loads(marker.read_text()) == wanted):
                generate_aspect_versions(input_dir, versions=versions, seed=seed, batches=batches, overwrite=True)
                marker.write_text(json.dumps(wanted))
        generated = int(json.loads((input_dir / "manifest.json").read_text())["totals"]["aspect_versions"])
        shutil.rmtree(folder / "home", ignore_errors=True)
        shutil.rmtree(folder / "classic", ignore_errors=True)
        shutil.rmtree(folder / "micro", ignore_errors=True)
        batch_dirs = _batch_dirs(input_dir, batches)
        if floors and engine not in ("sail", "sail-cluster"):
            raise InputError(f"--floors: measured on the sail engine only, not on {engine!r}")
        if micro_batches and engine not in ("sail", "sail-cluster"):
            raise InputError(f"--micro-batches: measured on the sail engine only, not on {engine!r}")
        if pseudonymise and engine not in ("sail", "sail-cluster"):
            raise InputError(f"--pseudonymise: measured on the sail engine only, not on {engine!r}")
        if storage != "local" and (floors or micro_batches):
            raise InputError(f"--floors and --micro-batches: measured on a local home only, not on {storage!r}")
        load_before = os.getloadavg()
        if engine in ("sail", "sail-cluster"):
            with contextlib.ExitStack() as stack:
                if storage == "s3" and s3 is None:
                    s3 = stack.enter_context(s3_server(folder))
                figures = _run_sail(
                    folder, batch_dirs, collect_ids=baseline, floors=floors, micro=(micro_batches, micro_records, seed),
                    cluster=engine == "sail-cluster", s3=s3 if storage == "s3" else None,
                    cluster_environment={**CLUSTER_ENVIRONMENT, **(cluster_environment or {})},
                    cluster_spark_conf={**CLUSTER_SPARK_CONF, **(cluster_spark_conf or {})}, pseudonymise=pseudonymise,
                    hash_tables=hash_tables,
                )  # fmt: skip
        else:
            figures = run_classic(folder, batch_dirs, collect_ids=baseline, connect_url=classic_url)
        load_after = os.getloadavg()
        refine: Measurement = figures["refine"]
        per_batch = figures["per_batch"]
        events = sum(b["events"] for b in per_batch)
        compared = compare_with_baseline(folder, batch_dirs, figures) if baseline else {}
        return {
            "engine": engine,
            "pseudonymise": pseudonymise,
            "versions": generated,
            "batches": batches,
            "seed": seed,
            "generation": dataclasses.asdict(generation),
            "landing": dataclasses.asdict(figures["landing"]),
            "landing_mode": figures["landing_mode"],
            "storage": storage,
            "refine": dataclasses.asdict(refine),
            "events": events,
            "versions_per_s": round(generated / refine.wall_s, 1) if refine.wall_s else None,
            "events_per_s": round(events / refine.wall_s, 1) if refine.wall_s else None,
            "peak_rss_bytes": refine.peak_rss_bytes,
            "per_batch": per_batch,
            "last_to_first_batch": round(per_batch[-1]["wall_s"] / per_batch[0]["wall_s"], 3)
            if len(per_batch) > 1 and per_batch[0]["wall_s"]
            else None,
            "targets": TARGETS,
            # Other work on the machine shows here: the figures are only comparable at a low load.
            "load_average_1m": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
            # CPU seconds of the other processes on the same cores, per step: the sail-cluster server with its
            # workers, and the S3 server (moto: Python, its own cost, not the engine's).
            **{key: figures[key] for key in ("engine_server_cpu_s", "s3_server_cpu_s") if figures.get(key)},
            # The sail-cluster server and its workers, summed; the driver's is peak_rss_bytes.
            **{key: figures[key] for key in ("engine_server_peak_rss_bytes", "table_hashes") if figures.get(key)},
            # The sail-cluster runs: the plans the driver sent its workers, per step (`task_definitions`).
            **({"task_definitions": figures["task_definitions"]} if figures.get("task_definitions") else {}),
            **compared,
            **(
                {
                    "floors": {name: taken.wall_s for name, taken in figures["floors"].items()},
                    "floors_cpu": {name: taken.cpu_s for name, taken in figures["floors"].items()},
                }
                if floors
                else {}
            ),
            **({"micro_batches": figures["micro_batches"]} if micro_batches else {}),
        }
    finally:
        if work is None:
            shutil.rmtree(folder, ignore_errors=True)


def _batch_dirs(input_dir: Path, batches: int) -> list[Path]:
    if batches == 1:
        return [input_dir / "aspects"]
    return [input_dir / f"batch-{index:05d}" / "aspects" for index in range(batches)]


def _land(spark: SparkSession, settings: Settings, batch_dirs: list[Path]) -> str:
    from pipelines.batch.landing import land_paths

    for batch_dir in batch_dirs:
        land_paths(spark, settings, [batch_dir])
    return "pipelines.batch.landing"


def _run_sail(
    folder: Path,
    batch_dirs: list[Path],
    collect_ids: bool = False,
    floors: bool = False,
    micro: tuple[int, int, int] = (0, 0, 0),
    cluster: bool = False,
    s3: S3Endpoint | None = None,
    cluster_environment: dict[str, str] | None = None,
    cluster_spark_conf: dict[str, str] | None = None,
    pseudonymise: bool = False,
    hash_tables: bool = False,
) -> dict[str, Any]:
    from pipelines.bench.floors import measure_floors
    from pipelines.bench.micro_batches import run_micro_batches
    from pipelines.runtime.engine import open_session
    from pipelines.runtime.engine_servers import sail_connect_server
    from pipelines.batch.refine import refine
    from pipelines.runtime.io import read_table

    with contextlib.ExitStack() as stack:
        home, overrides, land_from = stack.enter_context(bench_home(folder, batch_dirs, s3))
        overrides = [*overrides, *(["privacy.pseudonymise=true"] if pseudonymise else [])]
        settings = load_settings("local", home=home, env={}, overrides=overrides)
        other_cpu = OtherProcessesCpu(cluster=cluster, s3=s3)
        server_log = folder / "engine-server.log"
        server_log.unlink(missing_ok=True)
        if cluster:
            url = stack.enter_context(
                sail_connect_server(
                    settings, mode="local-cluster", workdir=str(folder), log_path=str(server_log),
                    environment={"RUST_LOG": TASK_LOG_FILTER, **(cluster_environment or {})},
                )
            )  # fmt: skip
            session_conf = [f"engine.spark_conf.{key}='{value}'" for key, value in (cluster_spark_conf or {}).items()]
            settings = load_settings(
                "connect", home=home, env={}, overrides=[*overrides, *session_conf, f"engine.connect_url={url}"]
            )
        spark = stack.enter_context(open_session(settings))
        offsets = [log_offset(server_log)]
        with other_cpu.measure("landing"), measure() as landing:
            mode = _land(spark, settings, land_from)
        offsets.append(log_offset(server_log))
        per_batch = []
        with other_cpu.measure("refine"), measure() as total:
            for _ in batch_dirs:
                with measure() as one:
                    result = refine(spark, settings, max_batches=1)
                steps = {k.removeprefix("seconds."): v for k, v in result.metrics.items() if k.startswith("seconds.")}
                steps_cpu = {
                    k.removeprefix("cpu_seconds."): v for k, v in result.metrics.items() if k.startswith("cpu_seconds.")
                }
                per_batch.append(
                    {"batch_id": ",".join(result.batch_ids), "versions": result.rows_in, "events": result.rows_out,
                     "wall_s": one.wall_s, "cpu_s": one.cpu_s, "steps_s": steps, "steps_cpu_s": steps_cpu}
                )
                offsets.append(log_offset(server_log))
        server_peak_rss = engine_server_peak_rss_bytes() if cluster else None
        ids = event_ids(read_table(spark, settings, ENTITY_CHANGE_EVENTS)) if collect_ids else None
        # A home with pseudonyms has a secret of its own: its tables differ from every other home's by design.
        hashed = hash_tables and not pseudonymise
        hashes = identity_hashes(spark, settings, (ENTITY_CHANGE_EVENTS, ASPECT_STATE)) if hashed else None
        floor_figures = (
            measure_floors(spark, settings, part_files(batch_dirs[-1]), folder / "floors") if floors else None
        )
        micro_batches, micro_records, seed = micro
        micro_figures = (
            run_micro_batches(spark, settings, folder, batch_dirs[-1], micro_batches, micro_records, seed)
            if micro_batches
            else None
        )
    return {
        "landing": landing,
        "landing_mode": mode,
        "refine": total,
        "per_batch": per_batch,
        "event_ids": ids,
        "floors": floor_figures,
        "micro_batches": micro_figures,
        "engine_server_cpu_s": other_cpu.engine_server,
        "engine_server_peak_rss_bytes": server_peak_rss,
        "table_hashes": hashes,
        "s3_server_cpu_s": other_cpu.s3_server,
        # What the driver sent the workers in each step (landing, then each refine batch): plan sizes.
        "task_definitions": {
            "landing": task_definition_figures(server_log, *offsets[:2]),
            "refine": [task_definition_figures(server_log, start, end) for start, end in zip(offsets[1:], offsets[2:])],
        }
        if cluster
        else None,
    }


