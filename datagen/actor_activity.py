"""Simulate weeks of catalog activity by people and service accounts, with labelled unusual activity.

The history is written as change events (the silver `entity_change_events` columns the activity
features read), not as aspect snapshots: scoring reads only who did what to which entity and when, and
simulating 10M events this way takes seconds instead of a full land + refine. The injected anomalies
are returned apart from the events, so they can score a detector without ever feeding its training.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from conf.errors import InputError
from conf.values import DAY_MS, HOUR_MS

PLATFORMS = ("hive", "snowflake", "kafka", "postgres", "looker", "bigquery")
ANOMALY_KINDS = (
    "mass_classification_removal",
    "ownership_takeover",
    "deletion_burst",
    "off_hours_schema_change",
    "dormant_account_active",
    "service_outside_platform",
)
# What people do on a normal day, and how often: (category, operation, weight).
HUMAN_MIX = (
    ("DOCUMENTATION", "MODIFY", 30),
    ("TAG", "ADD", 15),
    ("TAG", "REMOVE", 3),
    ("GLOSSARY_TERM", "ADD", 10),
    ("GLOSSARY_TERM", "REMOVE", 2),
    ("OWNER", "ADD", 5),
    ("TECHNICAL_SCHEMA", "MODIFY", 15),
    ("DOMAIN", "ADD", 3),
    ("LIFECYCLE", "CREATE", 4),
    ("LIFECYCLE", "SOFT_DELETE", 1),
)
SERVICE_MIX = (
    ("TECHNICAL_SCHEMA", "ADD", 40),
    ("TECHNICAL_SCHEMA", "MODIFY", 30),
    ("DOCUMENTATION", "MODIFY", 15),
    ("LIFECYCLE", "CREATE", 10),
    ("LIFECYCLE", "SOFT_DELETE", 2),
)
EVENT_COLUMNS = ("event_id", "entity_urn", "entity_type", "category", "operation", "actor", "event_time")


@dataclass(frozen=True)
class InjectedAnomaly:
    """One labelled unusual day: who, which UTC day (its start, epoch ms) and what kind."""

    actor: str
    day_start: int
    kind: str
    events: int


@dataclass(frozen=True)
class ActivityHistory:
    """The simulated events (an Arrow table of EVENT_COLUMNS) and the anomalies injected into them."""

    events: pa.Table
    anomalies: tuple[InjectedAnomaly, ...]


def dataset_urn(platform: str, index: int) -> str:
    """Return a DataHub dataset URN on a platform."""
    return f"urn:li:dataset:(urn:li:dataPlatform:{platform},warehouse.table_{index:06d},PROD)"


class _Events:
    """Collects event columns in numpy chunks."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, np.ndarray]] = []

    def add(self, actor: str, times: np.ndarray, urns: np.ndarray, categories: np.ndarray, operations: np.ndarray) -> None:
        n = len(times)
        if n:
            self.chunks.append(
                {
                    "actor": np.full(n, actor, dtype=object),
                    "event_time": times.astype(np.int64),
                    "entity_urn": urns.astype(object),
                    "category": categories.astype(object),
                    "operation": operations.astype(object),
                }
            )

    def table(self) -> pa.Table:
        columns = {key: np.concatenate([c[key] for c in self.chunks]) for key in self.chunks[0]}
        order = np.argsort(columns["event_time"], kind="stable")
        columns = {key: values[order] for key, values in columns.items()}
        ids = [
            hashlib.sha256(f"{a}|{t}|{u}|{c}|{o}|{i}".encode()).hexdigest()[:32]
            for i, (a, t, u, c, o) in enumerate(
                zip(columns["actor"], columns["event_time"], columns["entity_urn"], columns["category"], columns["operation"])
            )
        ]
        return pa.table(
            {
                "event_id": pa.array(ids, pa.string()),
                "entity_urn": pa.array(columns["entity_urn"], pa.string()),
                "entity_type": pa.array(np.full(len(ids), "dataset", dtype=object), pa.string()),
                "category": pa.array(columns["category"], pa.string()),
                "operation": pa.array(columns["operation"], pa.string()),
                "actor": pa.array(columns["actor"], pa.string()),
                "event_time": pa.array(columns["event_time"], pa.int64()),
            }
        )


