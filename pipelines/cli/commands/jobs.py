"""Job commands: `run`, `job land|refine|publish`, `runs`, `export-sql`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from conf.errors import InputError
from pipelines.cli.console import (
    CSV_HELP, console, format_duration, listing_title, print_rows, print_table, print_text, progress_bars,
)  # fmt: skip

if TYPE_CHECKING:  # the stages import the engine: imported when a command runs
    from pipelines.orchestration.jobs import RunSummary, StageReport

SQL_DIALECTS = ("databricks", "duckdb", "trino", "snowflake", "spark")


def register(app: typer.Typer) -> None:
    """Add `run`, `job`, `runs` and `export-sql`."""
    from pipelines.cli.app import state_of

    @app.command("run")
    def run_command(
        ctx: typer.Context,
        path: list[str] = typer.Option(
            None, "--path", help="File or folder to land (repeatable); default the configured landing folders."
        ),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
        watch: bool = typer.Option(
            False, "--watch", help="Keep running: micro-batches as files arrive in the landing folders (docs/watch.md)."
        ),
        metrics_port: int | None = typer.Option(
            None, "--metrics-port", help="With --watch: serve Prometheus metrics on api.host at this port (/metrics)."
        ),
    ) -> None:
        """Land new input files (and Kafka messages, when ingest.kafka is set) and run bronze -> silver -> gold."""
        state = state_of(ctx)
        if watch:
            from pipelines.orchestration.watch import watch as watch_loop

            if path:
                raise InputError("--path: cannot be combined with --watch, which watches ingest.landing_dirs")
            raise typer.Exit(watch_loop(state.settings, metrics_port))
        if metrics_port is not None:
            raise InputError("--metrics-port: only with --watch (a batch run ends before any scrape)")
        from pipelines.orchestration.jobs import JOB_STAGES

        summary = run_with_progress(state.settings, JOB_STAGES, path or None, wait, progress)
        print_summary(summary)

    job_app = typer.Typer(help="Run one pipeline stage (for schedulers).", no_args_is_help=True)
    app.add_typer(job_app, name="job")

    for stage, doc in (
        ("land", "Land new files from the landing folders into bronze."),
        ("refine", "Turn landed bronze batches into silver state and change events."),
        ("publish", "Publish refined batches to gold (audit events, activity, OpenMetadata events)."),
    ):
        _add_job_command(job_app, stage, doc)

    @app.command("runs")
    def runs_command(
        ctx: typer.Context,
        limit: int = typer.Option(10, "--limit", min=1, help="How many runs to list."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines (every parameter and metric)."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List recent pipeline runs (MLflow) with their key metrics."""
        from pipelines.runtime.tracking import recent_runs

        # One more than asked for tells whether there are more to name --limit for.
        runs = recent_runs(state_of(ctx).settings, limit + 1)
        more, runs = len(runs) > limit, runs[:limit]
        rows = [
            {
                "run_id": r["run_id"],
                "name": r["name"],
                "status": r["status"],
                "duration_s": r["metrics"].get("duration_s"),
                "landed": r["metrics"].get("land.records_landed"),
                "quarantined": r["metrics"].get("land.records_quarantined"),
                "events": sum(v for k, v in r["metrics"].items() if k.startswith("events.")),
                "audit_rows": r["metrics"].get("publish_audit.rows_out"),
            }
            for r in runs
        ]
        columns = ["run_id", "name", "status", "duration_s", "landed", "quarantined", "events", "audit_rows"]
        title = listing_title("Recent runs", len(rows), more, "--limit")
        print_rows(rows, columns, title=title, as_json=as_json, as_csv=as_csv, json_rows=runs)

    @app.command("export-sql")
    def export_sql_command(
        ctx: typer.Context,
        dialect: str = typer.Option(..., "--dialect", help=f"One of {', '.join(SQL_DIALECTS)}."),
        out: Path | None = typer.Option(None, "--out", help="Folder for one <view>.sql per view; default stdout."),
    ) -> None:
        """Write the gold view definitions transpiled to another SQL dialect."""
        from pipelines.runtime.views import create_view_sql, load_views

        if dialect not in SQL_DIALECTS:
            raise InputError(f"--dialect: {dialect!r} is not one of {', '.join(SQL_DIALECTS)}")
        settings = state_of(ctx).settings
        for view in load_views():
            statement = create_view_sql(settings, view, dialect=dialect) + ";\n"
            if out:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"{view.name}.sql").write_text(statement)
            else:
                print_text(statement)
        if out:
            console.print(f"wrote {len(load_views())} views to {out}")


