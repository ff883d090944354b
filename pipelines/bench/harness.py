"""The benchmark harness: measure wall time, CPU and peak memory, and write JSON results."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conf.settings import Settings, load_settings


@dataclass
class Measurement:
    """Resources used by one measured block (filled in when the block ends)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_bytes: int = 0


@contextlib.contextmanager
def measure() -> Iterator[Measurement]:
    """Measure the block: wall seconds, CPU seconds of this process and its children, peak RSS.

    The embedded engine runs inside this process, so its CPU and memory are counted; JVM Spark runs
    as a child process and is counted once it has exited.
    """
    result = Measurement()
    start_wall = time.perf_counter()
    start_cpu = _cpu_seconds()
    try:
        yield result
    finally:
        result.wall_s = round(time.perf_counter() - start_wall, 3)
        result.cpu_s = round(_cpu_seconds() - start_cpu, 3)
        result.peak_rss_bytes = peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Return the highest resident set size of this process or any finished child, in bytes."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) * 1024  # Linux reports kilobytes


def reset_peak_rss() -> None:
    """Start this process's peak resident size (VmHWM) over from its current size (Linux; no-op elsewhere)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss_since_reset() -> int:
    """This process's peak resident size since `reset_peak_rss`, in bytes (the lifetime peak where unsupported)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return peak_rss_bytes()


def process_tree(pid: int) -> list[int]:
    """A process and its children, e.g. a server and its worker processes (Linux /proc; the process alone elsewhere)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return pids


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def percentile(values: list[float], pct: float) -> float:
    """Return the `pct` percentile (0..100) of `values` by nearest rank."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency_summary(values: list[float]) -> dict[str, float]:
    """p50, p95 and max of `values` (seconds), rounded to milliseconds."""
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3),
    }


def write_result(out_dir: Path, name: str, payload: Mapping[str, Any]) -> Path:
    """Write one benchmark result as JSON (with machine facts) and return its path.

    Args:
        out_dir: folder for results; created when missing.
        name: benchmark name, e.g. `silver`; the file is `<name>-<UTC timestamp>.json`.
        payload: the measured figures.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    document = {
        "benchmark": name,
        "measured_at": stamp,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        **{k: (asdict(v) if isinstance(v, Measurement) else v) for k, v in payload.items()},
    }
    path = out_dir / f"{name}-{stamp}.json"
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path


def bench_settings(home: Path | None, *overrides: str) -> Settings:
    """Local settings for a measured home, without model tracking (it adds work no benchmark measures).

    Args:
        home: the home; None for settings that name no table (the default home, never created).
        overrides: `dotted.key=value` settings of the benchmark, applied last.
    """
    return load_settings("local", home, None, env={}, overrides=("mlflow.enabled=false", *overrides))
