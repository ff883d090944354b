"""The unusual-activity detector: robust per-actor baselines and an isolation forest over bucket features.

Pure Python over pandas frames of `gold.anomaly_features.to_actor_features` rows; tracking, registry and
tables live in pipelines/.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.ensemble import IsolationForest

from conf.errors import InputError
from gold.anomaly_features import FEATURES

DETECTORS = ("robust", "forest", "combined")
# A share is already on a 0..1 scale; everything else is a count or ratio, compared on a log scale.
SHARE_FEATURES = ("off_hours_share",)
# The smallest spread a baseline may have (log scale): an actor who never deletes has a zero spread,
# and one delete must not look infinitely unusual.
MIN_SCALE = 0.5
TOP_DEVIATIONS = 3
MIN_SHARE_SCALE = 0.1
# Which kind of unusual activity the feature that stands out most points to.
FEATURE_KINDS = {
    "classification_removals": "mass_classification_removal",
    "domain_removals": "mass_classification_removal",
    "owner_changes": "ownership_takeover",
    "hard_deletes": "deletion_burst",
    "soft_deletes": "deletion_burst",
    "schema_changes": "schema_change_burst",
    "off_hours_events": "off_hours_activity",
    "off_hours_share": "off_hours_activity",
    "idle_buckets": "dormant_account_active",
    "new_platform_events": "new_platform",
    "new_entity_type_events": "new_platform",
}


@dataclass
class ActivityModel:
    """A trained detector: the baselines, the forest and the thresholds chosen from the training scores."""

    features: tuple[str, ...]
    detector: str
    min_history: int
    actor_medians: dict[str, np.ndarray]
    actor_scales: dict[str, np.ndarray]
    peer_median: np.ndarray
    peer_scale: np.ndarray
    robust_threshold: float
    forest: IsolationForest | None = None
    forest_threshold: float = float("inf")
    training_rows: int = 0
    params: dict = field(default_factory=dict)


def to_matrix(features_df: pd.DataFrame, features: tuple[str, ...] = FEATURES) -> np.ndarray:
    """Return the feature values on the scale the baselines use (log1p for counts and ratios).

    Raises:
        InputError: when a feature column is missing or holds a negative value.
    """
    missing = [name for name in features if name not in features_df.columns]
    if missing:
        raise InputError(f"features: missing columns {', '.join(missing)}")
    values = features_df.loc[:, list(features)].astype("float64").fillna(0.0).to_numpy()
    if (values < 0).any():
        column = features[int(np.argwhere(values < 0)[0][1])]
        raise InputError(f"features.{column}: negative values cannot be scored")
    shares = np.array([name in SHARE_FEATURES for name in features])
    return np.where(shares, values, np.log1p(values))


def _robust_stats(matrix: np.ndarray, features: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    median = np.median(matrix, axis=0)
    mad = np.median(np.abs(matrix - median), axis=0) * 1.4826
    floors = np.array([MIN_SHARE_SCALE if name in SHARE_FEATURES else MIN_SCALE for name in features])
    return median, np.maximum(mad, floors)


def _deviations(model: ActivityModel, features_df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return each row's z-scores against its baseline, the baselines, and whether the peers were used."""
    matrix = to_matrix(features_df, model.features)
    known_actors = list(model.actor_medians)
    # Row k of the stacked baselines is known_actors[k]; the last row holds the peers'.
    stacked_medians = np.vstack([*(model.actor_medians[a] for a in known_actors), model.peer_median])
    stacked_scales = np.vstack([*(model.actor_scales[a] for a in known_actors), model.peer_scale])
    index = pd.Index(known_actors).get_indexer(features_df["actor"].to_numpy())
    peer_scored = index < 0
    index = np.where(peer_scored, len(known_actors), index)
    medians, scales = stacked_medians[index], stacked_scales[index]
    # Only more than usual is unusual here: fewer events than the baseline is not a finding.
    return np.maximum((matrix - medians) / scales, 0.0), medians, peer_scored


def robust_score(deviations: np.ndarray) -> np.ndarray:
    """Combine a row's deviations: the mean of its three largest, so that several features standing out
    together count for more than one alone, and one noisy feature counts for less (measured against the
    largest alone, the top two and four, and the root sum of squares: docs/anomalies.md)."""
    return np.sort(deviations, axis=1)[:, -TOP_DEVIATIONS:].mean(axis=1)


def _threshold(scores: np.ndarray, spread: float) -> float:
    """A threshold above the bulk of the training scores: median + `spread` robust deviations."""
    median = float(np.median(scores))
    mad = float(np.median(np.abs(scores - median))) * 1.4826
    return median + spread * max(mad, 1e-9)


