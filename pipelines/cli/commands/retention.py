"""Retention and legal hold commands: `retention apply`, `hold add`, `hold list`, `hold remove`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from conf.errors import InputError
from pipelines.cli.console import console, print_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from conf.settings import Settings
    from pipelines.batch.retention import RetentionReport


def register(app: typer.Typer) -> None:
    """Add the `retention` and `hold` command groups to the CLI."""
    from pipelines.cli.app import state_of

    retention_app = typer.Typer(help="Delete whole batches past their table's retention (docs/privacy.md).", no_args_is_help=True)
    app.add_typer(retention_app, name="retention")
    hold_app = typer.Typer(help="Legal holds: actors or entities retention and erasure leave alone.", no_args_is_help=True)
    app.add_typer(hold_app, name="hold")

    @retention_app.command("apply")
    def retention_apply(
        ctx: typer.Context,
        vacuum_hours: int | None = typer.Option(
            None, "--vacuum-hours", min=0, help="Vacuum files older than this (default retention.vacuum_hours)."
        ),
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Delete the batches past retention.days.* (and access_log.retention_days) that no hold covers, then VACUUM."""
        state = state_of(ctx)
        with state.locked_session("lakehouse retention apply", wait) as spark:
            print_retention_report(run_retention(spark, state.settings, vacuum_hours))

    @hold_app.command("add")
    def hold_add(
        ctx: typer.Context,
        actor: str | None = typer.Option(None, "--actor", help="An actor urn (urn:li:corpuser:...)."),
        entity: str | None = typer.Option(None, "--entity", help="An entity urn."),
        reason: str = typer.Option(..., "--reason", help="Why: the case or matter the hold serves."),
    ) -> None:
        """Place a legal hold on an actor or an entity: retention keeps their batches, erasure refuses the actor."""
        from pipelines.batch.legal_holds import add_hold
        from bronze.pseudonym_rules import PERSON_PREFIX, pseudonym_of
        from pipelines.privacy.keystore import key_store_for

        if (actor is None) == (entity is None):
            raise InputError("hold add: give exactly one of --actor URN or --entity URN")
        state = state_of(ctx)
        subject = actor or entity
        if state.settings.privacy.pseudonymise and subject.startswith(PERSON_PREFIX):
            # The tables hold the person as a pseudonym: the hold names it so (and so never the identity).
            subject = pseudonym_of(subject, key_store_for(state.settings).pseudonym_secret())
        with state.session() as spark:
            hold = add_hold(spark, state.settings, "actor" if actor else "entity", subject, reason)
        console.print(f"hold {hold.hold_id} placed on {hold.subject_kind} {hold.subject_urn}")

    @hold_app.command("list")
    def hold_list(ctx: typer.Context) -> None:
        """Show the active legal holds, oldest first."""
        from pipelines.batch.legal_holds import active_holds

        state = state_of(ctx)
        with state.session() as spark:
            holds = active_holds(spark, state.settings)
        rows = [{**hold.__dict__, "recorded_at": hold.recorded_at.isoformat()} for hold in holds]
        print_table(rows, ["hold_id", "subject_kind", "subject_urn", "reason", "recorded_at"], title=f"Legal holds ({len(rows)})")

    @hold_app.command("remove")
    def hold_remove(ctx: typer.Context, hold_id: str = typer.Argument(..., help="The hold's id (hold list).")) -> None:
        """Lift a legal hold (the hold and its removal stay recorded)."""
        from pipelines.batch.legal_holds import remove_hold

        state = state_of(ctx)
        with state.session() as spark:
            hold = remove_hold(spark, state.settings, hold_id)
        console.print(f"hold {hold.hold_id} on {hold.subject_kind} {hold.subject_urn} removed")


def run_retention(spark: SparkSession, settings: Settings, vacuum_hours: int | None = None) -> RetentionReport:
    """Apply retention (for `retention apply` and `maintain --retention`)."""
    from pipelines.batch.retention import apply_retention

    return apply_retention(spark, settings, vacuum_hours=vacuum_hours)


def print_retention_report(report: RetentionReport) -> None:
    """Print what a retention run deleted, kept for a hold, and vacuumed."""
    if report.cut_id is None:
        console.print("retention: no batch past its table's retention")
    else:
        by_table: dict[str, list] = {}
        for batch in report.deleted:
            by_table.setdefault(batch.table_key, []).append(batch)
        for table_key, batches in sorted(by_table.items()):
            rows = sum(b.rows for b in batches)
            console.print(
                f"{table_key}: {len(batches)} batches ({rows} rows) older than {batches[0].days} days deleted, "
                f"{report.vacuumed.get(table_key, 0)} files vacuumed"
            )
        console.print(f"cut {report.cut_id} linked in the audit chain (verify accepts these batches gone)")
    for batch, hold_ids in report.held:
        console.print(f"{batch.table_key}: batch {batch.batch_id} kept: legal hold {', '.join(hold_ids)}")
