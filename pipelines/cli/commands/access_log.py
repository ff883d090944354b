"""Access log commands: `access-log search` (who read audit data) and `access-log prune` (retention)."""

from __future__ import annotations

import json
import sys
import time

import typer

from conf.tables import ACCESS_LOG
from conf.values import parse_time_ms
from pipelines.cli.console import console, listing_title, print_table, with_iso_times


def register(app: typer.Typer) -> None:
    """Add the `access-log` command group to the CLI."""
    from pipelines.cli.app import state_of

    access_app = typer.Typer(help="Who read audit data: the API's access log (ops.access_log).", no_args_is_help=True)
    app.add_typer(access_app, name="access-log")

    @access_app.command("search")
    def access_search(
        ctx: typer.Context,
        principal: str | None = typer.Option(None, "--principal", help="token:<id> or jwt:<issuer>#<subject>."),
        endpoint: str | None = typer.Option(None, "--endpoint", help="A request path, e.g. /openapi/v1/events/audit/search."),
        outcome: str | None = typer.Option(None, "--outcome", help="ok, redirect, refused, invalid, busy or error."),
        since: str | None = typer.Option(None, "--since", help="From this time (epoch ms or ISO-8601, UTC)."),
        until: str | None = typer.Option(None, "--until", help="Before this time."),
        size: int = typer.Option(100, "--size", help="The most records shown, newest first (1..1000)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    ) -> None:
        """Show the access records matching the filters, newest first (what GET /api/v1/access-log answers)."""
        from conf.tables import table_location
        from pipelines.serving.access import parse_access_query, read_access_log

        params = {"principal": principal, "endpoint": endpoint, "outcome": outcome, "size": str(size)}
        for name, value in (("since", since), ("until", until)):
            if value:
                params[name] = str(parse_time_ms(value, f"--{name}"))
        settings = state_of(ctx).settings
        records = read_access_log(table_location(settings, ACCESS_LOG), parse_access_query(
            {k: v for k, v in params.items() if v is not None}
        ))  # fmt: skip
        if as_json:
            sys.stdout.writelines(json.dumps(with_iso_times(r, ("accessedAt",)), sort_keys=True) + "\n" for r in records)
            return
        columns = ["accessedAt", "principal", "endpoint", "outcome", "status", "resultCount", "clientAddress", "filters"]
        # The API caps a page at `size`: a full page may have more behind it.
        title = listing_title("Access log", len(records), len(records) == size, "--size")
        print_table([{**r, "filters": json.dumps(r["filters"], sort_keys=True)} for r in records], columns, title=title,
                    time_columns=("accessedAt",))  # fmt: skip

    @access_app.command("prune")
    def access_prune(ctx: typer.Context) -> None:
        """Delete the access log batches older than access_log.retention_days (verify accepts them gone)."""
        from pipelines.batch.access_retention import prune_access_log

        state = state_of(ctx)
        with state.session() as spark:
            pruned = prune_access_log(spark, state.settings, int(time.time() * 1000))
        console.print(f"access log: {len(pruned)} batches older than {state.settings.access_log.retention_days} days deleted")
