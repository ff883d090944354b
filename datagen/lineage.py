"""Lineage histories: datasets, jobs, charts and dashboards whose lineage edges are added and removed over time.

Every lineage aspect form DataHub writes appears: `upstreamLineage` with `fineGrainedLineages` (column
to column), `dataJobInputOutput` as lists and as `*Edges`, `chartInfo` inputs as the `{"string": urn}`
union and as `inputEdges`, `dashboardInfo` charts and `datasetEdges`. Entities are soft-deleted and
restored (`status`) and hard-deleted and created again (their key aspect); dataset upstreams may form
cycles. Records are MCL lines as DataHub's Python classes serialize them, with versions, created times
(distinct, increasing) and actors. Same seed and arguments, same records.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conf.errors import InputError

ACTORS = ("urn:li:corpuser:ann", "urn:li:corpuser:bob", "urn:li:corpuser:datahub", "urn:li:corpuser:svc_airflow")
KEY_ASPECTS = {"dataset": "datasetKey", "dataJob": "dataJobKey", "chart": "chartKey", "dashboard": "dashboardKey"}


def dataset_urn(n: int) -> str:
    return f"urn:li:dataset:(urn:li:dataPlatform:hive,warehouse.t{n},PROD)"


def job_urn(n: int) -> str:
    return f"urn:li:dataJob:(urn:li:dataFlow:(airflow,etl,PROD),task_{n})"


def chart_urn(n: int) -> str:
    return f"urn:li:chart:(looker,tile_{n})"


def dashboard_urn(n: int) -> str:
    return f"urn:li:dashboard:(looker,board_{n})"


def field_urn(dataset: str, path: str) -> str:
    return f"urn:li:schemaField:({dataset},{path})"


class _Lineage:
    """The entities, their current upstream sets and the records written so far."""

    def __init__(self, rng: random.Random, datasets: int, jobs: int, charts: int, dashboards: int, start_ms: int):
        self.rng = rng
        self.datasets = [dataset_urn(n) for n in range(datasets)]
        self.jobs = [job_urn(n) for n in range(jobs)]
        self.charts = [chart_urn(n) for n in range(charts)]
        self.dashboards = [dashboard_urn(n) for n in range(dashboards)]
        self.time = start_ms
        self.versions: dict[tuple[str, str], int] = {}
        self.upstreams: dict[str, list[str]] = {}  # each entity's inputs, as its lineage aspect holds them
        self.outputs: dict[str, list[str]] = {}  # a job's outputs
        self.deleted: dict[str, str] = {}  # entity -> "soft" or "hard"

    def record(self, urn: str, aspect: str, value: dict[str, Any] | None, gap_ms: int) -> dict[str, Any]:
        self.time += 1 + self.rng.randrange(gap_ms)
        version = self.versions.get((urn, aspect), 0) + 1
        self.versions[urn, aspect] = version
        entity_type = urn.split(":")[2]
        record: dict[str, Any] = {
            "entityType": entity_type,
            "entityUrn": urn,
            "changeType": "UPSERT" if value is not None else "DELETE",
            "aspectName": aspect,
            "systemMetadata": {"lastObserved": self.time, "runId": f"lineage-{self.time // 1000}", "version": str(version)},
            "created": {"time": self.time, "actor": self.rng.choice(ACTORS)},
        }
        if value is not None:
            record["aspect"] = {"value": json.dumps(value, sort_keys=True), "contentType": "application/json"}
        return record

    def lineage_value(self, urn: str) -> tuple[str, dict[str, Any]]:
        """The lineage aspect of `urn` holding its current upstreams (and a job's outputs), in a form picked at random."""
        ups, as_edges = self.upstreams.get(urn, []), self.rng.random() < 0.5
        edges = [{"destinationUrn": u} for u in ups]
        kind = urn.split(":")[2]
        if kind == "dataset":
            fine = [{"upstreamType": "FIELD_SET", "upstreams": [field_urn(u, "id")], "downstreamType": "FIELD",
                     "downstreams": [field_urn(urn, "id")]} for u in ups[:1]]  # fmt: skip
            return "upstreamLineage", {"upstreams": [{"dataset": u, "type": "TRANSFORMED"} for u in ups],
                                       "fineGrainedLineages": fine}  # fmt: skip
        if kind == "dataJob":
            datasets, jobs = [u for u in ups if u.startswith("urn:li:dataset:")], [u for u in ups if u.startswith("urn:li:dataJob:")]
            outs = self.outputs.get(urn, [])
            if as_edges:
                return "dataJobInputOutput", {"inputDatasets": [], "outputDatasets": [], "inputDatajobs": jobs,
                                              "inputDatasetEdges": [{"destinationUrn": d} for d in datasets],
                                              "outputDatasetEdges": [{"destinationUrn": d} for d in outs]}  # fmt: skip
            return "dataJobInputOutput", {"inputDatasets": datasets, "outputDatasets": outs, "inputDatajobs": jobs}
        if kind == "chart":
            if as_edges:
                return "chartInfo", {"title": urn, "description": "", "inputEdges": edges}
            return "chartInfo", {"title": urn, "description": "", "inputs": [{"string": u} for u in ups]}
        charts, datasets = [u for u in ups if u.startswith("urn:li:chart:")], [u for u in ups if u.startswith("urn:li:dataset:")]
        return "dashboardInfo", {"title": urn, "description": "", "charts": charts,
                                 "datasetEdges": [{"destinationUrn": d} for d in datasets]}  # fmt: skip

    def _pools(self, urn: str) -> list[list[str]]:
        """The entities that may feed `urn`: datasets feed datasets (cycles allowed), jobs and charts; jobs feed jobs."""
        kind = urn.split(":")[2]
        if kind == "dataJob":
            return [self.datasets, self.jobs]
        if kind == "dashboard":
            return [self.charts, self.datasets]
        return [self.datasets]

    def pick_input(self, urn: str, taken: list[str]) -> str | None:
        """A random entity that may feed `urn` and does not yet (None when a few draws find none)."""
        pools = [pool for pool in self._pools(urn) if pool]
        for _ in range(20):
            pool = pools[self.rng.randrange(len(pools))]
            found = pool[self.rng.randrange(len(pool))]
            if found != urn and found not in taken:
                return found
        return None


def lineage_history(
    *,
    seed: int,
    datasets: int = 20,
    jobs: int = 6,
    charts: int = 8,
    dashboards: int = 3,
    changes: int = 200,
    start_ms: int = 1_704_067_200_000,
    gap_ms: int = 3_600_000,
    max_upstreams: int = 2,
) -> list[dict[str, Any]]:
    """A lineage history as MCL records, oldest first.

    Args:
        seed: the random seed.
        datasets, jobs, charts, dashboards: how many entities of each kind.
        changes: edits after the initial lineage (an edge added or removed, a delete or a restore).
        start_ms: the first record's time (epoch ms).
        gap_ms: the most time between two records.
        max_upstreams: the most inputs an entity starts with (at least one).

    Raises:
        InputError: naming a count below its minimum.
    """
    for name, value, least in (("datasets", datasets, 2), ("jobs", jobs, 0), ("charts", charts, 0),
                               ("dashboards", dashboards, 0), ("changes", changes, 0),
                               ("max_upstreams", max_upstreams, 1)):  # fmt: skip
        if value < least:
            raise InputError(f"{name}: {value} is below {least}")
    world = _Lineage(random.Random(seed), datasets, jobs, charts, dashboards, start_ms)
    return list(_records(world, changes, gap_ms, max_upstreams))


def _records(world: _Lineage, changes: int, gap_ms: int, max_upstreams: int) -> Iterator[dict[str, Any]]:
    rng = world.rng
    owners = world.datasets[1:] + world.jobs + world.charts + world.dashboards
    for urn in owners:
        ups: list[str] = []
        for _ in range(rng.randint(1, max_upstreams)):
            found = world.pick_input(urn, ups)
            if found is not None:
                ups.append(found)
        world.upstreams[urn] = ups
        if urn.startswith("urn:li:dataJob:"):
            world.outputs[urn] = [rng.choice(world.datasets)]
        aspect, value = world.lineage_value(urn)
        yield world.record(urn, aspect, value, gap_ms)
    for _ in range(changes):
        urn = rng.choice(owners)
        roll = rng.random()
        if urn in world.deleted:
            how = world.deleted.pop(urn)
            key = KEY_ASPECTS[urn.split(":")[2]]
            yield world.record(urn, "status", {"removed": False}, gap_ms) if how == "soft" else world.record(urn, key, {"id": urn}, gap_ms)
        elif roll < 0.08:
            world.deleted[urn] = "soft"
            yield world.record(urn, "status", {"removed": True}, gap_ms)
        elif roll < 0.12:
            world.deleted[urn] = "hard"
            yield world.record(urn, KEY_ASPECTS[urn.split(":")[2]], None, gap_ms)
        else:
            ups = world.upstreams[urn]
            spare = world.pick_input(urn, ups)
            if ups and (spare is None or rng.random() < 0.45):
                ups.remove(rng.choice(ups))
            elif spare is not None:
                ups.append(spare)
            aspect, value = world.lineage_value(urn)
            yield world.record(urn, aspect, value, gap_ms)


def write_lineage_history(path: Path, **options: Any) -> int:
    """Write `lineage_history(**options)` as MCL JSON lines to `path`; return the number of records."""
    records = lineage_history(**options)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return len(records)
