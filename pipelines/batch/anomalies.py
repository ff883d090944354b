"""Unusual actor activity: train the detector, register it in MLflow, score buckets into gold.actor_anomalies."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import mlflow.pyfunc
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.errors import ConfigError, InputError
from conf.settings import Settings
from conf.tables import ACTOR_ANOMALIES, ENTITY_CHANGE_EVENTS
from conf.values import DAY_MS
from gold.anomaly_features import FEATURES, bucket_width_ms, to_actor_features
from gold.anomaly_model import ActivityModel, fit, score
from pipelines.runtime.io import read_table, replace_where
from pipelines.runtime.tracking import tracked_run

TABLE = ACTOR_ANOMALIES
log = logging.getLogger("lakehouse.anomalies")


@dataclass(frozen=True)
class TrainResult:
    """What a training run registered."""

    model_name: str
    version: str
    alias: str
    run_id: str
    training_rows: dict[str, int]
    thresholds: dict[str, float]
    seconds: float


@dataclass(frozen=True)
class ScoreResult:
    """What a scoring run wrote."""

    model_name: str
    version: str
    window_start: int
    window_end: int
    scored_rows: int
    anomalies: int
    seconds: float


def _use_registry(settings: Settings) -> None:
    """Point MLflow at the settings' tracking store and model registry.

    Raises:
        ConfigError: when MLflow is disabled in the settings.
    """
    if not settings.mlflow.enabled:
        raise ConfigError("mlflow.enabled: false, but the anomaly model lives in the MLflow model registry; set it to true")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(settings.mlflow_tracking_uri)
    mlflow.set_registry_uri(settings.mlflow_tracking_uri)


class ActorActivityModel(mlflow.pyfunc.PythonModel):
    """The detector of each granularity, as one MLflow model."""

    def __init__(self, models: dict[str, ActivityModel]):
        self.models = models

    def score(self, features: pd.DataFrame) -> pd.DataFrame:
        """Score feature rows of any of the trained granularities (column `granularity`).

        Raises:
            InputError: for rows of a granularity the model was not trained for.
        """
        parts = []
        for granularity, rows in features.groupby("granularity", sort=False):
            if granularity not in self.models:
                raise InputError(f"granularity: the model was not trained for {granularity!r}")
            scored = score(self.models[granularity], rows.reset_index(drop=True))
            scored["granularity"] = granularity
            parts.append(scored)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        """MLflow's entry point: `score`, with top_features as JSON text."""
        scored = self.score(model_input)
        return scored.assign(top_features=scored["top_features"].map(json.dumps))


def read_events(spark: SparkSession, settings: Settings, since_ms: int, until_ms: int) -> DataFrame:
    """Return the silver change events with event_time in [since_ms, until_ms)."""
    since_date = time.strftime("%Y-%m-%d", time.gmtime(since_ms / 1000))
    until_date = time.strftime("%Y-%m-%d", time.gmtime(until_ms / 1000))
    return read_table(spark, settings, ENTITY_CHANGE_EVENTS).where(
        (F.col("event_date") >= F.lit(since_date).cast("date"))
        & (F.col("event_date") <= F.lit(until_date).cast("date"))
        & (F.col("event_time") >= since_ms)
        & (F.col("event_time") < until_ms)
    )


def features_for(events_df: DataFrame, settings: Settings, granularity: str, since_ms: int | None = None) -> pd.DataFrame:
    """Compute one granularity's feature rows with the settings' baseline and business hours.

    The engine computes the features (one row per actor and bucket, however many events) and streams
    them as Arrow batches, so the query runs once and nothing is read from a path of this machine: the
    engine may run elsewhere. (3M rows, 186 MB of Arrow, came through in one `toArrow`; collecting them in
    slices recomputed the whole feature query once per slice.)

    Args:
        events_df: the change events, the history before `since_ms` included (baselines read it).
        settings: the lakehouse settings.
        granularity: hour or day.
        since_ms: return only the buckets starting at or after it (default: every bucket).
    """
    width = bucket_width_ms(granularity)
    baseline = max(1, settings.anomalies.baseline_days * DAY_MS // width)
    hours = settings.anomalies.business_hours
    features_df = to_actor_features(events_df, granularity, baseline_buckets=baseline, business_hours=(hours[0], hours[1]))
    if since_ms is not None:
        features_df = features_df.where(F.col("bucket_start") >= since_ms)
    return features_df.toArrow().to_pandas()


def train(spark: SparkSession, settings: Settings, now_ms: int | None = None) -> TrainResult:
    """Train a detector per granularity on the last `training_days`, log it to MLflow and register it.

    The new version gets the settings' alias, so scoring uses it from now on.

    Raises:
        ConfigError: when MLflow is disabled.
        InputError: when there is too little activity to train on.
    """
    started = time.perf_counter()
    _use_registry(settings)
    cfg = settings.anomalies
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    events_df = read_events(spark, settings, now_ms - cfg.training_days * DAY_MS, now_ms).cache()
    models: dict[str, ActivityModel] = {}
    for granularity in cfg.granularities:
        rows = features_for(events_df, settings, granularity)
        models[granularity] = fit(
            rows,
            detector=cfg.detector,
            min_history=cfg.min_history,
            threshold_spread=cfg.threshold_spread,
            seed=cfg.seed,
        )
    events_df.unpersist()
    with tracked_run(settings, "anomalies-train", tags={"lakehouse.job": "anomalies-train"}) as tracker:
        tracker.log_params(
            {
                "detector": cfg.detector,
                "threshold_spread": cfg.threshold_spread,
                "min_history": cfg.min_history,
                "baseline_days": cfg.baseline_days,
                "training_days": cfg.training_days,
                "business_hours": list(cfg.business_hours),
                "granularities": list(cfg.granularities),
                "seed": cfg.seed,
                "features": list(FEATURES),
            }
        )
        metrics = {}
        for granularity, model in models.items():
            metrics[f"training_rows.{granularity}"] = model.training_rows
            metrics[f"threshold.{granularity}"] = model.robust_threshold
            metrics[f"actors_with_baseline.{granularity}"] = len(model.actor_medians)
        tracker.log_metrics(metrics)
        mlflow.log_dict({"features": list(FEATURES)}, "features.json")
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=ActorActivityModel(models),
            registered_model_name=cfg.model_name,
            pip_requirements=["scikit-learn", "pandas", "numpy"],
        )
        run_id = tracker.run_id
    version = str(info.registered_model_version)
    mlflow.MlflowClient().set_registered_model_alias(cfg.model_name, cfg.alias, version)
    return TrainResult(
        model_name=cfg.model_name,
        version=version,
        alias=cfg.alias,
        run_id=run_id,
        training_rows={g: m.training_rows for g, m in models.items()},
        thresholds={g: m.robust_threshold for g, m in models.items()},
        seconds=time.perf_counter() - started,
    )


