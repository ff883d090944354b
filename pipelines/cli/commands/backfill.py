"""`lakehouse backfill`: land DataHub's whole history from its database (`ingest.backfill`)."""

from __future__ import annotations

import typer

from pipelines.cli.console import console, print_json_lines


def register(app: typer.Typer) -> None:
    """Add `backfill` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("backfill")
    def backfill_command(
        ctx: typer.Context,
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    ) -> None:
        """Land every version of DataHub's metadata_aspect_v2 table into bronze, window by window; resumes after the last window landed."""
        from pipelines.batch.backfill import run_backfill
        from pipelines.batch.backfill.reader import read_password

        state = state_of(ctx)
        read_password(state.settings.ingest.backfill)  # a missing password stops here, before the engine starts

        def on_window(report, rows: int) -> None:
            if not as_json:
                totals = report.totals
                console.print(
                    f"window {report.batch_id}: {totals['records_read']} versions, {totals['records_landed']} landed, "
                    f"{totals['records_quarantined']} quarantined ({rows} so far)",
                    highlight=False,
                )

        with state.locked_session("lakehouse backfill", wait) as spark:
            report = run_backfill(spark, state.settings, on_window=on_window)
        if as_json:
            print_json_lines([report.as_dict()])
            return
        totals = report.totals
        resumed = "" if report.resumed_after_us is None else f", resumed after createdon {report.resumed_after_us} µs"
        console.print(
            f"backfill from {report.source}{resumed}: {len(report.windows)} windows, {totals['records_read']} versions = "
            f"{totals['records_landed']} landed + {totals['records_quarantined']} quarantined + "
            f"{totals['duplicates_skipped']} duplicates, in {report.seconds:.1f} s; `lakehouse refine` (or `run`) derives "
            "their change events",
            highlight=False,
        )
