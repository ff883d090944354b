"""`lakehouse bench anomalies`: precision and recall of the unusual-activity model on injected anomalies.

A simulated multi-week history (`datagen.actor_activity`) is written to silver change events of a
scratch lakehouse; the model is trained on it (without the labels), registered in the scratch MLflow
store, and scores the whole window; the flagged day buckets are compared with the injected anomalies.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import typer

from conf.settings import load_settings
from conf.tables import ACTOR_ANOMALIES, ENTITY_CHANGE_EVENTS, table_spec
from datagen.actor_activity import ANOMALY_KINDS, DAY_MS, simulate_activity
from pipelines.bench.harness import measure, write_result
from pipelines.cli.console import console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TARGETS = {"recall": 0.9, "precision": 0.8, "train_and_score_s": 300.0, "events": 10_000_000}
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def register(bench_app: typer.Typer) -> None:
    """Add `bench anomalies` to the bench group."""

    @bench_app.command("anomalies")
    def bench_anomalies_command(
        seed: int = typer.Option(101, "--seed", help="Simulation seed (seeds 1-4 were used while developing)."),
        days: int = typer.Option(28, "--days", min=14, help="Days of history."),
        scale: float = typer.Option(1.0, "--scale", min=0.1, help="Multiplies the number of actors (about 90k events at 1; 10M at about 110)."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
        work: Path | None = typer.Option(None, "--work", help="Scratch lakehouse (default: a temporary one, removed after)."),
    ) -> None:
        """Train and score on a simulated history with injected anomalies; report precision/recall per kind."""
        result = run_anomalies_bench(seed=seed, days=days, scale=scale, work=work)
        path = write_result(out, "anomalies", result)
        overall = result["overall"]
        console.print(
            f"{result['events']} events, {result['injected']} injected anomalies: precision {overall['precision']}, "
            f"recall {overall['recall']}; train {result['train']['wall_s']} s, score {result['score']['wall_s']} s -> {path}"
        )


def run_anomalies_bench(*, seed: int, days: int = 28, scale: float = 1.0, work: Path | None = None) -> dict[str, Any]:
    """Simulate, train, score and evaluate; return the figures.

    A larger history has more actors, not busier ones: an organisation grows by people and services,
    and an anomaly's size stays meaningful next to one actor's usual day.
    """
    from pyspark.sql import functions as F

    from pipelines.batch.anomalies import score_window, train
    from pipelines.runtime.engine import open_session
    from pipelines.runtime.io import append, read_table

    scratch = Path(tempfile.mkdtemp(prefix="bench-anomalies-")) if work is None else work
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        with measure() as simulated:
            history = simulate_activity(
                seed=seed,
                days=days,
                people=max(9, round(40 * scale)),
                services=max(3, round(6 * scale)),
                dormant=max(3, round(4 * scale)),
                start_ms=START_MS,
            )
        settings = load_settings(
            None, scratch / "home", None, overrides=(f"anomalies.score_days={days}", f"anomalies.training_days={days}")
        )
        events_file = scratch / "events.parquet"
        pq.write_table(history.events, events_file)
        now_ms = START_MS + days * DAY_MS
        with open_session(settings) as spark:
            with measure() as written:
                append(read_simulated_events(spark, events_file), settings, ENTITY_CHANGE_EVENTS)
            with measure() as trained:
                model = train(spark, settings, now_ms)
            with measure() as scored:
                scoring = score_window(spark, settings, now_ms)
            flagged = {
                (row["actor"], row["window_start"])
                for row in read_table(spark, settings, ACTOR_ANOMALIES).where(F.col("granularity") == "day").collect()
            }
        truth = {(a.actor, a.day_start): a.kind for a in history.anomalies}
        return {
            "seed": seed,
            "days": days,
            "scale": scale,
            "actors": len(set(history.events.column("actor").to_pylist())),
            "events": history.events.num_rows,
            "injected": len(truth),
            "model_version": model.version,
            "thresholds": model.thresholds,
            "per_kind": _per_kind(truth, flagged),
            "overall": _precision_recall(truth, flagged),
            "flagged_day_buckets": len(flagged),
            "scored_buckets": scoring.scored_rows,
            "simulate": {"wall_s": simulated.wall_s},
            "write_events": {"wall_s": written.wall_s},
            "train": {"wall_s": trained.wall_s, "cpu_s": trained.cpu_s},
            "score": {"wall_s": scored.wall_s, "cpu_s": scored.cpu_s},
            "train_and_score_s": round(trained.wall_s + scored.wall_s, 3),
            "peak_rss_bytes": scored.peak_rss_bytes,
            "targets": TARGETS,
        }
    finally:
        if work is None:
            shutil.rmtree(scratch, ignore_errors=True)


def read_simulated_events(spark: SparkSession, events_file: Path):
    """Read the simulated events as silver change-event rows (the columns they do not set are null)."""
    from pyspark.sql import functions as F

    events_df = spark.read.parquet(str(events_file))
    columns = []
    for name, kind in table_spec(ENTITY_CHANGE_EVENTS).column_types:
        if name in events_df.columns:
            columns.append(F.col(name).cast(kind).alias(name))
        elif name == "event_date":
            columns.append(F.to_date(F.timestamp_millis(F.col("event_time"))).alias(name))
        elif name == "batch_id":
            columns.append(F.lit("bench-anomalies").alias(name))
        else:
            columns.append(F.lit(None).cast(kind).alias(name))
    return events_df.select(*columns)


def _precision_recall(truth: dict, flagged: set) -> dict[str, Any]:
    hits = len(flagged & set(truth))
    return {
        "precision": round(hits / len(flagged), 3) if flagged else 0.0,
        "recall": round(hits / len(truth), 3) if truth else 0.0,
        "true_positives": hits,
        "false_positives": len(flagged - set(truth)),
        "false_negatives": len(set(truth) - flagged),
    }


def _per_kind(truth: dict, flagged: set) -> dict[str, Any]:
    """Recall per injected kind; precision per kind is the share of that kind's flags that were right,
    where a flag belongs to the kind it hit (a false positive belongs to no kind, so it counts overall)."""
    counts = Counter(truth.values())
    hits = Counter(kind for key, kind in truth.items() if key in flagged)
    return {kind: {"injected": counts[kind], "detected": hits[kind], "recall": round(hits[kind] / counts[kind], 3) if counts[kind] else None} for kind in ANOMALY_KINDS}
