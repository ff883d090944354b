"""Catalog commands: list tables, run SQL, maintain tables."""

from __future__ import annotations

import typer

from conf.errors import InputError
from conf.tables import TABLES, table_location, table_name
from pipelines.cli.console import CSV_HELP, console, print_rows, print_table


def register(app: typer.Typer) -> None:
    """Add `tables`, `sql` and `maintain` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("tables")
    def tables_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List every table with its row count, Delta version and location."""
        state = state_of(ctx)
        with state.session() as spark:
            from pipelines.runtime.maintenance import maintenance_for

            maintenance = maintenance_for(state.settings, spark)
            rows = [
                {
                    "table": table_name(state.settings, key),
                    "rows": spark.table(table_name(state.settings, key)).count(),
                    "version": maintenance.version(key),
                    "location": str(table_location(state.settings, key)),
                }
                for key in TABLES
            ]
        print_rows(rows, ["table", "rows", "version", "location"], title=f"Tables in {state.settings.home}",
                   as_json=as_json, as_csv=as_csv)  # fmt: skip

    @app.command("sql")
    def sql_command(
        ctx: typer.Context,
        query: str = typer.Argument(..., help="Spark SQL to run against the registered tables and views."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
        limit: int = typer.Option(1000, "--limit", min=1, help="Print at most this many rows."),
    ) -> None:
        """Run Spark SQL against the registered tables and print the result."""
        state = state_of(ctx)
        with state.session() as spark:
            result_df = spark.sql(query)
            columns = result_df.columns
            rows = [row.asDict(recursive=True) for row in result_df.limit(limit).collect()]
        print_rows(rows, columns, as_json=as_json, as_csv=as_csv)

    @app.command("maintain")
    def maintain_command(
        ctx: typer.Context,
        table: list[str] = typer.Option(
            None, "--table", "-t", help="Table key (layer.name); repeat for several. Default: every table."
        ),
        optimize: bool = typer.Option(False, "--optimize", help="Compact small files."),
        vacuum: bool = typer.Option(False, "--vacuum", help="Delete unreferenced files older than the retention."),
        retention_hours: int | None = typer.Option(None, "--retention-hours", help="Override retention.vacuum_hours."),
        history: bool = typer.Option(False, "--history", help="Print each table's recent commits."),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Compact, vacuum or show the history of tables."""
        state = state_of(ctx)
        keys = list(table) if table else list(TABLES)
        unknown = [k for k in keys if k not in TABLES]
        if unknown:
            raise InputError(f"--table: unknown table(s) {unknown} (known: {', '.join(TABLES)})")
        if not (optimize or vacuum or history):
            raise InputError("maintain: choose at least one of --optimize, --vacuum, --history")
        # Compaction and vacuum rewrite tables: one run at a time, as for the pipeline stages.
        opened = state.locked_session("lakehouse maintain", wait) if optimize or vacuum else state.session()
        with opened as spark:
            from pipelines.batch.state_store import STATE_TABLE, fold_state_log
            from pipelines.runtime.maintenance import maintenance_for

            maintenance = maintenance_for(state.settings, spark)
            for key in keys:
                if optimize:
                    if key == STATE_TABLE:
                        console.print(f"{key}: folded {fold_state_log(spark, state.settings)} logged rows")
                    metrics = maintenance.optimize(key)
                    console.print(f"{key}: optimized ({metrics.get('numFilesRemoved', 0)} files compacted)")
                if vacuum:
                    removed = maintenance.vacuum(key, retention_hours)
                    console.print(f"{key}: vacuumed {len(removed)} files")
                if history:
                    commits = maintenance.history(key, limit=10)
                    print_table(
                        [c.__dict__ for c in commits], ["version", "timestamp_ms", "operation"], title=f"{key} history"
                    )
