"""`lakehouse bench silver` against a remote engine and an object-storage home, and several engines in one run.

An engine is named with the storage of its home: `sail:local` (the embedded engine, a local home),
`sail-cluster:s3` (`sail spark server` in local-cluster mode, its own process, with the home on an
S3-protocol server). The S3 server is moto's (`moto_server`), started on loopback for the run: it is
Python, so its CPU seconds are work on the same cores and are reported apart (`s3_server_cpu_s`), as
are the Sail server's and its workers' (`engine_server_cpu_s`).

With several engines and `runs`, the engines run one after the other in alternating order (A B, B A,
...), on the same generated input, and the result holds every run, the median walls of each engine and
their ratio to the first engine's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from conf.errors import InputError
from conf.locations import ObjectLocation
from pipelines.runtime.storage import Storage

STORAGES = ("local", "s3")
BUCKET = "lakehouse-bench"

# Sail's local-cluster runner on the bench's 2 cores. Sail 0.7.2 compresses every shuffle stream between
# its workers with zstd: on one machine that is CPU spent for no bytes saved on a network. Without it the
# server used 9.2 and 9.6 CPU-s for 100k versions on an S3 home against 10.9-11.3 with it (and with 1 or 2
# workers, 2 or 4 task slots, or a default parallelism of 2, none of which changed it; docs/benchmarks.md).
CLUSTER_ENVIRONMENT: dict[str, str] = {"SAIL_CLUSTER__SHUFFLE_BACKEND__FLIGHT__COMPRESSION": "none"}
CLUSTER_SPARK_CONF: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    """An engine and where its home lives: `sail-cluster:s3`."""

    engine: str
    storage: str
    pseudonymise: bool = False

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.storage}" + ("+pseudonyms" if self.pseudonymise else "")


def parse_engine_choice(text: str, engines: Sequence[str], default_storage: str) -> EngineChoice:
    """`ENGINE` or `ENGINE:STORAGE` -> an EngineChoice (the storage defaults to `default_storage`).

    Raises:
        InputError: naming `--engine` or `--storage` and the value for an unknown engine or storage,
            or object storage asked of an engine that cannot use it.
    """
    engine, _, storage = text.partition(":")
    storage = storage or default_storage
    if engine not in engines:
        raise InputError(f"--engine: {engine!r} is not one of {', '.join(engines)}")
    if storage not in STORAGES:
        raise InputError(f"--storage: {storage!r} (in --engine {text!r}) is not one of {', '.join(STORAGES)}")
    if storage != "local" and engine not in ("sail", "sail-cluster"):
        raise InputError(f"--storage: {engine!r} runs on a local folder only, not on {storage!r}")
    return EngineChoice(engine, storage)


def parse_assignments(pairs: Sequence[str], option: str, prefix: str) -> dict[str, str]:
    """`<prefix><name>=<value>` strings -> a mapping, e.g. `--cluster-env SAIL_...=...`, `--cluster-conf spark.sql....=...`.

    Raises:
        InputError: naming the option and the item for one without `=` or whose name does not start with `prefix`.
    """
    assigned = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name.startswith(prefix):
            raise InputError(f"{option}: {pair!r} is not {prefix}<name>=<value>")
        assigned[name] = value
    return assigned


@dataclasses.dataclass(frozen=True)
class S3Endpoint:
    """A running S3-protocol server on loopback: its storage options and process id."""

    options: dict[str, str]
    pid: int

    def cpu_seconds(self) -> float:
        """CPU seconds the server has used so far."""
        return _own_cpu_seconds(self.pid)


@contextlib.contextmanager
def s3_server(log_dir: Path, startup_timeout: float = 30.0, bucket: str = BUCKET) -> Iterator[S3Endpoint]:
    """Run `moto_server` on a free loopback port with one bucket (`bucket`); stop it when the block ends.

    Raises:
        InputError: when moto's server is not installed.
        ConfigError: when it does not start in time (its log tail is in the message).
    """
    from pipelines.runtime.engine_servers import free_loopback_port, wait_for_port

    executable = Path(sys.executable).with_name("moto_server")
    if not executable.exists():
        raise InputError("--storage s3: needs moto's server (pip install 'moto[server]')")
    port = free_loopback_port()
    log_path = log_dir / "moto.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([str(executable), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        with log_path.open() as log:
            wait_for_port(server, port, log, time.monotonic() + startup_timeout, "moto_server")
        endpoint = f"http://127.0.0.1:{port}"
        # moto takes any credentials; creating a bucket is one unsigned PUT.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30).close()
        yield S3Endpoint(
            options={
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
                "AWS_ALLOW_HTTP": "true",
            },
            pid=server.pid,
        )
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def storage_overrides(s3: S3Endpoint, local_dir: Path) -> list[str]:
    """Settings overrides for a home on this server (the options as `storage.options`, strings quoted)."""
    return [*(f"storage.options.{key}='{value}'" for key, value in s3.options.items()), f"storage.local_dir={local_dir}"]


def stage_input(s3: S3Endpoint, batch_dirs: Sequence[Path], prefix: ObjectLocation) -> list[ObjectLocation]:
    """Copy the batches' JSON-lines files under `prefix` (not measured: the files an upstream writer put there).

    Returns:
        One location per batch folder, in order.
    """
    storage = Storage(s3.options)
    locations = []
    for batch_dir in batch_dirs:
        target = prefix.joinpath(*batch_dir.parts[-2:]) if batch_dir.parent.name.startswith("batch-") else prefix / batch_dir.name
        for path in sorted(batch_dir.iterdir()):
            if path.name.endswith(".jsonl"):
                with path.open("rb") as source, storage.open_write(target / path.name) as sink:
                    shutil.copyfileobj(source, sink, 8 << 20)
        locations.append(target)
    return locations


def remove_prefix(s3: S3Endpoint, prefix: ObjectLocation) -> None:
    """Remove every object under `prefix` (moto keeps them in memory)."""
    Storage(s3.options).remove_tree(prefix)


def engine_server_cpu_seconds() -> float:
    """CPU seconds of this process's running `sail spark server` children and their workers (0 if none)."""
    members = [member for pid in _engine_servers() for member in [pid, *_descendants(pid)]]
    return round(sum(_own_cpu_seconds(member) for member in members), 3)


