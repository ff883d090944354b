"""Audit commands: `serve`, `search`, `publish-audit`; tokens are in `commands.tokens`."""

from __future__ import annotations

import json
import sys

import typer

from conf.errors import RequestError
from conf.values import parse_time_ms
from pipelines.cli.console import CSV_HELP, console, error_console, print_rows


def register(app: typer.Typer) -> None:
    """Add the audit commands to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("serve")
    def serve_command(
        ctx: typer.Context,
        host: str | None = typer.Option(None, "--host", help="Interface to listen on (default api.host, 127.0.0.1)."),
        port: int | None = typer.Option(None, "--port", help="TCP port (default api.port, 8080)."),
        tls_cert: str | None = typer.Option(
            None, "--tls-cert", help="PEM certificate chain: serve HTTPS, with HSTS (default serve.tls_cert_file)."
        ),
        tls_key: str | None = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert (default serve.tls_key_file)."),
    ) -> None:
        """Serve the Audit Events Search API (POST /openapi/v1/events/audit/search) over HTTP or HTTPS."""
        from pipelines.serving.api import serve

        state = state_of(ctx)

        def announce(url: str) -> None:
            error_console.print(f"ready: serving audit search on {url}", highlight=False)

        serve(state.settings, host, port, tls_cert, tls_key, on_ready=announce)

    @app.command("search")
    def search_command(
        ctx: typer.Context,
        start_time: str | None = typer.Option(None, "--start-time", help="Window start, epoch ms or ISO (default: end - 1 day)."),
        end_time: str | None = typer.Option(None, "--end-time", help="Window end (exclusive), epoch ms or ISO (default: now)."),
        size: int = typer.Option(10, "--size", help="Page size, 1..10000."),
        scroll_id: str | None = typer.Option(None, "--scroll-id", help="The nextScrollId of the previous page."),
        no_raw: bool = typer.Option(False, "--no-raw", help="Leave out rawUsageEvent."),
        body: str | None = typer.Option(
            None, "--body", help='Filters as the API body, e.g. {"actorUrns": ["urn:li:corpuser:jdoe"]}.'
        ),
    ) -> None:
        """Search audit events and print the API's JSON response."""
        from gold.search_request import SearchRequest
        from pipelines.serving.engine import open_engine

        params = {
            "startTime": parse_time_ms(start_time, "--start-time") if start_time else None,
            "endTime": parse_time_ms(end_time, "--end-time") if end_time else None,
            "size": size,
            "scrollId": scroll_id,
            "includeRaw": not no_raw,
        }
        decoded = None
        if body is not None:
            try:
                decoded = json.loads(body)
            except ValueError as exc:
                raise RequestError(f"--body: not valid JSON ({exc})") from None
        state = state_of(ctx)
        from pipelines.serving.scroll_key import local_signer

        signer = local_signer(state.settings)
        from pipelines.privacy.display import pseudonymous_body, with_identities

        decoded = pseudonymous_body(state.settings, decoded)
        request = SearchRequest.parse(params, decoded, max_size=state.settings.serve.max_size, signer=signer)
        if state.settings.serve.engine == "spark":
            with state.session() as spark:
                result = open_engine(state.settings, spark).search(request)
        else:
            # The in-process engine reads gold Delta directly: no Spark session to start.
            result = open_engine(state.settings).search(request)
        # The CLI runs with the home's key store: its user may see identities.
        result = with_identities(state.settings, result)
        sys.stdout.write(json.dumps(result) + "\n")
        if start_time is None and result.get("total") == 0:
            # The default window is DataHub's (the last day): say so when it is why nothing matched.
            error_console.print(
                "no events in the default window, the day before --end-time (default now); "
                "--start-time widens it, e.g. --start-time 2023-01-01",
                highlight=False,
            )

    @app.command("publish-audit")
    def publish_audit_command(
        ctx: typer.Context,
        optimize: bool = typer.Option(False, "--optimize", help="Then compact gold.audit_events (each day sorted by time, small row groups)."),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Publish refined batches to gold.audit_events and gold.actor_activity_daily."""
        from pipelines.batch.publish_audit import optimize_audit_events, publish_audit

        state = state_of(ctx)
        with state.locked_session("lakehouse publish-audit", wait) as spark:
            result = publish_audit(spark, state.settings)
            console.print(
                f"publish_audit: {len(result.batch_ids)} batches, {result.rows_in} rows in, "
                f"{result.rows_out} audit rows, {int(result.metrics.get('days_refreshed', 0))} activity days refreshed"
            )
            if optimize:
                metrics = optimize_audit_events(spark, state.settings)
                console.print(f"gold.audit_events: optimized ({metrics.get('numFilesRemoved', 0)} files rewritten)")
