"""Token commands: `token create|list|rotate|revoke` (API bearer tokens, stored as salted hashes)."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import typer

from conf.values import parse_duration_ms
from pipelines.cli.console import CSV_HELP, console, error_console, print_rows


def _when(millis: int | None) -> str:
    return "-" if not millis else datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def register(app: typer.Typer) -> None:
    """Add the `token` command group to the CLI."""
    from pipelines.cli.app import state_of

    token_app = typer.Typer(help="API bearer tokens (stored as salted hashes).", no_args_is_help=True)
    app.add_typer(token_app, name="token")

    @token_app.command("create")
    def token_create(
        ctx: typer.Context,
        actor: str = typer.Option(..., "--actor", help="The urn the token acts as, e.g. urn:li:corpuser:auditor."),
        role: list[str] = typer.Option(
            ["audit-read"], "--role", help="A role of the token (repeatable): audit-read, audit-read-sensitive, admin."
        ),
        expires_in: str | None = typer.Option(None, "--expires-in", help="Lifetime, e.g. 30d, 12h, 90m (default: none)."),
        scope: list[str] = typer.Option(
            [], "--scope", help="What it may see (repeatable): domain=URN, platform=NAME, entity-type=TYPE, prefix=URN."
        ),
    ) -> None:
        """Create a token and print it once (only its salted hash is kept)."""
        from gold.scopes import parse_scope
        from pipelines.serving.tokens import create_token

        state = state_of(ctx)
        lifetime = parse_duration_ms(expires_in, "--expires-in") if expires_in else None
        token, record = create_token(state.settings, actor, role, expires_in_ms=lifetime, scope=parse_scope(scope))
        limits = ", ".join(record.scope.to_specs()) or "unscoped"
        error_console.print(
            f"token {record.token_id} for {record.actor} ({', '.join(record.roles)}; {limits}; "
            f"expires {_when(record.expires_at) if record.expires_at else 'never'}); shown once, store it now:"
        )
        sys.stdout.write(token + "\n")

    @token_app.command("list")
    def token_list(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON object per token."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List the stored tokens: ids, actors, roles, scopes, expiry and last use (never the secrets)."""
        from pipelines.serving.tokens import load_last_used, load_tokens

        path = state_of(ctx).settings.tokens_path
        used = load_last_used(path)
        rows = [
            {
                "id": r.token_id,
                "actor": r.actor,
                "roles": ", ".join(r.roles),
                "scope": ", ".join(r.scope.to_specs()) or "-",
                "created_at": _when(r.created_at),
                "expires_at": _when(r.expires_at),
                "last_used_at": _when(used.get(r.token_id)),
            }
            for r in load_tokens(path)
        ]
        columns = ["id", "actor", "roles", "scope", "created_at", "expires_at", "last_used_at"]
        print_rows(rows, columns, title="API tokens", as_json=as_json, as_csv=as_csv)

    @token_app.command("rotate")
    def token_rotate(ctx: typer.Context, token_id: str = typer.Argument(..., help="The token id to rotate.")) -> None:
        """Give a token a new secret and print it once; the old one is refused from the next request on."""
        from pipelines.serving.tokens import rotate_token

        token, record = rotate_token(state_of(ctx).settings, token_id)
        error_console.print(f"token {record.token_id} of {record.actor} rotated; shown once, store it now:")
        sys.stdout.write(token + "\n")

    @token_app.command("revoke")
    def token_revoke(ctx: typer.Context, token_id: str = typer.Argument(..., help="The token id to revoke.")) -> None:
        """Revoke a token by id."""
        from pipelines.serving.tokens import revoke_token

        record = revoke_token(state_of(ctx).settings, token_id)
        console.print(f"revoked token {record.token_id} of {record.actor}")
