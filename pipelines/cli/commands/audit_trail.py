"""Audit trail commands: `verify` (the hash chain), `report` (who changed what and when), `audit-key create`."""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path
from typing import Any

import typer

from conf.errors import InputError
from pipelines.cli.console import console, error_console

# verify's exit status when nothing is broken but batches wait for a publish stage to link them
# (0: everything verified; 1: broken; 2: bad settings).
EXIT_PENDING = 3


def _parse_date(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InputError(f"{option}: {value!r} is not a date (YYYY-MM-DD)") from None


def _checkpoint(against: str | None, configured: str | None) -> Any:
    """The checkpoint verify compares with: --against, else audit_chain.checkpoint once it was written."""
    from pipelines.audit_trail.chain_checkpoint import read_checkpoint
    from pipelines.runtime.storage import file_exists

    if against is not None:
        return read_checkpoint(against)
    if configured and file_exists(configured):
        return read_checkpoint(configured, "audit_chain.checkpoint")
    return None


def _print_problem(problem: Any) -> None:
    """Print one finding of verify: where, what, the rows and commits concerned."""
    if problem.seq < 0 and problem.batch_id is None:
        error_console.print(f"BROKEN: table {problem.table_key}: {problem.reason}")
        if problem.added:
            error_console.print(f"  rows missing 0, added {problem.added}, changed 0")
        if problem.commits_after:
            error_console.print("  commits: " + ", ".join(problem.commits_after))
        return
    where = f"link {problem.seq}" if problem.seq >= 0 else "no link"
    batch = "" if problem.batch_id is None and problem.seq >= 0 else f", batch {problem.batch_id!r}"
    error_console.print(f"BROKEN at {where}: table {problem.table_key}{batch}: {problem.reason}")
    if problem.missing or problem.added or problem.changed or problem.batch_id is not None:
        error_console.print(f"  rows missing {problem.missing}, added {problem.added}, changed {problem.changed}")
    if problem.examples:
        error_console.print("  example keys: " + ", ".join(problem.examples))
    if problem.commits_after:
        error_console.print("  commits after the linked version: " + ", ".join(problem.commits_after))


def register(app: typer.Typer) -> None:
    """Add `verify`, `report` and `audit-key create` to the CLI."""
    from pipelines.cli.app import state_of

    @app.command("verify")
    def verify_command(
        ctx: typer.Context,
        from_date: str | None = typer.Option(None, "--from", help="Check batches linked on or after this UTC date (YYYY-MM-DD)."),
        to_date: str | None = typer.Option(None, "--to", help="... and on or before this UTC date."),
        against: str | None = typer.Option(
            None, "--against", help="A chain checkpoint kept outside the home (path or s3://...); default audit_chain.checkpoint."
        ),
    ) -> None:
        """Verify the audit hash chain against the tables; exit 1 naming the first broken link, 3 when batches wait to be linked."""
        from pipelines.batch.chain_verification import verify_chain
        from pipelines.runtime.metrics import last_linked_at_ms, record_verification
        from pipelines.runtime.tracking import tracked_run

        state = state_of(ctx)
        start, end = _parse_date(from_date, "--from"), _parse_date(to_date, "--to")
        # Read before the chain: a publish that links meanwhile moves the checkpoint past what verify read.
        checkpoint = _checkpoint(against, state.settings.audit_chain.checkpoint)
        with tracked_run(state.settings, "verify") as tracker, state.session() as spark:
            result = verify_chain(spark, state.settings, start, end, checkpoint=checkpoint)
            record_verification(state.settings, result.ok, result.links, last_linked_at_ms(spark, state.settings))
            tracker.log_metrics({
                "chain_ok": 1.0 if result.ok else 0.0,
                "chain_links": float(result.links),
                "batches_checked": float(result.batches_checked),
                "rows_checked": float(result.rows_checked),
                "batches_pending": float(len(result.pending)),
            })  # fmt: skip
        for batch in result.pending:
            error_console.print(
                f"PENDING: table {batch.table_key}, batch {batch.batch_id!r}: {batch.rows} rows refined and not yet "
                f"linked; {batch.stage} links them (lakehouse run)"
            )
        if result.ok:
            if result.checkpoint is not None:
                console.print(f"checkpoint {result.checkpoint.source}: link {result.checkpoint.seq} matches")
            console.print(
                f"OK: {result.links} links, {result.batches_checked} batches, {result.rows_checked} rows verified; "
                f"head digest {result.head_digest}"
            )
            if result.pending:
                raise typer.Exit(EXIT_PENDING)
            return
        for problem in result.problems:
            _print_problem(problem)
        error_console.print(f"  head digest {result.head_digest}")
        raise typer.Exit(1)

    @app.command("report")
    def report_command(
        ctx: typer.Context,
        from_time: str = typer.Option(..., "--from", help="Window start (inclusive), epoch ms or ISO-8601 (UTC)."),
        to_time: str = typer.Option(..., "--to", help="Window end (exclusive), epoch ms or ISO-8601 (UTC)."),
        actor: str | None = typer.Option(None, "--actor", help="Only changes by this actor urn."),
        entity: str | None = typer.Option(None, "--entity", help="Only changes of this entity urn."),
        report_format: str = typer.Option("csv", "--format", help="csv, parquet or html."),
        out: Path | None = typer.Option(None, "--out", help="File to write (default: stdout for csv and html)."),
    ) -> None:
        """Write a regulator report of who changed what and when, with the chain head digest."""
        from pipelines.audit_trail.report_format import csv_chunks, html_chunks, parse_report_query
        from pipelines.batch.audit_report import report_header, report_rows, write_report

        query = parse_report_query({"from": from_time, "to": to_time, "actor": actor, "entity": entity, "format": report_format})
        if out is None and query.format == "parquet":
            raise InputError("--out: required for --format parquet (binary output)")
        state = state_of(ctx)
        with state.session() as spark:
            if out is not None:
                written = write_report(spark, state.settings, query, out)
                error_console.print(f"report written to {written}")
                return
            header, rows = report_header(spark, state.settings, query), report_rows(spark, state.settings, query)
            chunks = csv_chunks(header, rows) if query.format == "csv" else html_chunks(header, rows)
            for chunk in chunks:
                sys.stdout.write(chunk)

    key_app = typer.Typer(help="The audit chain's signing key.", no_args_is_help=True)
    app.add_typer(key_app, name="audit-key")

    @key_app.command("create")
    def key_create(
        ctx: typer.Context,
        kind: str = typer.Option("ed25519", "--kind", help="ed25519 (verifiable with the stored public key) or hmac."),
    ) -> None:
        """Create a signing key at audit_chain.key_file (never replaces one) and print its key id."""
        from pipelines.audit_trail.chain_keys import create_key

        key_id = create_key(state_of(ctx).settings, kind)
        error_console.print(f"key written; set audit_chain.signing: {kind} to sign new links with it")
        sys.stdout.write(key_id + "\n")
