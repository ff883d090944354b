"""Privacy commands: `erase` (one person's key destroyed, the erasure chained), `privacy enable`, `privacy identity`."""

from __future__ import annotations

import getpass

import typer

from pipelines.cli.console import console


def register(app: typer.Typer) -> None:
    """Add `erase` and the `privacy` command group to the CLI."""
    from pipelines.cli.app import state_of

    privacy_app = typer.Typer(help="Pseudonymised personal data and its identities (docs/privacy.md).", no_args_is_help=True)
    app.add_typer(privacy_app, name="privacy")

    @app.command("erase")
    def erase_command(
        ctx: typer.Context,
        actor: str = typer.Option(..., "--actor", help="The person's urn (urn:li:corpuser:...)."),
        reason: str = typer.Option(..., "--reason", help="Why: the erasure request's reference (recorded)."),
        requested_by: str | None = typer.Option(None, "--requested-by", help="Who asked (recorded; default the OS user)."),
    ) -> None:
        """Erase a person: destroy their key, so every stored identity of theirs reads as an erased subject."""
        from pipelines.serving.erasure import erase_person

        state = state_of(ctx)
        erasure = erase_person(state.settings, actor, reason, requested_by or f"os:{getpass.getuser()}")
        console.print(
            f"erased: {erasure.pseudonym} ({erasure.identities} identities unreadable); "
            f"erasure {erasure.erasure_id} linked in the audit chain"
        )

    @privacy_app.command("enable")
    def enable_command(
        ctx: typer.Context,
        wait: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for another run's lock."),
    ) -> None:
        """Migrate the home to pseudonyms: identities encrypted, tables rewritten, old versions vacuumed, chain extended."""
        from pipelines.batch.privacy_migration import enable_privacy

        state = state_of(ctx)
        with state.locked_session("lakehouse privacy enable", wait) as spark:
            migration = enable_privacy(spark, state.settings)
        for table_key, rows in sorted(migration.rewritten.items()):
            console.print(f"{table_key}: {rows} rows pseudonymised")
        console.print(
            f"{migration.identities} identities encrypted; migration {migration.migration_id}: "
            f"{migration.links} links appended to the audit chain; earlier versions vacuumed"
        )

    @privacy_app.command("identity")
    def identity_command(ctx: typer.Context, pseudonym: str = typer.Argument(..., help="A pseudonym (urn:li:corpuser:p-..., ip-..., ua-...).")) -> None:
        """Show the identity behind a pseudonym (or that its person was erased)."""
        from pipelines.privacy.identities import resolve_identities
        from pipelines.privacy.keystore import key_store_for

        state = state_of(ctx)
        with state.session() as spark:
            resolved = resolve_identities(spark, state.settings, key_store_for(state.settings), [pseudonym])
        console.print(f"{pseudonym}: {resolved.get(pseudonym, 'no identity recorded')}")