def _mix(rng: np.random.Generator, mix: tuple, n: int) -> tuple[np.ndarray, np.ndarray]:
    weights = np.array([w for _, _, w in mix], dtype=float)
    picks = rng.choice(len(mix), size=n, p=weights / weights.sum())
    return np.array([mix[i][0] for i in picks], dtype=object), np.array([mix[i][1] for i in picks], dtype=object)


def _work_times(rng: np.random.Generator, day_start: int, n: int, off_hours_share: float) -> np.ndarray:
    hours = np.clip(rng.normal(13.0, 2.2, n), 7.0, 18.99)
    night = rng.random(n) < off_hours_share
    hours[night] = rng.uniform(0.0, 6.99, night.sum())
    return day_start + (hours * HOUR_MS).astype(np.int64)


def _urns(rng: np.random.Generator, platforms: list[str], base: int, span: int, n: int) -> np.ndarray:
    platform = rng.choice(platforms, size=n)
    index = base + rng.integers(0, span, n)
    return np.array([dataset_urn(p, i) for p, i in zip(platform, index)], dtype=object)


def simulate_activity(
    *,
    seed: int,
    days: int = 28,
    people: int = 40,
    services: int = 6,
    dormant: int = 4,
    events_scale: float = 1.0,
    anomalies_per_kind: int = 3,
    start_ms: int = 1_767_225_600_000,
) -> ActivityHistory:
    """Simulate `days` of activity and inject `anomalies_per_kind` labelled anomalies of each kind.

    People work weekdays in business hours (UTC) with their own volume, mostly on their team's datasets
    and platforms, with busy days now and then; service accounts work every hour on one platform;
    dormant accounts are active in the first week only. Anomalies land in the last two thirds of the
    window, so every actor has a history before them.

    Args:
        seed: the random seed (same seed, same history).
        days: length of the history.
        people, services, dormant: how many actors of each sort.
        events_scale: multiplies every actor's daily volume (10M events: about 1,000 with the defaults).
        anomalies_per_kind: injected anomalies of each of ANOMALY_KINDS.
        start_ms: the first day's start (UTC midnight, epoch ms).

    Raises:
        InputError: when the window is too short or there are too few actors for the anomalies.
    """
    if days < 14:
        raise InputError(f"days: {days} is too short (at least 14, so anomalies have a history before them)")
    if people < 3 * anomalies_per_kind or services < anomalies_per_kind or dormant < anomalies_per_kind:
        raise InputError(
            f"anomalies_per_kind: {anomalies_per_kind} needs at least {3 * anomalies_per_kind} people, "
            f"{anomalies_per_kind} services and {anomalies_per_kind} dormant accounts"
        )
    if events_scale <= 0:
        raise InputError(f"events_scale: {events_scale} must be positive")
    rng = np.random.default_rng(seed)
    out = _Events()
    team_platforms = {}
    for p in range(people):
        actor = f"urn:li:corpuser:person_{p:03d}"
        platforms = list(rng.choice(PLATFORMS[:4], size=int(rng.integers(1, 3)), replace=False))
        team_platforms[actor] = platforms
        rate = rng.uniform(8, 40) * events_scale
        for day in range(days):
            day_start = start_ms + day * DAY_MS
            if (day + 3) % 7 in (5, 6) and rng.random() > 0.05:  # 2026-01-01 is a Thursday
                continue
            if rng.random() < 0.08:
                continue  # a day off
            n = rng.poisson(rate * (rng.uniform(1.5, 2.5) if rng.random() < 0.07 else 1.0))
            categories, operations = _mix(rng, HUMAN_MIX, n)
            out.add(actor, _work_times(rng, day_start, n, 0.03), _urns(rng, platforms, p * 1000, 400, n), categories, operations)
    service_platforms = {}
    for s in range(services):
        actor = f"urn:li:corpuser:svc_ingest_{s:02d}"
        platform = PLATFORMS[s % len(PLATFORMS)]
        service_platforms[actor] = platform
        rate = rng.uniform(200, 600) * events_scale
        for day in range(days):
            n = rng.poisson(rate)
            times = start_ms + day * DAY_MS + rng.integers(0, DAY_MS, n)
            categories, operations = _mix(rng, SERVICE_MIX, n)
            out.add(actor, times, _urns(rng, [platform], 500_000 + s * 20_000, 20_000, n), categories, operations)
    for d in range(dormant):
        actor = f"urn:li:corpuser:former_{d:02d}"
        for day in range(5):
            n = rng.poisson(10 * events_scale)
            categories, operations = _mix(rng, HUMAN_MIX, n)
            out.add(actor, _work_times(rng, start_ms + day * DAY_MS, n, 0.03), _urns(rng, ["hive"], 900_000 + d * 100, 100, n), categories, operations)
    anomalies = _inject(rng, out, days, start_ms, team_platforms, service_platforms, dormant, anomalies_per_kind)
    return ActivityHistory(out.table(), tuple(anomalies))


