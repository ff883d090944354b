"""Unusual-activity commands: `anomalies train|score|list`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer

from conf.values import parse_time_ms
from pipelines.cli.console import CSV_HELP, console, listing_title, print_rows


def register(app: typer.Typer) -> None:
    """Add the `anomalies` command group."""
    from pipelines.cli.app import state_of

    anomalies_app = typer.Typer(help="Flag unusual actor activity with a model registered in MLflow.", no_args_is_help=True)
    app.add_typer(anomalies_app, name="anomalies")

    def _run_locked(ctx: typer.Context, lock_name: str, job: Callable[..., Any], now: str | None) -> Any:
        """Run `job(spark, settings, now_ms)` under the run lock; `now` is the --now option's text."""
        state = state_of(ctx)
        with state.locked_session(lock_name) as spark:
            return job(spark, state.settings, parse_time_ms(now, "--now") if now else None)

    @anomalies_app.command("train")
    def train_command(
        ctx: typer.Context,
        now: str | None = typer.Option(None, "--now", help="Train on the days before this time (epoch ms or ISO; default now)."),
    ) -> None:
        """Train on the last anomalies.training_days of change events, register the model, move the alias to it."""
        from pipelines.batch.anomalies import train

        result = _run_locked(ctx, "anomalies-train", train, now)
        console.print(
            f"registered {result.model_name} version {result.version} as @{result.alias} "
            f"(rows {result.training_rows}, {result.seconds:.1f} s, run {result.run_id})"
        )

    @anomalies_app.command("score")
    def score_command(
        ctx: typer.Context,
        now: str | None = typer.Option(None, "--now", help="Score the days up to this time (epoch ms or ISO; default now)."),
    ) -> None:
        """Score the last anomalies.score_days with the aliased model into gold.actor_anomalies (replacing that window)."""
        from pipelines.batch.anomalies import score_window

        result = _run_locked(ctx, "anomalies-score", score_window, now)
        console.print(
            f"scored {result.scored_rows} buckets with {result.model_name} version {result.version}: "
            f"{result.anomalies} flagged ({result.seconds:.1f} s)"
        )

    @anomalies_app.command("list")
    def list_command(
        ctx: typer.Context,
        since: str | None = typer.Option(None, "--since", help="Only windows starting at or after this time."),
        actor: str | None = typer.Option(None, "--actor", help="Only this actor URN."),
        granularity: str | None = typer.Option(None, "--granularity", help="hour or day."),
        limit: int = typer.Option(50, "--limit", min=1, help="How many, highest score first."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
        as_csv: bool = typer.Option(False, "--csv", help=CSV_HELP),
    ) -> None:
        """List flagged actor windows, highest score first."""
        from pipelines.batch.anomalies import list_anomalies
        from pipelines.privacy.display import person_pseudonym, with_identities

        state = state_of(ctx)
        with state.session() as spark:
            rows = list_anomalies(
                spark,
                state.settings,
                since_ms=parse_time_ms(since, "--since") if since else None,
                actor=person_pseudonym(state.settings, actor),
                granularity=granularity,
                limit=limit + 1,  # one more tells whether there are more to name --limit for
            )
        more, rows = len(rows) > limit, rows[:limit]
        # The command runs with the home's key store: its user may see identities.
        rows = with_identities(state.settings, rows)
        table = [
            {
                "actor": r["actor"],
                "window": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["window_start"] / 1000)) + f" ({r['granularity']})",
                "score": f"{r['score']:.2f}",
                "kind": r["kind"] + (" (peers)" if r["peer_scored"] else ""),
                "top feature": _describe(r["top_features"][0]) if r["top_features"] else "",
                "model": r["model_version"],
            }
            for r in rows
        ]
        columns = ["actor", "window", "score", "kind", "top feature", "model"]
        title = listing_title("Unusual activity", len(table), more, "--limit")
        print_rows(table, columns, title=title, as_json=as_json, as_csv=as_csv, json_rows=rows)


def _describe(feature: dict) -> str:
    return f"{feature['feature']} {feature['value']:g} (usual {feature['baseline']:g})"
