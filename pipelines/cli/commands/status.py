"""`lakehouse status`: whether a watcher runs on the home, its last micro-batch, the freshness lag and the
Kafka partitions' lag."""

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
        """Show the watcher of this home (running or not, last micro-batch, oldest unprocessed file, lag) and,
        with a Kafka source, each partition's committed offset, end offset and lag."""
        from pipelines.batch.watch_status import watch_status

        settings = state_of(ctx).settings
        status = watch_status(settings)
        if settings.ingest.kafka.enabled:
            from pipelines.batch.kafka.status import kafka_status

            status["kafka"] = kafka_status(settings)
        from pipelines.bi.server import replica_configured, replica_status

        if replica_configured(settings):
            status["sql_server"] = replica_status(settings)
        if as_json:
            print_text(json.dumps(status, default=str, sort_keys=True) + "\n")
            return
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


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)) if epoch else "-"
