"""`lakehouse publish-openmetadata`: project refined batches onto OpenMetadata ChangeEvents."""

from __future__ import annotations

import typer

from pipelines.cli.console import console, print_table


def register(app: typer.Typer) -> None:
    """Add `publish-openmetadata` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("publish-openmetadata")
    def publish_openmetadata_command(
        ctx: typer.Context,
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Publish the OpenMetadata ChangeEvents of every batch refined and not yet published."""
        from pipelines.batch.publish_openmetadata import publish_openmetadata

        state = state_of(ctx)
        with state.locked_session("lakehouse publish-openmetadata", wait) as spark:
            result = publish_openmetadata(spark, state.settings)
        if not result.batch_ids:
            console.print("publish_openmetadata: no refined batch is waiting")
            return
        console.print(
            f"publish_openmetadata: {result.rows_in} silver events -> {result.rows_out} ChangeEvents "
            f"from {len(result.batch_ids)} batch(es)"
        )
        print_table([{"batch_id": b} for b in result.batch_ids], ["batch_id"])
