"""`lakehouse subscriptions ...`: push change events to webhooks (add, list, remove, resume, deliver, status)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from conf.errors import InputError
from conf.values import parse_json_object, parse_time_ms
from pipelines.cli.console import CSV_HELP, console, print_rows


def _read_om_filter(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--om-filter: {str(path)!r} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    return parse_json_object(text, "--om-filter")


_FILTER_KEYS = ("categories", "operations", "entity_types", "entity_prefixes", "actors", "om_filter", "scope")


def register(app: typer.Typer) -> None:
    """Add the `subscriptions` group."""
    from pipelines.cli.app import state_of

    subscriptions_app = typer.Typer(help="Push change events to webhooks.", no_args_is_help=True)
    app.add_typer(subscriptions_app, name="subscriptions")

    @subscriptions_app.command("add")
    def add_command(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="A unique name (letters, digits, '_', '.', '-')."),
        url: str = typer.Option(
            ...,
            "--url",
            help="The http or https URL events are POSTed to (loopback, private and link-local targets need "
            "subscriptions.allowed_networks).",
        ),
        categories: list[str] = typer.Option(None, "--category", help="Only this ECE category, e.g. TAG (repeatable)."),
        operations: list[str] = typer.Option(None, "--operation", help="Only this operation, e.g. ADD (repeatable)."),
        entity_types: list[str] = typer.Option(None, "--entity-type", help="Only this entity type, e.g. dataset (repeatable)."),
        entity_prefixes: list[str] = typer.Option(
            None, "--entity-prefix", help="Only entities whose URN starts with this (repeatable)."
        ),
        actors: list[str] = typer.Option(None, "--actor", help="Only changes by this actor URN (repeatable)."),
        om_filter: Path | None = typer.Option(
            None, "--om-filter", help='A JSON file holding an OpenMetadata eventFilter, e.g. {"eventType": "entityUpdated"}.'
        ),
        payload_format: str = typer.Option("ece", "--format", help="ece, openmetadata or slack."),
        scope: list[str] = typer.Option(
            None, "--scope", help="Deliver only events in this scope: domain=URN, platform=NAME, entity-type=TYPE, prefix=URN (repeatable)."
        ),
        secret_file: Path | None = typer.Option(None, "--secret-file", help="A file holding the HMAC signing secret."),
        since: str | None = typer.Option(
            None, "--since", help="Replay events refined since this time (ISO date/time or epoch ms); default: from now."
        ),
    ) -> None:
        """Add a subscription; it receives the events published from now on (or since --since)."""
        from gold.scopes import parse_scope
        from gold.subscriptions import EventFilters, check_format, check_name
        from pipelines.subscriptions.targets import check_url
        from pipelines.subscriptions.secrets import encrypt_secret, read_secret_file
        from pipelines.subscriptions.store import add_subscription
        from pipelines.subscriptions.targets import check_target

        state = state_of(ctx)
        settings = state.settings
        # Everything that needs no table is checked before a session starts.
        check_name(name)
        check_url(url, settings.subscriptions.allowed_hosts, settings.subscriptions.allowed_networks)
        check_target(url, settings.subscriptions.allowed_networks)
        check_format(payload_format)
        filters = EventFilters(
            categories=tuple(categories or ()),
            operations=tuple(operations or ()),
            entity_types=tuple(entity_types or ()),
            entity_prefixes=tuple(entity_prefixes or ()),
            actors=tuple(actors or ()),
            om_filter=_read_om_filter(om_filter) if om_filter else None,
            scope=parse_scope(scope or ()),
        )
        since_ms = parse_time_ms(since, "--since") if since is not None else None
        secret = read_secret_file(secret_file) if secret_file else None
        with state.session() as spark:
            ciphertext = encrypt_secret(settings, secret) if secret else None
            added = add_subscription(
                spark,
                settings,
                name=name,
                url=url,
                payload_format=payload_format,
                filters=filters,
                secret_ciphertext=ciphertext,
                since_ms=since_ms,
            )
        start = added.start_after.isoformat() if added.start_after else "the first published batch"
        console.print(f"added subscription {added.name} ({added.format} -> {added.url}); delivers batches refined after {start}")

    @subscriptions_app.command("list")
    def list_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List the subscriptions (secrets are never shown: `signed` tells whether one is set)."""
        from pipelines.subscriptions.store import list_subscriptions

        state = state_of(ctx)
        with state.session() as spark:
            rows = [s.describe() for s in list_subscriptions(spark, state.settings)]
        shown = [
            {**row, "filters": json.dumps({k: row[k] for k in _FILTER_KEYS if row[k]})} for row in rows
        ]
        columns = ["name", "url", "format", "filters", "signed", "paused", "start_after"]
        print_rows(shown, columns, as_json=as_json, as_csv=as_csv, json_rows=rows)

    @subscriptions_app.command("remove")
    def remove_command(ctx: typer.Context, name: str = typer.Argument(..., help="The subscription to remove.")) -> None:
        """Remove a subscription with its delivery cursor and dead letters."""
        from pipelines.subscriptions.store import remove_subscription

        state = state_of(ctx)
        with state.session() as spark:
            removed = remove_subscription(spark, state.settings, name)
        console.print(f"removed subscription {removed.name}")

    @subscriptions_app.command("resume")
    def resume_command(ctx: typer.Context, name: str = typer.Argument(..., help="The subscription to resume.")) -> None:
        """Resume a paused subscription (and end its backoff): the next delivery tries it at once."""
        from pipelines.subscriptions.store import resume_subscription

        state = state_of(ctx)
        with state.session() as spark:
            resume_subscription(spark, state.settings, name)
        console.print(f"resumed subscription {name}")

    @subscriptions_app.command("deliver")
    def deliver_command(
        ctx: typer.Context,
        names: list[str] = typer.Argument(None, help="Only these subscriptions (default: all)."),
        force: bool = typer.Option(False, "--force", help="Also try subscriptions waiting out a retry backoff."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per subscription."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """Deliver every pending event now (what each pipeline run does after publishing)."""
        from dataclasses import asdict

        from pipelines.subscriptions.delivery import deliver_outcomes

        state = state_of(ctx)
        with state.session() as spark:
            outcomes = deliver_outcomes(spark, state.settings, names=tuple(names or ()), force=force)
        rows = [asdict(o) for o in outcomes]
        if not rows and not (as_json or as_csv):
            console.print("no subscriptions")
        else:
            columns = ["name", "state", "delivered", "posts", "retries", "dead_lettered", "error"]
            print_rows(rows, columns, as_json=as_json, as_csv=as_csv)
        if any(o.state in ("failing", "paused") for o in outcomes):
            raise typer.Exit(3)

    @subscriptions_app.command("status")
    def status_command(
        ctx: typer.Context,
        names: list[str] = typer.Argument(None, help="Only these subscriptions (default: all)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per subscription."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """Show per subscription: delivered, pending, failed (dead-lettered), oldest pending age, last error, paused."""
        from pipelines.subscriptions.status import STATUS_COLUMNS, subscription_status

        state = state_of(ctx)
        with state.session() as spark:
            rows = subscription_status(spark, state.settings, tuple(names or ()))
        if not rows and not (as_json or as_csv):
            console.print("no subscriptions")
        else:
            print_rows(rows, list(STATUS_COLUMNS), as_json=as_json, as_csv=as_csv)
