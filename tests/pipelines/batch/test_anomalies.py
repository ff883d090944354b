"""Train, register, load by alias and score the unusual-activity model on real tables and a real MLflow store."""

from __future__ import annotations

import dataclasses

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from conf.errors import ConfigError
from conf.settings import Settings
from datagen.actor_activity import DAY_MS, simulate_activity
from pipelines.batch.anomalies import features_for, list_anomalies, load_model, read_events, score_window, train
from pipelines.bench.anomalies import read_simulated_events
from pipelines.runtime.io import append, read_table

START = 1_767_225_600_000
DAYS = 21
NOW = START + DAYS * DAY_MS


@pytest.fixture(scope="module")
def history(spark: SparkSession, lakehouse: Settings, tmp_path_factory):
    simulated = simulate_activity(
        seed=11, days=DAYS, people=6, services=2, dormant=1, anomalies_per_kind=1, events_scale=0.5, start_ms=START
    )
    path = tmp_path_factory.mktemp("activity") / "events.parquet"
    pq.write_table(simulated.events, path)
    append(read_simulated_events(spark, path), lakehouse, "silver.entity_change_events")
    return simulated


@pytest.fixture(scope="module")
def settings(lakehouse: Settings) -> Settings:
    window = dataclasses.replace(lakehouse.anomalies, training_days=DAYS, score_days=DAYS)
    return dataclasses.replace(lakehouse, anomalies=window)


@pytest.fixture(scope="module")
def trained(spark: SparkSession, settings: Settings, history):
    return train(spark, settings, NOW)


def test_training_registers_a_version_under_the_alias(settings, trained):
    assert trained.version == "1"
    assert trained.alias == "champion"
    assert set(trained.training_rows) == {"hour", "day"}
    model, version = load_model(settings)
    assert version == "1"
    assert set(model.models) == {"hour", "day"}


def test_scoring_flags_the_injected_deletion_burst(spark, settings, trained, history):
    result = score_window(spark, settings, NOW)
    assert result.version == "1"
    flagged = {
        (r["actor"], r["window_start"])
        for r in read_table(spark, settings, "gold.actor_anomalies").collect()
        if r["granularity"] == "day"
    }
    burst = next(a for a in history.anomalies if a.kind == "deletion_burst")
    assert (burst.actor, burst.day_start) in flagged
    listed = list_anomalies(spark, settings, actor=burst.actor, granularity="day")
    assert listed and listed[0]["top_features"][0]["feature"] in ("hard_deletes", "soft_deletes")
    assert listed[0]["model_version"] == "1"


def test_scoring_again_gives_the_same_table(spark, settings, trained):
    columns = ["actor", "granularity", "window_start", "score", "kind", "top_features", "model_version"]
    score_window(spark, settings, NOW)
    first = sorted(tuple(r) for r in read_table(spark, settings, "gold.actor_anomalies").select(*columns).collect())
    score_window(spark, settings, NOW)
    again = sorted(tuple(r) for r in read_table(spark, settings, "gold.actor_anomalies").select(*columns).collect())
    assert first and first == again


def test_a_missing_model_names_uri_and_alias(settings, trained):
    missing = dataclasses.replace(settings, anomalies=dataclasses.replace(settings.anomalies, alias="nowhere"))
    with pytest.raises(ConfigError, match=r"models:/lakehouse-actor-anomalies@nowhere \(alias 'nowhere'\)"):
        load_model(missing)


def test_training_needs_mlflow(spark, settings):
    off = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False))
    with pytest.raises(ConfigError, match="mlflow.enabled"):
        train(spark, off, NOW)


def test_features_of_a_window_are_one_row_per_active_actor_day_and_leave_no_scratch(spark, settings, history):
    since = START + 14 * DAY_MS
    events = history.events.to_pandas()
    active = events[events["actor"].notna() & (events["event_time"] >= since)]
    expected = set(zip(active["actor"], active["event_time"] // DAY_MS * DAY_MS))
    events_df = read_events(spark, settings, START, NOW)

    rows = features_for(events_df, settings, "day", since_ms=since)

    assert set(zip(rows["actor"], rows["bucket_start"])) == expected
    assert len(rows) == len(expected)
    assert not (settings.home / "_scratch" / "anomalies").exists()  # streamed from the engine, never a local file
