"""`lakehouse land` and `lakehouse quarantine`: land input files into bronze, list what was quarantined."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from bronze.formats import KINDS, check_kind
from pipelines.cli.console import CSV_HELP, console, print_json_lines, print_rows, print_table, progress_bars

_SUMMARY_COLUMNS = ("file", "kind", "read", "landed", "quarantined", "duplicates", "skipped")
_QUARANTINE_COLUMNS = ("batch_id", "source_file", "line_number", "kind", "reason", "raw_text")
_SHOWN_RAW_CHARS = 80


def register(app: typer.Typer) -> None:
    """Add `land` and `quarantine` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("land")
    def land_command(
        ctx: typer.Context,
        paths: list[str] = typer.Argument(
            ..., help="Files or folders to land (folders are walked recursively), or object-storage URLs (s3://bucket/prefix)."
        ),
        kind: str | None = typer.Option(
            None, "--kind", help=f"Force the kind of every file ({', '.join(KINDS)}); default: detect per file."
        ),
        batch_id: str | None = typer.Option(None, "--batch-id", help="The batch id (default: a new one)."),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar per file."),
        as_json: bool = typer.Option(False, "--json", help="Print the landing report as one JSON object."),
    ) -> None:
        """Land DataHub MCL/MCP/file-sink files and usage events into bronze, as one batch."""
        from pipelines.batch.landing import LANDED, land_paths

        check_kind(kind, "--kind")
        state = state_of(ctx)
        with state.locked_session("lakehouse land", wait) as spark, _file_progress(progress and not as_json) as on_file:
            report = land_paths(spark, state.settings, paths, kind=kind, batch_id=batch_id, progress=on_file)
        if as_json:
            print_json_lines([report.as_dict()])
            return
        rows = [
            {
                "file": f.path,
                "kind": f.kind or "?",
                "read": f.records_read,
                "landed": f.records_landed,
                "quarantined": f.records_quarantined,
                "duplicates": f.duplicates_skipped,
                "skipped": "" if f.status == LANDED else f"{f.status}: {f.note}",
            }
            for f in report.files
        ]
        print_table(rows, _SUMMARY_COLUMNS, title=f"Landing batch {report.batch_id}")
        if report.discarded_batches:
            console.print(f"removed the rows of unfinished batches: {', '.join(report.discarded_batches)}")
        if report.committed:
            console.print(report.reconciliation(), highlight=False)
        else:
            console.print("nothing new to land: no batch committed", highlight=False)

    @app.command("quarantine")
    def quarantine_command(
        ctx: typer.Context,
        batch: str | None = typer.Option(None, "--batch", help="Only this batch's records."),
        limit: int = typer.Option(50, "--limit", min=1, help="List at most this many records."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines (full raw text) instead of a table."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List quarantined input records with the reason each was not landed."""
        from pipelines.batch.landing import list_quarantined

        state = state_of(ctx)
        with state.session() as spark:
            # One more than asked for tells whether there are more to name --limit for.
            rows = list_quarantined(spark, state.settings, batch_id=batch, limit=limit + 1)
        more, rows = len(rows) > limit, rows[:limit]
        shown = rows if as_json or as_csv else [{**r, "raw_text": _shorten(r["raw_text"])} for r in rows]
        title = f"Quarantined records: the first {limit} (--limit N shows more)" if more else f"Quarantined records ({len(rows)})"
        if any(len(r["raw_text"] or "") > _SHOWN_RAW_CHARS for r in rows) and not (as_json or as_csv):
            title += f"; raw_text cut at {_SHOWN_RAW_CHARS} characters (--json or --csv shows it whole)"
        print_rows(shown, _QUARANTINE_COLUMNS, title=title, as_json=as_json, as_csv=as_csv)


@contextlib.contextmanager
def _file_progress(show: bool) -> Iterator:
    """Yield a `progress(path, done, total)` callback drawing one bar over the files, or None."""
    with progress_bars(show) as bar:
        if bar is None:
            yield None
            return
        task = bar.add_task("landing", total=None)

        def on_file(path: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"landing {Path(path).name}")

        yield on_file


def _shorten(text: str | None) -> str | None:
    if text is None or len(text) <= _SHOWN_RAW_CHARS:
        return text
    return text[:_SHOWN_RAW_CHARS] + "..."
