"""Silver commands: `refine`, `as-of`, `history` and `replay`."""

from __future__ import annotations

import json

import typer

from conf.values import parse_time_ms
from pipelines.cli.console import CSV_HELP, console, iso_utc, print_rows, print_table

HISTORY_COLUMNS = ("event_time", "category", "operation", "entity_urn", "modifier", "parameters", "actor", "aspect_name")


def register(app: typer.Typer) -> None:
    """Add `refine`, `as-of`, `history` and `replay` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("refine")
    def refine_command(
        ctx: typer.Context,
        max_batches: int | None = typer.Option(None, "--max-batches", min=1, help="Refine at most this many batches."),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Turn the committed bronze batches not refined yet into change events and aspect state."""
        from pipelines.batch.refine import refine

        state = state_of(ctx)
        with state.locked_session("lakehouse refine", wait) as spark:
            result = refine(spark, state.settings, max_batches=max_batches)
        console.print(
            f"refined {len(result.batch_ids)} batch(es): {result.rows_in} snapshots in, {result.rows_out} events out, "
            f"{int(result.metrics.get('skipped', 0))} skipped (late or duplicate)"
        )

    @app.command("as-of")
    def as_of_command(
        ctx: typer.Context,
        urn: str = typer.Argument(..., help="The entity urn."),
        timestamp: str = typer.Argument(..., help="The moment: epoch ms or ISO-8601 (UTC when no zone)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """Print every aspect of URN as it was at TIMESTAMP (newest snapshot created at or before it)."""
        from pipelines.batch.timeline import aspects_as_of

        at_ms = parse_time_ms(timestamp, "TIMESTAMP")
        state = state_of(ctx)
        with state.session() as spark:
            aspects = aspects_as_of(spark, state.settings, urn, at_ms)
        if not aspects and not (as_json or as_csv):
            console.print(f"{urn} had no aspects at {iso_utc(at_ms)}", highlight=False)
            return
        rows = [{**a, "aspect": "(deleted)" if a["deleted"] else json.dumps(a["aspect"], sort_keys=True)} for a in aspects]
        columns = ["aspect_name", "version", "change_type", "created_time", "created_actor", "aspect"]
        print_rows(rows, columns, title=f"{urn} at {iso_utc(at_ms)}", as_json=as_json, as_csv=as_csv, json_rows=aspects,
                   time_columns=("created_time",))  # fmt: skip

    @app.command("history")
    def history_command(
        ctx: typer.Context,
        urn: str = typer.Argument(..., help="The entity urn (a dataset's history includes its schema fields)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines (every column) instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List the change events of URN, oldest first."""
        from pipelines.batch.timeline import entity_history

        state = state_of(ctx)
        with state.session() as spark:
            events = entity_history(spark, state.settings, urn)
        print_rows(events, HISTORY_COLUMNS, title=f"Change events of {urn} ({len(events)})", as_json=as_json, as_csv=as_csv,
                   time_columns=("event_time",))  # fmt: skip

    @app.command("replay")
    def replay_command(
        ctx: typer.Context,
        since: str = typer.Option(..., "--from", help="Window start (epoch ms or ISO-8601), included."),
        until: str = typer.Option(..., "--to", help="Window end (epoch ms or ISO-8601), excluded."),
    ) -> None:
        """Recompute the events of a window from bronze and check silver holds exactly them (exit 1 if not)."""
        from pipelines.batch.timeline import replay_window

        since_ms, until_ms = parse_time_ms(since, "--from"), parse_time_ms(until, "--to")
        state = state_of(ctx)
        with state.session() as spark:
            result = replay_window(spark, state.settings, since_ms, until_ms)
        console.print(
            f"window [{iso_utc(since_ms)}, {iso_utc(until_ms)}): {result.recomputed} events recomputed from bronze, "
            f"{result.stored} in silver",
            highlight=False,
        )
        if result.equal:
            console.print("equal: silver holds exactly the recomputed events")
            return
        columns = ["event_time", "category", "operation", "entity_urn", "modifier", "parameters_json", "event_id"]
        if result.missing:
            print_table(result.missing, columns, title="Recomputed but missing from silver", time_columns=("event_time",))
        if result.unexpected:
            print_table(result.unexpected, columns, title="In silver but not recomputed", time_columns=("event_time",))
        raise typer.Exit(1)
