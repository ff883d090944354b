"""`lakehouse status`: the run in progress (its stage and step, and for how long), the last pipeline run, whether a watcher runs on the home, its last micro-batch, the
freshness lag and the Kafka partitions' lag."""

from __future__ import annotations

import json
import time

import typer

from pipelines.cli.console import format_duration, print_table, print_text


def register(app: typer.Typer) -> None:
    """Add `status`."""
    from pipelines.cli.app import state_of

    @app.command("status")
    def status_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print the status as one JSON object (as /health does)."),
    ) -> None:
        """Show the last pipeline run, the watcher (last micro-batch, lag) and Kafka partitions' lag.

        A run in progress shows its stage and step and how long each has run: a step whose time keeps
        growing is a query that does not come back.
        The watcher of this home: running or not, its last micro-batch, the oldest unprocessed file and the
        freshness lag; with a Kafka source, each partition's committed offset, end offset and lag.
        """
        from pipelines.runtime.watch_status import watch_status
        from pipelines.runtime.lock import run_in_progress
        from pipelines.runtime.tracking import recent_runs

        settings = state_of(ctx).settings
        status = watch_status(settings)
        status["run"] = run_in_progress(settings)
        runs = recent_runs(settings, 1)
        status["last_run"] = last_run_status(runs[0]) if runs else None
        if settings.ingest.kafka.enabled:
            from pipelines.batch.kafka.status import kafka_status

            status["kafka"] = kafka_status(settings)
        from pipelines.bi.server import replica_configured, replica_status

        if replica_configured(settings):
            status["sql_server"] = replica_status(settings)
        if as_json:
            print_text(json.dumps(status, default=str, sort_keys=True) + "\n")
            return
        print_table(_running_rows(status["run"]), ["item", "value"], title="Running now")
        print_table(_last_run_rows(status["last_run"]), ["item", "value"], title="Last run")
        last = status["last_batch"] or {}
        oldest = status["oldest_unprocessed"] or {}
        rows = [
            {"item": "watcher", "value": f"running (pid {status['pid']} on {status['host']})" if status["running"] else "not running"},
            {"item": "started", "value": _when(status["started_at"])},
            {"item": "heartbeat", "value": _when(status["heartbeat_at"])},
            {"item": "micro-batches", "value": status["batches"]},
            {
                "item": "last batch",
                "value": (
                    f"{_when(last['finished_at'])}: {last['files']} files, {last['records']} records, "
                    f"{last['events']} events in {format_duration(last['total_seconds'])} (lag {format_duration(last['lag_seconds'])})"
                    if last
                    else "-"
                ),
            },
            {"item": "pending files", "value": status["pending_files"]},
            {"item": "oldest unprocessed", "value": f"{oldest['path']} ({_when(oldest['arrived_at'])})" if oldest else "-"},
            {
                "item": "freshness lag",
                "value": "-" if status["freshness_lag_seconds"] is None else format_duration(status["freshness_lag_seconds"]),
            },
        ]
        print_table(rows, ["item", "value"], title="Watch status")
        kafka = status.get("kafka")
        if kafka:
            if kafka["error"]:
                print_text(f"Kafka: {kafka['error']}\n")
            if kafka["missing_topics"]:
                print_text(f"Kafka topics not on the broker: {', '.join(kafka['missing_topics'])}\n")
            print_table(kafka["partitions"], ["topic", "partition", "committed", "end", "lag"], title="Kafka partitions")
        replica = status.get("sql_server")
        if replica:
            if replica["error"]:
                print_text(f"SQL server replica: {replica['error']}\n")
            print_table(replica["tables"], ["table", "delta_version", "replica_version", "versions_behind", "lag_seconds"],
                        title="SQL server replica")  # fmt: skip


def last_run_status(run: dict) -> dict:
    """The newest MLflow run of the home as status shows it: id, name, state, end time and what it did."""
    metrics = run["metrics"]
    return {
        "run_id": run["run_id"],
        "name": run["name"],
        "status": run["status"],
        "finished_at": None if run["end_time"] is None else run["end_time"] / 1000,
        "seconds": metrics.get("duration_s"),
        "records": int(metrics.get("land.records_landed", 0)),
        "quarantined": int(metrics.get("land.records_quarantined", 0)),
        "change_events": int(metrics.get("refine.rows_out", 0)),
        "audit_events": int(metrics.get("publish_audit.rows_out", 0)),
    }


def _last_run_rows(run: dict | None) -> list[dict]:
    if run is None:
        return [{"item": "run", "value": "none yet (lakehouse run)"}]
    return [
        {"item": "run", "value": f"{run['name']} {run['run_id']}"},
        {"item": "status", "value": run["status"]},
        {"item": "finished", "value": _when(run["finished_at"])},
        {
            "item": "did",
            "value": f"{run['records']} records ({run['quarantined']} quarantined), {run['change_events']} change events, "
            f"{run['audit_events']} audit events"
            + ("" if run["seconds"] is None else f" in {format_duration(run['seconds'])}"),
        },
    ]


def _running_rows(run: dict | None) -> list[dict]:
    if run is None:
        return [{"item": "run", "value": "none (no run holds the lock)"}]
    renewed = f"lease renewed {_when(run['renewed_at'])}" + (" (stale: the holder is gone or cannot reach the home)" if run["stale"] else "")
    return [
        {"item": "run", "value": f"{run['owner']} (pid {run['pid']} on {run['host']}), for {_duration(run['seconds'])}; {renewed}"},
        {"item": "stage", "value": "-" if run["stage"] is None else f"{run['stage']} for {_duration(run['stage_seconds'])}"},
        {"item": "step", "value": "-" if run["step"] is None else f"{run['step']} for {_duration(run['step_seconds'])}"},
    ]


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)) if epoch else "-"
