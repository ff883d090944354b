"""The detector on hand-made feature rows: what it flags, what it explains, and its errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conf.errors import InputError
from gold.anomaly_features import FEATURES
from gold.anomaly_model import fit, robust_score, score

DAY = 86_400_000


def usual_days(actor: str, days: int, events: int, seed: int) -> list[dict]:
    """Days of an actor who edits about `events` things a day and removes nothing."""
    rng = np.random.default_rng(seed)
    rows = []
    for day in range(days):
        n = int(events + rng.integers(-2, 3))
        row = {name: 0.0 for name in FEATURES}
        row.update(actor=actor, bucket_start=day * DAY, history_buckets=min(day, 14), events=n,
                   distinct_entities=n, distinct_platforms=1, baseline_ratio=1.0, peer_ratio=1.0,
                   classification_removals=float(rng.integers(0, 2)))
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def history() -> pd.DataFrame:
    rows = usual_days("urn:li:corpuser:alice", 30, 20, 1) + usual_days("urn:li:corpuser:bob", 30, 10, 2)
    return pd.DataFrame(rows)


def test_a_mass_removal_day_is_flagged_and_explained(history):
    model = fit(history, detector="robust", threshold_spread=3.5)
    odd = history.iloc[[0]].copy()
    odd["bucket_start"] = 31 * DAY
    odd["classification_removals"] = 150.0
    odd["events"] = 170.0
    odd["distinct_entities"] = 170.0
    result = score(model, odd)
    assert bool(result.loc[0, "is_anomaly"]) is True
    assert result.loc[0, "kind"] == "mass_classification_removal"
    top = result.loc[0, "top_features"][0]
    assert top["feature"] == "classification_removals"
    assert top["value"] == 150.0
    assert top["baseline"] in (0.0, 1.0)  # alice removes 0 or 1 a day
    assert result.loc[0, "peer_scored"] == False  # noqa: E712  (a numpy bool)


def test_usual_days_are_not_flagged(history):
    model = fit(history, detector="robust", threshold_spread=3.5)
    assert not score(model, history)["is_anomaly"].any()


def test_an_unknown_actor_is_scored_against_peers(history):
    model = fit(history, detector="robust", min_history=5)
    newcomer = history.iloc[[0]].copy()
    newcomer["actor"] = "urn:li:corpuser:carol"
    assert bool(score(model, newcomer).loc[0, "peer_scored"]) is True


def test_scores_are_reproducible_for_a_seed(history):
    first = score(fit(history, detector="combined", seed=7), history)["score"].to_numpy()
    again = score(fit(history, detector="combined", seed=7), history)["score"].to_numpy()
    assert np.array_equal(first, again)


def test_robust_score_is_the_mean_of_the_three_largest_deviations():
    deviations = np.array([[0.0, 9.0, 3.0, 6.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    assert robust_score(deviations).tolist() == [6.0, 2.0]


def test_bad_input_is_named(history):
    with pytest.raises(InputError, match="detector: 'magic'"):
        fit(history, detector="magic")
    with pytest.raises(InputError, match="3 rows are too few"):
        fit(history.head(3))
    broken = history.copy()
    broken.loc[0, "events"] = -1.0
    with pytest.raises(InputError, match="features.events: negative"):
        fit(broken)
    with pytest.raises(InputError, match="missing columns events"):
        fit(history.drop(columns=["events"]))