def engine_server_peak_rss_bytes() -> int | None:
    """The summed peak resident memory of this process's running `sail spark server` children and their workers.

    None when no server runs (or /proc does not tell).
    """
    from pipelines.bench.processes import server_memory

    return sum(server_memory(pid)["peak_rss_bytes"] or 0 for pid in _engine_servers()) or None


def _engine_servers() -> list[int]:
    servers = []
    for pid in _children(os.getpid()):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            # `sail` is a Python entry point: the interpreter comes first on its command line.
            if b"spark" in command and b"server" in command and any(Path(a.decode()).name == "sail" for a in command[:2]):
                servers.append(pid)
    return servers


def _children(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return children


def _descendants(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for child in _children(pid):
            found += [child, *_descendants(child)]
    return found


def _own_cpu_seconds(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


@contextlib.contextmanager
def bench_home(
    folder: Path, batch_dirs: Sequence[Path], s3: S3Endpoint | None
) -> Iterator[tuple[Path | str, list[str], list[Path | ObjectLocation]]]:
    """The home of one run, its settings overrides and the batches to land from; an S3 home is removed after.

    On S3 the run gets a prefix of its own (the runs of a comparison share one server), with the input
    copied under it first.
    """
    if s3 is None:
        yield folder / "home", [], list(batch_dirs)
        return
    prefix = ObjectLocation("s3", BUCKET, f"run-{time.time_ns()}")
    try:
        land_from = stage_input(s3, batch_dirs, prefix / "input")
        yield str(prefix / "home"), storage_overrides(s3, folder / "local"), list(land_from)
    finally:
        remove_prefix(s3, prefix)


class OtherProcessesCpu:
    """CPU seconds of the processes beside this one, per step: the sail-cluster server and the S3 server."""

    def __init__(self, *, cluster: bool, s3: S3Endpoint | None):
        self.cluster = cluster
        self.s3 = s3
        self.engine_server: dict[str, float] = {}
        self.s3_server: dict[str, float] = {}

    @contextlib.contextmanager
    def measure(self, step: str) -> Iterator[None]:
        """Record under `step` how much CPU each server used over the block."""
        counters = [
            *([(engine_server_cpu_seconds, self.engine_server)] if self.cluster else []),
            *([(self.s3.cpu_seconds, self.s3_server)] if self.s3 is not None else []),
        ]
        before = [read() for read, _ in counters]
        try:
            yield
        finally:
            for (read, into), started in zip(counters, before):
                into[step] = round(read() - started, 3)


def print_compared(compared: dict[str, Any], path: Path) -> None:
    """One line per engine: its median walls and its ratio to the first engine."""
    from pipelines.cli.console import console

    for label, median in compared["median"].items():
        console.print(
            f"{label}: land + refine {median['pipeline_wall_s']} s (land {median['landing_wall_s']} s, refine "
            f"{median['refine_wall_s']} s; median of {median['runs']}), {compared['ratio_to_first'][label]}x the first"
            + (f" ({compared['ratio_to_first_less_s3_cpu'][label]}x less the S3 server's CPU)" if median["s3_server_cpu_s"] else "")
        )
    if compared["tables_equal"] is not None:
        console.print(f"tables equal to the first run's (change events and state, by hash): {compared['tables_equal']}")
    console.print(f"-> {path}")


def run_compared(
    run_one: Callable[..., dict[str, Any]],
    choices: Sequence[EngineChoice],
    runs: int,
    work: Path | None,
    **options: Any,
) -> dict[str, Any]:
    """Run each engine `runs` times in alternating order on one generated input; medians, ratios, equal tables.

    Args:
        run_one: `pipelines.bench.silver.run_silver_bench`.
        choices: the engines, the first the reference of the ratios.
        runs: rounds; round r runs the engines in order, round r + 1 in reverse order.
        work: the scratch folder (default: a temporary one, removed after).
        options: the rest of run_one's arguments.

    Returns:
        `runs`: every run's result, in the order run; `median`: per engine, the median land, refine and
        land + refine walls and server CPU seconds; `ratio_to_first`: each engine's median land + refine wall over the
        first engine's; `tables_equal`: whether the table hashes of every run that took them are equal (None
        when none did: classic runs and runs with pseudonyms do not). Each run runs in a process of its own (`run_in_own_process`).
    """
    if runs < 1:
        raise InputError(f"--runs: {runs!r} must be at least 1")
    folder = Path(work) if work else Path(tempfile.mkdtemp(prefix="bench-silver-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(s3_server(folder)) if any(c.storage == "s3" for c in choices) else None
            for round_index in range(runs):
                for choice in choices if round_index % 2 == 0 else list(reversed(choices)):
                    result = run_in_own_process(
                        run_one, engine=choice.engine, storage=choice.storage, pseudonymise=choice.pseudonymise, s3=s3,
                        work=folder, **options,
                    )  # fmt: skip
                    results.append({"label": choice.label, "round": round_index, **result})
    finally:
        if work is None:
            shutil.rmtree(folder, ignore_errors=True)
    median = {c.label: _medians([r for r in results if r["label"] == c.label]) for c in choices}
    first = median[choices[0].label]["pipeline_wall_s"]
    return {
        "engines": [c.label for c in choices],
        "versions": results[0]["versions"],
        "batches": results[0]["batches"],
        "seed": results[0]["seed"],
        "runs": results,
        "median": median,
        "ratio_to_first": {label: round(m["pipeline_wall_s"] / first, 3) if first else None for label, m in median.items()},
        # The S3 server (moto, Python) works on the same cores: each engine's wall less that server's CPU
        # seconds, over the first engine's wall, sets its cost aside (an estimate: some of it overlaps waits).
        "ratio_to_first_less_s3_cpu": {
            label: round((m["pipeline_wall_s"] - (m["s3_server_cpu_s"] or 0)) / first, 3) if first else None
            for label, m in median.items()
        },
        "tables_equal": _tables_equal(results),
        "load_average_1m": {
            "before": results[0]["load_average_1m"]["before"], "after": results[-1]["load_average_1m"]["after"]
        },
    }  # fmt: skip


def run_in_own_process(run_one: Callable[..., dict[str, Any]], **arguments: Any) -> dict[str, Any]:
    """`run_one(**arguments)` in a new interpreter, so each run's CPU and peak memory are its own.

    The embedded engine runs inside the process that drives it and keeps its memory after a run: in one
    process, a remote run after an embedded one would report the embedded run's peak as its driver's.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(run_one, **arguments).result()


def _tables_equal(results: list[dict[str, Any]]) -> bool | None:
    hashed = [r["table_hashes"] for r in results if r.get("table_hashes")]
    return all(h == hashed[0] for h in hashed) if hashed else None


def _medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    def median_of(read: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for v in map(read, results) if v is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        "runs": len(results),
        "landing_wall_s": median_of(lambda r: r["landing"]["wall_s"]),
        "refine_wall_s": median_of(lambda r: r["refine"]["wall_s"]),
        "pipeline_wall_s": median_of(lambda r: r["landing"]["wall_s"] + r["refine"]["wall_s"]),
        "client_cpu_s": median_of(lambda r: r["landing"]["cpu_s"] + r["refine"]["cpu_s"]),
        "engine_server_cpu_s": median_of(lambda r: _sum_or_none(r.get("engine_server_cpu_s"))),
        "driver_peak_rss_bytes": median_of(lambda r: r["peak_rss_bytes"]),
        "engine_server_peak_rss_bytes": median_of(lambda r: r.get("engine_server_peak_rss_bytes")),
        "s3_server_cpu_s": median_of(lambda r: _sum_or_none(r.get("s3_server_cpu_s"))),
        # All three processes' CPU: on a busy machine the walls vary with the other work, this much less.
        "all_cpu_s": median_of(
            lambda r: r["landing"]["cpu_s"] + r["refine"]["cpu_s"] + (_sum_or_none(r.get("engine_server_cpu_s")) or 0)
            + (_sum_or_none(r.get("s3_server_cpu_s")) or 0)
        ),
    }


def _sum_or_none(figures: Mapping[str, float] | None) -> float | None:
    return round(sum(figures.values()), 3) if figures else None
