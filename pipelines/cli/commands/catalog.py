"""Catalog commands: list tables, run SQL (`describe` answered from the table registry), maintain tables."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import typer

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import LINEAGE_EDGES, TABLES, schema_name, table_location, table_name
from pipelines.cli.console import CSV_HELP, console, error_console, print_rows, print_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# `DESCRIBE [TABLE] [EXTENDED] name`: answered by the CLI for every table and view (Sail's own answer
# has no rows for a table registered by location and refuses the form without TABLE: docs/scaling.md).
DESCRIBE = re.compile(r"^\s*(?:describe|desc)\s+(?:table\s+)?(?:extended\s+)?([`\w.]+)\s*;?\s*$", re.IGNORECASE)
DESCRIBE_COLUMNS = ("column", "type", "partition")


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
        described = DESCRIBE.match(query)
        with state.session() as spark:
            if described:
                title, rows = describe_relation(spark, state.settings, described.group(1).replace("`", ""))
                print_rows(rows, DESCRIBE_COLUMNS, title=title, as_json=as_json, as_csv=as_csv)
                return
            result_df = spark.sql(query)
            columns = result_df.columns
            rows = [row.asDict(recursive=True) for row in result_df.limit(limit + 1).collect()]
        print_rows(rows[:limit], columns, as_json=as_json, as_csv=as_csv)
        if len(rows) > limit:
            # On standard error: --json and --csv output stays the rows alone.
            error_console.print(f"(the first {limit} rows; --limit N shows more)", highlight=False)

    @app.command("describe")
    def describe_command(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="A table or view, e.g. gold.audit_events or gold.change_timeline."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """Show a table's or view's columns, types, partitioning and what a row is (as `sql "describe NAME"`)."""
        state = state_of(ctx)
        with state.session() as spark:
            title, rows = describe_relation(spark, state.settings, name)
        print_rows(rows, DESCRIBE_COLUMNS, title=title, as_json=as_json, as_csv=as_csv)

    @app.command("maintain")
    def maintain_command(
        ctx: typer.Context,
        table: list[str] = typer.Option(
            None, "--table", "-t", help="Table key (layer.name); repeat for several. Default: every table."
        ),
        optimize: bool = typer.Option(False, "--optimize", help="Compact small files."),
        vacuum: bool = typer.Option(False, "--vacuum", help="Delete unreferenced files older than the retention."),
        retention_hours: int | None = typer.Option(None, "--retention-hours", help="Override retention.vacuum_hours (168 by default)."),
        history: bool = typer.Option(False, "--history", help="Print each table's recent commits."),
        retention: bool = typer.Option(False, "--retention", help="First delete the batches past retention (as `retention apply`)."),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Compact, vacuum or show the history of tables."""
        state = state_of(ctx)
        keys = list(table) if table else list(TABLES)
        unknown = [k for k in keys if k not in TABLES]
        if unknown:
            raise InputError(f"--table: unknown table(s) {unknown} (known: {', '.join(TABLES)})")
        if not (optimize or vacuum or history or retention):
            raise InputError("maintain: choose at least one of --optimize, --vacuum, --history, --retention")
        # Compaction and vacuum rewrite tables: one run at a time, as for the pipeline stages.
        opened = state.locked_session("lakehouse maintain", wait) if optimize or vacuum or retention else state.session()
        with opened as spark:
            if retention:
                from pipelines.cli.commands.retention import print_retention_report, run_retention

                print_retention_report(run_retention(spark, state.settings, retention_hours))
            from pipelines.runtime.state_store import STATE_TABLE, fold_state_log
            from pipelines.runtime.maintenance import maintenance_for

            maintenance = maintenance_for(state.settings, spark)
            for key in keys:
                if optimize:
                    if key == STATE_TABLE:
                        console.print(f"{key}: folded {fold_state_log(spark, state.settings)} logged rows")
                    if key == LINEAGE_EDGES:
                        from pipelines.batch.publish_lineage import compact_lineage_edges

                        folded = compact_lineage_edges(spark, state.settings, state.settings.home / "_scratch" / "maintain")
                        console.print(f"{key}: folded away {folded} superseded rows")
                    metrics = maintenance.optimize(key)
                    console.print(f"{key}: optimized ({metrics.get('numFilesRemoved', 0)} files compacted)")
                if vacuum:
                    removed = maintenance.vacuum(key, retention_hours)
                    console.print(f"{key}: vacuumed {len(removed)} files")
                if history:
                    commits = maintenance.history(key, limit=10)
                    print_table(
                        [c.__dict__ for c in commits], ["version", "timestamp_ms", "operation"], title=f"{key} history",
                        time_columns=("timestamp_ms",),
                    )


def describe_relation(spark: SparkSession, settings: Settings, name: str) -> tuple[str, list[dict[str, Any]]]:
    """The title (the name and the registry's description of a row) and the column rows of a table or a gold view.

    Raises:
        InputError: naming the table when it is neither a registered table nor a view.
    """
    from pipelines.runtime.views import load_views

    specs = {key: spec for key, spec in TABLES.items()}
    specs.update({table_name(settings, key): spec for key, spec in TABLES.items()})
    views = {view.name: view for view in load_views()}
    for view in load_views():
        views[f"gold.{view.name}"] = views[f"{schema_name(settings, 'gold')}.{view.name}"] = view
    spec, view = specs.get(name), views.get(name)
    if spec is None and view is None:
        known = ", ".join([*TABLES, *(f"gold.{v}" for v in sorted({v.name for v in views.values()}))])
        raise InputError(f"describe: {name!r} is neither a table nor a view (known: {known})")
    if spec is not None:
        schema_df = spark.table(table_name(settings, spec.key))
        title, partitions, about = f"{spec.key} (table)", spec.partitioned_by, spec.description
    else:
        schema_df = spark.table(f"{schema_name(settings, 'gold')}.{view.name}")
        comment = [line.lstrip("- ").strip() for line in view.select_sql.splitlines() if line.startswith("--")]
        title, partitions, about = f"gold.{view.name} (view)", (), " ".join(comment)
    rows = [
        {"column": field.name, "type": field.dataType.simpleString(), "partition": "yes" if field.name in partitions else ""}
        for field in schema_df.schema.fields
    ]
    return (f"{title}: {about}" if about else title), rows