def fit(
    features_df: pd.DataFrame,
    *,
    detector: str = "combined",
    min_history: int = 5,
    threshold_spread: float = 3.5,
    trees: int = 200,
    seed: int = 0,
) -> ActivityModel:
    """Train the detector on unlabelled feature rows and choose its thresholds from their scores.

    Args:
        features_df: feature rows (actor, history_buckets and FEATURES columns).
        detector: robust (per-actor baselines), forest (isolation forest on the deviations) or combined.
        min_history: training buckets an actor needs to be compared with their own baseline; others are
            compared with everyone's (peer_scored).
        threshold_spread: how many robust deviations of the training scores above their median a score
            must be to be flagged.
        trees: trees in the isolation forest.
        seed: random seed of the forest.

    Raises:
        InputError: for an unknown detector, too few rows, or bad feature values.
    """
    if detector not in DETECTORS:
        raise InputError(f"detector: {detector!r} is not one of {', '.join(DETECTORS)}")
    if len(features_df) < 10:
        raise InputError(f"features: {len(features_df)} rows are too few to train on (at least 10)")
    features = FEATURES
    matrix = to_matrix(features_df, features)
    peer_median, peer_scale = _robust_stats(matrix, features)
    actor_medians: dict[str, np.ndarray] = {}
    actor_scales: dict[str, np.ndarray] = {}
    codes, actors = pd.factorize(features_df["actor"].to_numpy())
    order = np.argsort(codes, kind="stable")
    # One sort, then each actor's rows are one slice: no pass over all rows per actor.
    starts = np.searchsorted(codes[order], np.arange(len(actors) + 1))
    for code, actor in enumerate(actors):
        rows = matrix[order[starts[code] : starts[code + 1]]]
        if len(rows) >= min_history:
            actor_medians[actor], actor_scales[actor] = _robust_stats(rows, features)
    model = ActivityModel(
        features=features,
        detector=detector,
        min_history=min_history,
        actor_medians=actor_medians,
        actor_scales=actor_scales,
        peer_median=peer_median,
        peer_scale=peer_scale,
        robust_threshold=0.0,
        training_rows=len(features_df),
        params={"threshold_spread": threshold_spread, "trees": trees, "seed": seed},
    )
    deviations, _, _ = _deviations(model, features_df)
    model.robust_threshold = _threshold(robust_score(deviations), threshold_spread)
    if detector != "robust":
        model.forest = IsolationForest(n_estimators=trees, random_state=seed).fit(deviations)
        model.forest_threshold = _threshold(-model.forest.score_samples(deviations), threshold_spread)
    return model


def score(model: ActivityModel, features_df: pd.DataFrame, top: int = 3, explain_all: bool = False) -> pd.DataFrame:
    """Score feature rows: one output row per input row, in the same order.

    Args:
        model: a trained model.
        features_df: feature rows to score.
        top: how many contributing features to explain each row with.
        explain_all: explain every row; by default only the flagged rows get top_features (the others an
            empty list).

    Returns:
        actor, bucket_start, score (1.0 = at the threshold), is_anomaly, peer_scored, kind and
        top_features (a list of {feature, value, baseline, deviation}).
    """
    deviations, medians, peer_scored = _deviations(model, features_df)
    robust = robust_score(deviations) / model.robust_threshold
    if model.detector == "robust" or model.forest is None:
        combined = robust
    else:
        forest = -model.forest.score_samples(deviations) / model.forest_threshold
        combined = forest if model.detector == "forest" else np.maximum(robust, forest)
    flagged = combined >= 1.0
    order = np.argsort(-deviations, axis=1)[:, :top]
    kinds = np.array([FEATURE_KINDS.get(name, "volume_spike") for name in model.features], dtype=object)[order[:, 0]]
    explanations: list[list[dict]] = [[] for _ in range(len(features_df))]
    # Explaining every row costs more than scoring them; only flagged rows are shown to anyone.
    rows_to_explain = np.flatnonzero(np.ones_like(flagged) if explain_all else flagged)
    if len(rows_to_explain):
        raw = features_df.loc[:, list(model.features)].astype("float64").fillna(0.0).to_numpy()[rows_to_explain]
        shares = np.array([name in SHARE_FEATURES for name in model.features])
        baselines = np.where(shares, medians[rows_to_explain], np.expm1(medians[rows_to_explain]))
        picked = deviations[rows_to_explain]
        for k, i in enumerate(rows_to_explain):
            explanations[i] = [
                {
                    "feature": model.features[j],
                    "value": float(raw[k, j]),
                    "baseline": round(float(baselines[k, j]), 3),
                    "deviation": round(float(picked[k, j]), 3),
                }
                for j in order[i]
            ]
    return pd.DataFrame(
        {
            "actor": features_df["actor"].to_numpy(),
            "bucket_start": features_df["bucket_start"].to_numpy(),
            "score": np.round(combined, 6),
            "is_anomaly": flagged,
            "peer_scored": peer_scored,
            "kind": kinds,
            "top_features": explanations,
        }
    )
