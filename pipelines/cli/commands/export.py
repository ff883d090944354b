"""`lakehouse export events`: write change events as JSON lines in a public format."""

from __future__ import annotations

from pathlib import Path

import typer

from conf.errors import InputError
from conf.values import parse_json_object, parse_time_ms
from pipelines.cli.console import console

FORMATS = ("ece-jsonl", "openmetadata-jsonl")


def register(app: typer.Typer) -> None:
    """Add the `export` group with `export events`."""
    from pipelines.cli.app import state_of

    export_app = typer.Typer(help="Export change events.", no_args_is_help=True)
    app.add_typer(export_app, name="export")

    @export_app.command("events")
    def export_events(
        ctx: typer.Context,
        fmt: str = typer.Option(..., "--format", "-f", help="ece-jsonl (DataHub ECE V1) or openmetadata-jsonl."),
        out: Path = typer.Option(..., "--out", "-o", help="The JSON-lines file to write."),
        since: str | None = typer.Option(None, "--since", help="Events at or after this time (epoch ms or ISO)."),
        until: str | None = typer.Option(None, "--until", help="Events before this time (epoch ms or ISO)."),
        event_filter: str | None = typer.Option(
            None, "--filter", help='openmetadata-jsonl only: eventFilter JSON, e.g. {"eventType":"entityUpdated"}.'
        ),
    ) -> None:
        """Write one change event per line to OUT."""
        if fmt not in FORMATS:
            raise InputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
        since_ms = parse_time_ms(since, "--since") if since is not None else None
        until_ms = parse_time_ms(until, "--until") if until is not None else None
        if since_ms is not None and until_ms is not None and since_ms > until_ms:
            raise InputError(f"--since: {since!r} is after --until {until!r}")
        state = state_of(ctx)
        with state.session() as spark:
            if fmt == "ece-jsonl":
                if event_filter:
                    raise InputError("--filter: only openmetadata-jsonl takes an eventFilter")
                from pipelines.batch.export_ece import write_ece_jsonl

                count = write_ece_jsonl(spark, state.settings, out, since_ms=since_ms, until_ms=until_ms)
            else:
                from pipelines.batch.export_openmetadata import write_openmetadata_jsonl

                filter_object = parse_json_object(event_filter, "--filter") if event_filter else None
                count = write_openmetadata_jsonl(
                    spark, state.settings, out, since_ms=since_ms, until_ms=until_ms, event_filter=filter_object
                )
        console.print(f"wrote {count} events to {out}")
