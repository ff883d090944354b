"""What the cluster runner sends its workers: the task definitions a `sail spark server` logs at debug level.

In local-cluster (and Kubernetes) mode the driver sends each worker a `RunTaskBatchRequest` per stage: the
stage's serialized plan (`definition`) and the partitions to run. With RUST_LOG naming TASK_LOG_FILTER the
worker logs each request with the plan's size in bytes; a plan that carries rows or key lists from the
driver shows there as a size that grows with the input. The log is read between offsets taken at step
boundaries, so each step's requests are counted apart.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# The worker's request log (debug) on top of errors only.
TASK_LOG_FILTER = "error,sail_execution::worker::server=debug"

_REQUEST = re.compile(
    r"RunTaskBatchRequest \{ job_id: (?P<job>\d+), stage: (?P<stage>\d+), tasks: \[(?P<tasks>[^\]]*)\], "
    r"definition: \[[^\]]*\((?P<bytes>\d+) bytes?\)\]"
)


def log_offset(path: Path) -> int:
    """The log's size now: where the next step's requests start (0 before the server wrote anything)."""
    return path.stat().st_size if path.exists() else 0


def task_definition_figures(path: Path, start: int = 0, end: int | None = None) -> dict[str, Any]:
    """The task requests a server logged between two offsets of its log, summed.

    Args:
        path: the server's log, written with RUST_LOG=TASK_LOG_FILTER.
        start: the offset the step began at (`log_offset`).
        end: the offset it ended at; None reads to the end.

    Returns:
        `requests` (one per stage and worker), `tasks` (partitions run), `max_bytes` (the largest plan
        sent) with the `largest` request's job and stage, and `total_bytes` of all plans sent.
    """
    with path.open("rb") as log:
        log.seek(start)
        text = log.read(None if end is None else max(end - start, 0)).decode("utf-8", "replace")
    requests = list(_REQUEST.finditer(text))
    largest = max(requests, key=lambda m: int(m["bytes"]), default=None)
    return {
        "requests": len(requests),
        "tasks": sum(m["tasks"].count("TaskAttempt") for m in requests),
        "max_bytes": int(largest["bytes"]) if largest else 0,
        "total_bytes": sum(int(m["bytes"]) for m in requests),
        "largest": {"job_id": int(largest["job"]), "stage": int(largest["stage"])} if largest else None,
    }