def _inject(rng, out: _Events, days: int, start_ms: int, team_platforms: dict, service_platforms: dict,
            dormant: int, per_kind: int) -> list[InjectedAnomaly]:
    """Add each kind's anomalous days; each goes to a different actor on a weekday of the later window."""
    weekdays = [d for d in range(days // 3, days) if (d + 3) % 7 not in (5, 6)]
    people = list(team_platforms)
    rng.shuffle(people)
    labelled = []

    def day_of() -> int:
        return start_ms + int(rng.choice(weekdays)) * DAY_MS

    def record(actor: str, day_start: int, kind: str, n: int) -> None:
        labelled.append(InjectedAnomaly(actor, day_start, kind, n))

    for i in range(per_kind):
        actor, day_start, n = people[i], day_of(), int(rng.integers(80, 200))
        categories = rng.choice(["TAG", "GLOSSARY_TERM"], size=n).astype(object)
        out.add(actor, _work_times(rng, day_start, n, 0.03), _urns(rng, team_platforms[actor], 0, 100_000, n),
                categories, np.full(n, "REMOVE", dtype=object))
        record(actor, day_start, "mass_classification_removal", n)

        actor, day_start, n = people[per_kind + i], day_of(), int(rng.integers(50, 120))
        urns = _urns(rng, list(PLATFORMS[:4]), 0, 100_000, n)
        out.add(actor, _work_times(rng, day_start, 2 * n, 0.03), np.concatenate([urns, urns]),
                np.full(2 * n, "OWNER", dtype=object),
                np.concatenate([np.full(n, "REMOVE", dtype=object), np.full(n, "ADD", dtype=object)]))
        record(actor, day_start, "ownership_takeover", 2 * n)

        services = list(service_platforms)
        actor, day_start, n = services[i], day_of(), int(rng.integers(150, 400))
        operations = rng.choice(["HARD_DELETE", "SOFT_DELETE"], size=n).astype(object)
        out.add(actor, day_start + rng.integers(0, DAY_MS, n), _urns(rng, [service_platforms[actor]], 500_000, 20_000, n),
                np.full(n, "LIFECYCLE", dtype=object), operations)
        record(actor, day_start, "deletion_burst", n)

        actor, day_start, n = people[2 * per_kind + i], day_of(), int(rng.integers(60, 150))
        times = day_start + rng.integers(1 * HOUR_MS, 5 * HOUR_MS, n)
        out.add(actor, times, _urns(rng, team_platforms[actor], 0, 100_000, n),
                np.full(n, "TECHNICAL_SCHEMA", dtype=object), np.full(n, "MODIFY", dtype=object))
        record(actor, day_start, "off_hours_schema_change", n)

        actor, day_start, n = f"urn:li:corpuser:former_{i:02d}", day_of(), int(rng.integers(40, 120))
        categories, operations = _mix(rng, HUMAN_MIX, n)
        out.add(actor, _work_times(rng, day_start, n, 0.03), _urns(rng, list(PLATFORMS[:4]), 0, 100_000, n), categories, operations)
        record(actor, day_start, "dormant_account_active", n)

        actor = services[(i + 1) % len(services)]
        elsewhere = [p for p in PLATFORMS if p != service_platforms[actor]]
        day_start, n = day_of(), int(rng.integers(60, 200))
        out.add(actor, day_start + rng.integers(0, DAY_MS, n), _urns(rng, [str(rng.choice(elsewhere))], 0, 100_000, n),
                *_mix(rng, SERVICE_MIX, n))
        record(actor, day_start, "service_outside_platform", n)
    return labelled
