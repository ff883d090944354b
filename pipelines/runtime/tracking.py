"""MLflow run tracking for pipeline runs and jobs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from conf.settings import Settings


class RunTracker:
    """Collects a run's parameters, metrics and summary and sends them to MLflow (when enabled)."""

    def __init__(self, run_id: str, enabled: bool = True):
        self.run_id = run_id
        self.enabled = enabled
        self.summary: dict[str, Any] = {}

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record run parameters (values shown as text)."""
        if self.enabled:
            import mlflow

            mlflow.log_params({k: _short(v) for k, v in params.items()})
        self.summary.setdefault("params", {}).update(params)

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        """Record numeric metrics."""
        clean = {_metric_name(k): float(v) for k, v in metrics.items() if v is not None}
        if self.enabled:
            import mlflow

            mlflow.log_metrics(clean)
        self.summary.setdefault("metrics", {}).update(clean)


@contextlib.contextmanager
def tracked_run(settings: Settings, run_name: str, tags: Mapping[str, str] | None = None) -> Iterator[RunTracker]:
    """Run the block as an MLflow run; its summary is stored as the `summary.json` artifact.

    Args:
        settings: names the tracking URI (default: a local store under the lakehouse home) and experiment.
        run_name: e.g. `run`, `job-refine`.
        tags: extra MLflow tags.

    Yields:
        The tracker; the MLflow run ends FAILED when the block raises. With `mlflow.enabled: false` the
        tracker only collects the summary, under a fresh run id.
    """
    if not settings.mlflow.enabled:
        yield RunTracker(uuid.uuid4().hex, enabled=False)
        return
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(settings.mlflow_tracking_uri)
    if settings.mlflow_local_store is not None:
        # A local store keeps its artifacts beside it under home, not in the working directory.
        store = settings.mlflow_local_store.parent
        store.mkdir(parents=True, exist_ok=True)
        if mlflow.get_experiment_by_name(settings.mlflow.experiment) is None:
            mlflow.create_experiment(settings.mlflow.experiment, artifact_location=(store / "artifacts").as_uri())
    mlflow.set_experiment(settings.mlflow.experiment)
    with mlflow.start_run(run_name=run_name, tags=dict(tags or {})) as active:
        tracker = RunTracker(active.info.run_id)
        try:
            yield tracker
        finally:
            mlflow.log_dict(json.loads(json.dumps(tracker.summary, default=str)), "summary.json")


def recent_runs(settings: Settings, limit: int = 20) -> list[dict[str, Any]]:
    """Return the latest runs of the experiment, newest first, with their parameters and metrics.

    A home whose local store was never written has no runs: that is answered without opening the
    store, which would create and migrate it (about 3 CPU-seconds, and a write from a reading command).
    """
    if settings.mlflow_local_store is not None and not settings.mlflow_local_store.exists():
        return []
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(settings.mlflow_tracking_uri)
    experiment = mlflow.get_experiment_by_name(settings.mlflow.experiment)
    if experiment is None:
        return []
    runs = mlflow.search_runs(
        experiment_ids=[experiment.experiment_id], max_results=limit, order_by=["start_time DESC"], output_format="list"
    )
    return [
        {
            "run_id": r.info.run_id,
            "name": r.info.run_name,
            "status": r.info.status,
            "start_time": r.info.start_time,
            "end_time": r.info.end_time,
            "params": dict(r.data.params),
            "metrics": dict(r.data.metrics),
        }
        for r in runs
    ]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:500]


def _metric_name(name: str) -> str:
    # MLflow metric names allow letters, digits, _ - . / and spaces.
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)