def load_model(settings: Settings) -> tuple[Any, str]:
    """Load the registered model the settings' alias names, with its version.

    Raises:
        ConfigError: naming the model URI, the alias and the tracking URI, when it cannot be loaded.
    """
    _use_registry(settings)
    cfg = settings.anomalies
    uri = f"models:/{cfg.model_name}@{cfg.alias}"
    try:
        version = mlflow.MlflowClient().get_model_version_by_alias(cfg.model_name, cfg.alias).version
        loaded = mlflow.pyfunc.load_model(uri)
    except Exception as exc:  # MLflow raises its own and storage errors alike
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"anomalies model: cannot load {uri} (alias {cfg.alias!r}) from the registry at "
            f"{settings.mlflow_tracking_uri}: {first_line}; run `lakehouse anomalies train` first"
        ) from None
    return loaded.unwrap_python_model(), str(version)


def score_window(spark: SparkSession, settings: Settings, now_ms: int | None = None) -> ScoreResult:
    """Score the buckets of the last `score_days` and replace their rows in gold.actor_anomalies.

    Features are computed over `training_days` before the window too, so baselines and first-time
    platforms see the actor's history. Re-scoring a window replaces its rows: the same model gives the
    same table.
    """
    started = time.perf_counter()
    cfg = settings.anomalies
    model, version = load_model(settings)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    window_start = (now_ms - cfg.score_days * DAY_MS) // DAY_MS * DAY_MS
    events_df = read_events(spark, settings, window_start - cfg.training_days * DAY_MS, now_ms).cache()
    parts = []
    for granularity in cfg.granularities:
        parts.append(features_for(events_df, settings, granularity, since_ms=window_start))
    events_df.unpersist()
    features = pd.concat(parts, ignore_index=True)
    scored = model.score(features) if len(features) else pd.DataFrame()
    flagged = scored[scored["is_anomaly"]] if len(scored) else scored
    rows = [
        {
            "actor": r.actor,
            "granularity": r.granularity,
            "window_start": int(r.bucket_start),
            "window_end": int(r.bucket_start) + bucket_width_ms(r.granularity),
            "score": float(r.score),
            "kind": r.kind,
            "peer_scored": bool(r.peer_scored),
            "top_features": json.dumps(r.top_features, sort_keys=True),
            "model_name": cfg.model_name,
            "model_version": version,
        }
        for r in flagged.itertuples()
    ]
    anomalies_df = _to_table_rows(spark, rows)
    window_date = time.strftime("%Y-%m-%d", time.gmtime(window_start / 1000))
    predicate = f"window_date >= DATE'{window_date}' AND window_start >= {window_start} AND window_start < {now_ms}"
    replace_where(anomalies_df, settings, TABLE, predicate)
    return ScoreResult(cfg.model_name, version, window_start, now_ms, len(features), len(rows), time.perf_counter() - started)


def _to_table_rows(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    schema = (
        "actor STRING, granularity STRING, window_start BIGINT, window_end BIGINT, score DOUBLE, kind STRING, "
        "peer_scored BOOLEAN, top_features STRING, model_name STRING, model_version STRING"
    )
    return (
        spark.createDataFrame(rows, schema)
        .withColumn("scored_at", F.current_timestamp())
        .withColumn("window_date", F.to_date(F.timestamp_millis(F.col("window_start"))))
    )


def list_anomalies(
    spark: SparkSession,
    settings: Settings,
    *,
    since_ms: int | None = None,
    actor: str | None = None,
    granularity: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Return flagged buckets, highest score first, with top_features decoded."""
    if limit < 1:
        raise InputError(f"limit: {limit} must be at least 1")
    anomalies_df = read_table(spark, settings, TABLE)
    if since_ms is not None:
        anomalies_df = anomalies_df.where(F.col("window_start") >= since_ms)
    if actor:
        anomalies_df = anomalies_df.where(F.col("actor") == actor)
    if granularity:
        bucket_width_ms(granularity)
        anomalies_df = anomalies_df.where(F.col("granularity") == granularity)
    rows = anomalies_df.orderBy(F.desc("score"), "actor", "window_start").limit(limit).collect()
    return [{**row.asDict(), "top_features": json.loads(row["top_features"])} for row in rows]
