"""`lakehouse demo`: generate a realistic history, run the whole pipeline, show what it found."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import typer

from conf.settings import Settings
from conf.tables import AUDIT_EVENTS, ENTITY_CHANGE_EVENTS, TABLES, table_location, table_name
from conf.values import DAY_MS
from pipelines.cli.console import console, print_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



def register(app: typer.Typer) -> None:
    """Add `demo`."""
    from pipelines.cli.app import state_of

    @app.command("demo")
    def demo_command(
        ctx: typer.Context,
        entities: int = typer.Option(8000, "--entities", min=1, help="Catalog entities in the generated history."),
        usage_events: int = typer.Option(150_000, "--usage-events", min=0, help="Usage/audit events to generate."),
        seed: int = typer.Option(7, "--seed", help="Generator seed (same seed, same history)."),
        days: int = typer.Option(14, "--days", min=1, help="Days of history, ending at the next UTC midnight."),
    ) -> None:
        """Generate a realistic DataHub history, run land -> refine -> publish, and print a summary."""
        from datagen.history import generate_history
        from pipelines.cli.commands.jobs import run_with_progress, print_summary
        from pipelines.orchestration.jobs import JOB_STAGES

        state = state_of(ctx)
        settings = state.settings
        landing = settings.landing_paths[0] / f"demo-seed{seed}"
        now_ms = int(time.time() * 1000)
        # Whole days keep re-runs of the demo on the same day byte-identical, so they land nothing twice.
        end_ms = now_ms - now_ms % DAY_MS + DAY_MS
        console.rule("1. generate")
        manifest = generate_history(
            landing,
            entities=entities,
            seed=seed,
            usage_events=usage_events,
            action_requests=max(7, entities // 20),
            days=days,
            start_ms=end_ms - days * DAY_MS,
        )
        console.print(f"wrote {_manifest_total(manifest)} records to {landing}")
        console.rule("2. run the pipeline")
        summary = run_with_progress(settings, JOB_STAGES, [landing], 0.0, True)
        print_summary(summary)
        console.rule("3. what the lakehouse holds")
        from pipelines.runtime.engine import open_session

        with open_session(settings) as spark:
            show_summary(spark, settings)
        console.rule("4. where things are")
        console.print(f"tables:      {settings.home}")
        console.print(f"MLflow runs: {settings.mlflow_tracking_uri}  (lakehouse --home {settings.home} runs)")
        console.print(f"this run:    {summary.run_id}")


def show_summary(spark: SparkSession, settings: Settings) -> None:
    """Print table row counts, events by category, the last day's top actors and a sample audit search."""
    from pyspark.sql import functions as F

    from pipelines.runtime.io import read_table

    print_table(
        [
            {"table": table_name(settings, key), "rows": read_table(spark, settings, key).count()}
            for key in TABLES
        ],
        ["table", "rows"],
        title="Table row counts",
    )
    events_df = read_table(spark, settings, ENTITY_CHANGE_EVENTS)
    by_category = events_df.groupBy("category", "operation").count().orderBy(F.desc("count")).collect()
    print_table(
        [{"category": r.category, "operation": r.operation, "events": r["count"]} for r in by_category],
        ["category", "operation", "events"],
        title="Change events by category",
    )
    audit_df = read_table(spark, settings, AUDIT_EVENTS)
    latest = audit_df.agg(F.max("timestamp")).collect()[0][0]
    if latest is None:
        console.print("no audit events yet")
        return
    top = (
        audit_df.filter(F.col("timestamp") >= latest - DAY_MS)
        .groupBy("actor_urn")
        .agg(
            F.count("*").alias("events"),
            F.sum(F.when(F.col("event_type") == "FailedLogInEvent", 1).otherwise(0)).alias("failed_logins"),
            F.countDistinct("entity_urn").alias("entities"),
        )
        .orderBy(F.desc("events"), "actor_urn")
        .limit(5)
        .collect()
    )
    print_table([r.asDict() for r in top], ["actor_urn", "events", "failed_logins", "entities"], title="Top actors, last day")
    from gold.search_request import SearchRequest
    from pipelines.serving.scroll_key import local_signer
    from pipelines.serving.search import search

    request = SearchRequest.parse(
        {"startTime": latest - DAY_MS, "endTime": latest + 1, "size": 3, "includeRaw": False},
        {"eventTypes": [], "entityTypes": ["dataset"], "aspectTypes": [], "actorUrns": [top[0].actor_urn]},
        signer=local_signer(settings),
    )
    response = search(spark, settings, request)
    console.print(f"Sample audit search (POST /openapi/v1/events/audit/search, actor {top[0].actor_urn}, datasets):")
    console.print_json(json.dumps(response))
    console.print(f"audit events table: {table_location(settings, 'gold.audit_events')}")


def _manifest_total(manifest) -> int:
    files = getattr(manifest, "files", None) or []
    return sum(getattr(f, "lines", 0) for f in files) or 0

