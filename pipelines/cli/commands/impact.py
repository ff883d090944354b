"""The `impact` command: what changed upstream (or downstream) of an entity, through lineage as it was then."""

from __future__ import annotations

import time

import typer

from conf.values import DAY_MS, parse_time_ms
from pipelines.cli.console import CSV_HELP, print_rows

IMPACT_COLUMNS = ("hop", "event_time", "entity_urn", "category", "operation", "actor", "path")


def register(app: typer.Typer) -> None:
    """Add `impact` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("impact")
    def impact_command(
        ctx: typer.Context,
        urn: str = typer.Argument(..., help="The entity urn (a dataset, chart, dashboard, job, ...)."),
        direction: str = typer.Option("upstream", "--direction", help="upstream (what feeds URN) or downstream."),
        depth: int = typer.Option(3, "--depth", help="The most hops through lineage (0 to 10; 0: URN's own changes)."),
        start_time: str | None = typer.Option(None, "--start-time", help="Window start (epoch ms or ISO-8601); default 7 days before the end."),
        end_time: str | None = typer.Option(None, "--end-time", help="Window end, excluded (epoch ms or ISO-8601); default now."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List the change events on entities connected to URN by lineage as it was when each happened."""
        from pipelines.batch.impact import impact_of

        end_ms = parse_time_ms(end_time, "--end-time") if end_time else int(time.time() * 1000)
        start_ms = parse_time_ms(start_time, "--start-time") if start_time else end_ms - 7 * DAY_MS
        state = state_of(ctx)
        with state.session() as spark:
            found = impact_of(spark, state.settings, urn, direction=direction, depth=depth, start_ms=start_ms, end_ms=end_ms)
        rows = [
            {
                "hop": r.hop,
                "event_time": r.event.event_time,
                "entity_urn": r.event.entity_urn,
                "category": r.event.category,
                "operation": r.event.operation,
                "actor": r.event.actor,
                "path": " <- ".join(r.path) if direction == "upstream" else " -> ".join(r.path),
                "event_id": r.event.event_id,
            }
            for r in found
        ]
        print_rows(rows, IMPACT_COLUMNS, title=f"Changes {direction} of {urn} ({len(rows)})", as_json=as_json,
                   as_csv=as_csv, time_columns=("event_time",))  # fmt: skip