def _add_job_command(job_app: typer.Typer, stage: str, doc: str) -> None:
    from pipelines.cli.app import state_of

    def command(
        ctx: typer.Context,
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    ) -> None:
        summary = run_with_progress(state_of(ctx).settings, (stage,), None, wait, progress)
        print_summary(summary)

    command.__doc__ = doc
    job_app.command(stage)(command)


def run_with_progress(settings, stages, paths, wait: float, show: bool) -> RunSummary:
    """Run `run_job` with a bar over the stages and one over the files being landed (when `show`)."""
    from pipelines.orchestration.jobs import run_job

    with progress_bars(show) as progress:
        stage_task = progress.add_task("stages", total=len(stages)) if progress else None
        state = {"file_task": None}

        def on_stage(stage: str) -> None:
            if progress:
                if state.get("started"):
                    progress.advance(stage_task)
                state["started"] = True
                progress.update(stage_task, description=f"stage: {stage}")

        def on_file(path: str, done: int, total: int) -> None:
            if progress:
                if state["file_task"] is None:
                    state["file_task"] = progress.add_task("landing", total=total)
                progress.update(state["file_task"], completed=done, total=total, description=f"landing {Path(path).name}")

        summary = run_job(
            settings, stages, paths=paths, wait_seconds=wait, on_stage=on_stage, land_progress=on_file if show else None
        )
        if progress:
            progress.update(stage_task, completed=len(stages), description="done")
    return summary


def print_summary(summary: RunSummary) -> None:
    """Print what each stage of a run did in words, the run's totals, the events it derived and its MLflow run id."""
    print_table(
        [{"stage": r.stage, "what it did": stage_sentence(r), "seconds": r.seconds} for r in summary.stages],
        ["stage", "what it did", "seconds"],
        title=f"Run {summary.run_id} ({format_duration(summary.seconds)})",
    )
    if summary.events_by_category:
        print_table(
            [{"category": k, "events": v} for k, v in summary.events_by_category.items()],
            ["category", "events"],
            title="Change events derived",
        )
    print_text(run_totals(summary))


def stage_sentence(report: StageReport) -> str:
    """What one stage did, in the words the documentation uses (records, change events, audit events)."""
    metric = report.metrics.get
    if report.stage == "land":
        files = int(metric("land.files_landed", 0))
        return (
            f"{report.rows_out} records landed from {files} file{'s' if files != 1 else ''} "
            f"({int(metric('land.records_quarantined', 0))} quarantined, "
            f"{int(metric('land.duplicates_skipped', 0))} duplicates skipped)"
        )
    if report.stage == "refine":
        return (
            f"{report.rows_out} change events from {report.rows_in} aspect snapshots "
            f"({int(metric('refine.skipped', 0))} skipped as late or duplicate)"
        )
    if report.stage == "publish":
        return (
            f"{int(metric('publish_audit.rows_out', 0))} audit events, "
            f"{int(metric('publish_openmetadata.rows_out', 0))} OpenMetadata change events "
            f"({int(metric('publish_audit.days_refreshed', 0))} activity days refreshed)"
        )
    return f"{report.rows_in} rows in, {report.rows_out} rows out"


def run_totals(summary: RunSummary) -> str:
    """The run in one line: `land -> refine -> publish: 374 records, 401 change events, 351 audit events`."""
    by_stage = {r.stage: r for r in summary.stages}
    counts = []
    if "land" in by_stage:
        counts.append(f"{by_stage['land'].rows_out} records")
    if "refine" in by_stage:
        counts.append(f"{by_stage['refine'].rows_out} change events")
    if "publish" in by_stage:
        counts.append(f"{int(by_stage['publish'].metrics.get('publish_audit.rows_out', 0))} audit events")
    return f"{' -> '.join(by_stage)}: {', '.join(counts)}"
