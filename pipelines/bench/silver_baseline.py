"""`lakehouse bench silver --baseline`: the one-process Python baseline on the same input, checked and compared.

The baseline (`pipelines.bench.baseline`) runs as a child process; its event ids must be the pipeline's,
and its wall time is reported over land + refine's (`baseline_ratio`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conf.errors import LakehouseError


class BaselineMismatch(LakehouseError):
    """The baseline and the pipeline derived different event ids from the same input."""



def _run_baseline(batch_dirs: list[Path], ids_path: Path) -> dict[str, Any]:
    """Run the baseline as a child process on the batches; its figures, with the ids written to `ids_path`."""
    command = [sys.executable, "-m", "pipelines.bench.baseline", *map(str, batch_dirs), "--ids-out", str(ids_path)]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).parents[2])
    # wait4 gives this child's own CPU time (its peak memory it reports itself).
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    output, errors = child.stdout.read(), child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise BaselineMismatch(f"baseline failed ({' '.join(command)}): {errors.decode(errors='replace')[-2000:]}")
    reported = json.loads(output)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        **{k: reported[k] for k in ("records", "skipped_lines", "pairs", "events", "read_parse_s", "peak_rss_bytes")},
    }



def compare_with_baseline(folder: Path, batch_dirs: list[Path], figures: dict[str, Any]) -> dict[str, Any]:
    """Run the baseline on the same input and check its event ids against the pipeline's.

    Raises:
        BaselineMismatch: naming how many ids each side lacks and the first few of them.
    """
    ids_path = folder / "baseline-event-ids.txt"
    baseline = _run_baseline(batch_dirs, ids_path)
    baseline_ids = set(ids_path.read_text().split())
    pipeline_ids: set[str] = figures["event_ids"]
    only_pipeline, only_baseline = sorted(pipeline_ids - baseline_ids), sorted(baseline_ids - pipeline_ids)
    if only_pipeline or only_baseline:
        raise BaselineMismatch(
            f"the baseline and the pipeline derived different event ids from {folder / 'input'}: "
            f"{len(only_pipeline)} only from the pipeline (first: {only_pipeline[:5]}), "
            f"{len(only_baseline)} only from the baseline (first: {only_baseline[:5]})"
        )
    pipeline_wall = round(figures["landing"].wall_s + figures["refine"].wall_s, 3)
    return {
        "baseline": baseline,
        "pipeline_wall_s": pipeline_wall,
        "pipeline_cpu_s": round(figures["landing"].cpu_s + figures["refine"].cpu_s, 3),
        "baseline_ratio": round(baseline["wall_s"] / pipeline_wall, 3) if pipeline_wall else None,
        "event_ids_match": True,
    }
