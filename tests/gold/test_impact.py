"""The impact query against a brute-force replay of the aspect history, over many random cases."""

from __future__ import annotations

import json
import random

import pytest

from conf.errors import InputError
from datagen.lineage import lineage_history
from gold.impact import COLUMN_KIND, ChangeEvent, Edge, EdgeIndex, graph_at, impact
from gold.lineage import to_lineage_edges
from silver.patching import with_patches_applied
from silver.sequencing import ACCEPTED, to_sequenced_batch
from silver.state import to_empty_state
from tests.gold.test_lineage import VERSION_COLUMNS
from tests.silver.bronze_rows import bronze_df, to_bronze_rows


def dataset(n: int) -> str:
    return f"urn:li:dataset:(urn:li:dataPlatform:hive,t{n},PROD)"


def random_history(rng: random.Random, entities: int, versions: int) -> list[tuple]:
    """Aspect versions with distinct times: upstream lists (cycles likely), soft deletes and restores, hard deletes."""
    times = rng.sample(range(1_000, 1_000_000), versions)
    rows, numbers = [], {}
    for time in sorted(times):
        urn = dataset(rng.randrange(entities))
        roll = rng.random()
        # Deletes are rare enough that paths of several hops hold between them: a deleted entity at
        # either end of an edge ends it.
        if roll < 0.7:
            aspect = "upstreamLineage"
            upstreams = rng.sample(range(entities), rng.randint(0, 3))
            value = None if rng.random() < 0.1 else {"upstreams": [{"dataset": dataset(u)} for u in upstreams]}
        elif roll < 0.9:
            aspect, value = "status", {"removed": rng.random() < 0.35}
        else:
            aspect, value = "datasetKey", None if rng.random() < 0.35 else {"name": urn}
        numbers[urn, aspect] = numbers.get((urn, aspect), 0) + 1
        number = numbers[urn, aspect]
        key = f"v{number:019d}.{1 if value is None else 0}"
        actor = f"urn:li:corpuser:u{rng.randrange(3)}"
        rows.append((urn, "dataset", aspect, key, number, time, actor, None if value is None else json.dumps(value)))
    return rows


def random_events(rng: random.Random, entities: int, count: int) -> list[ChangeEvent]:
    return [
        ChangeEvent(f"e{i}", dataset(rng.randrange(entities)), rng.randrange(1_000, 1_000_000) * 2 + 1, "TAG", "ADD", "urn:li:corpuser:x")
        for i in range(count)
    ]


def aspect_edges(urn: str, aspect: str, value: dict) -> set[tuple[str, str]]:
    """The entity edges one lineage aspect names, read the way DataHub's documentation describes each field."""
    def urns(items):
        return [item["string"] if isinstance(item, dict) else item for item in items or []]

    def ends(edges):
        return [edge["destinationUrn"] for edge in edges or []]

    inputs, outputs = [], []
    if aspect == "upstreamLineage":
        inputs = [u["dataset"] for u in value.get("upstreams", [])]
    elif aspect == "dataJobInputOutput":
        inputs = urns(value.get("inputDatasets")) + ends(value.get("inputDatasetEdges")) + urns(value.get("inputDatajobs")) \
            + ends(value.get("inputDatajobEdges"))  # fmt: skip
        outputs = urns(value.get("outputDatasets")) + ends(value.get("outputDatasetEdges"))
    elif aspect == "chartInfo":
        inputs = urns(value.get("inputs")) + ends(value.get("inputEdges"))
    elif aspect == "dashboardInfo":
        inputs = urns(value.get("charts")) + ends(value.get("chartEdges")) + urns(value.get("datasets")) \
            + ends(value.get("datasetEdges"))  # fmt: skip
    return {(i, urn) for i in inputs if i != urn} | {(urn, o) for o in outputs if o != urn}


def graph_as_of(history: list[tuple], time: int) -> set[tuple[str, str]]:
    """The lineage edges at `time`, replayed from the aspect versions: each entity's newest versions then."""
    latest = {}
    for urn, entity_type, aspect, _, _, created, _, value in sorted(history, key=lambda r: r[5]):
        if created <= time:
            latest[urn, aspect] = (entity_type, value)
    # Soft deleted (status.removed) or hard deleted (its key aspect's newest version a DELETE) then.
    deleted = {
        urn for (urn, aspect), (entity_type, value) in latest.items()
        if (aspect == "status" and value is not None and json.loads(value).get("removed", False))
        or (aspect == f"{entity_type}Key" and value is None)
    }  # fmt: skip
    edges = set()
    for (urn, aspect), (_, value) in latest.items():
        if value is not None and urn not in deleted:
            edges |= aspect_edges(urn, aspect, json.loads(value))
    # A deleted entity at either end ends the edge too.
    return {(up, down) for up, down in edges if up not in deleted and down not in deleted}


def brute_force(history, events, target, direction, depth, start, end) -> list[tuple]:
    """Every event in the window whose entity a path of at most `depth` edges valid at its time joins to `target`.

    Paths are enumerated in full (no search order): the shortest, then the smallest by urns, is kept.
    """
    answer = []
    for event in events:
        if not start <= event.event_time < end:
            continue
        edges = graph_as_of(history, event.event_time)
        steps = {}
        for up, down in edges:
            a, b = (down, up) if direction == "upstream" else (up, down)
            steps.setdefault(a, []).append(b)
        paths = []

        def walk(path):
            if path[-1] == event.entity_urn:
                paths.append(path)
                return
            if len(path) - 1 < depth:
                for nxt in steps.get(path[-1], []):
                    if nxt not in path:
                        walk((*path, nxt))

        walk((target,))
        if paths:
            best = min(paths, key=lambda p: (len(p), p))
            answer.append((event.event_id, len(best) - 1, best))
    return sorted(answer, key=lambda r: (r[1], next(e.event_time for e in events if e.event_id == r[0]), r[0]))


def test_impact_equals_a_brute_force_replay_of_the_history(spark):
    rng = random.Random(57)
    entities = 9
    history = random_history(rng, entities, 160)
    rows = to_lineage_edges(spark.createDataFrame(history, VERSION_COLUMNS)).collect()
    edges = [Edge(r.upstream_urn, r.downstream_urn, r.valid_from_time, r.valid_to_time) for r in rows if r.edge_kind != COLUMN_KIND]
    events = random_events(rng, entities, 120)
    ended = sum(1 for e in edges if e.valid_to_time is not None)
    assert ended > 15 and len(edges) > 20  # edges removed, by aspect versions and by deletes at either end
    reached_any = 0
    for case in range(300):
        target = dataset(rng.randrange(entities))
        direction = rng.choice(["upstream", "downstream"])
        depth = rng.randint(0, 4)
        start = rng.randrange(1_000, 2_000_000)
        end = start + rng.randint(1, 1_000_000)
        got = impact(target, edges, events, direction=direction, depth=depth, start_ms=start, end_ms=end)
        expected = brute_force(history, events, target, direction, depth, start, end)
        assert [(r.event.event_id, r.hop, r.path) for r in got] == expected, (case, target, direction, depth, start, end)
        reached_any += sum(1 for r in got if r.hop >= 2)
    assert reached_any > 20


def test_impact_over_a_generated_lineage_history_equals_the_brute_force(spark):
    records = lineage_history(seed=11, datasets=14, jobs=4, charts=5, dashboards=2, changes=260, gap_ms=1_000)
    snapshots_df = bronze_df(spark, to_bronze_rows(records, "generated"))
    versions_df = with_patches_applied(to_sequenced_batch(snapshots_df, to_empty_state(snapshots_df))).filter(
        f"disposition = '{ACCEPTED}'"
    )
    rows = to_lineage_edges(versions_df).collect()
    kinds = {r.edge_kind for r in rows}
    assert {"dataset", "column", "job-input", "job-output", "chart-input", "dashboard-chart", "dashboard-dataset"} <= kinds
    edges = [Edge(r.upstream_urn, r.downstream_urn, r.valid_from_time, r.valid_to_time) for r in rows if r.edge_kind != COLUMN_KIND]
    history = [(r["entityUrn"], r["entityType"], r["aspectName"], None, int(r["systemMetadata"]["version"]),
                r["created"]["time"], r["created"]["actor"], r["aspect"]["value"] if "aspect" in r else None)
               for r in records]  # fmt: skip
    first, last = history[0][5], history[-1][5]
    rng = random.Random(11)
    urns = sorted({h[0] for h in history} | {e.upstream_urn for e in edges})
    events = [ChangeEvent(f"g{i}", rng.choice(urns), rng.randrange(first, last + 1_000) * 2 + 1 - first, "TAG", "ADD", None)
              for i in range(150)]  # fmt: skip
    reached = 0
    for case in range(150):
        target, direction, depth = rng.choice(urns), rng.choice(["upstream", "downstream"]), rng.randint(0, 5)
        start = rng.randrange(first, 2 * last - first)
        end = start + rng.randint(1, last - first)
        got = impact(target, edges, events, direction=direction, depth=depth, start_ms=start, end_ms=end)
        expected = brute_force(history, events, target, direction, depth, start, end)
        assert [(r.event.event_id, r.hop, r.path) for r in got] == expected, (case, target, direction, depth, start, end)
        reached += sum(1 for r in got if r.hop >= 2)
    assert reached > 20


def test_an_edge_removed_before_or_added_after_an_event_does_not_connect():
    a, b, c = dataset(1), dataset(2), dataset(3)
    edges = [Edge(a, b, 100, 200), Edge(c, b, 300)]
    events = [ChangeEvent("ea", a, 150, "TAG", "ADD", None), ChangeEvent("ea2", a, 250, "TAG", "ADD", None),
              ChangeEvent("ec", c, 250, "TAG", "ADD", None), ChangeEvent("ec2", c, 300, "TAG", "ADD", None)]  # fmt: skip
    got = impact(b, edges, events, direction="upstream", depth=2, start_ms=0, end_ms=1_000)
    assert [(r.event.event_id, r.path) for r in got] == [("ea", (b, a)), ("ec2", (b, c))]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"direction": "sideways"}, "direction: 'sideways'"),
        ({"depth": 11}, "depth: 11"),
        ({"start_ms": 5, "end_ms": 5}, "start: 5"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    given = {"direction": "upstream", "depth": 1, "start_ms": 0, "end_ms": 10, **arguments}
    with pytest.raises(InputError, match=message):
        impact(dataset(1), [], [], **given)


def test_the_graph_at_a_time_holds_the_edges_valid_then_nearest_entities_first():
    a, b, c, d = dataset(1), dataset(2), dataset(3), dataset(4)
    index = EdgeIndex([Edge(a, b, 100, 200, "dataset"), Edge(c, b, 300, None, "dataset"), Edge(d, c, 0, None, "dataset"),
                       Edge(b, a, 0, None, "dataset")])  # fmt: skip
    early = graph_at(b, index, direction="upstream", depth=3, at_ms=150, max_entities=10)
    # The cycle back to the target is drawn too.
    assert (early.hops, early.edges, early.truncated) == ({b: 0, a: 1}, ((a, b, ("dataset",)), (b, a, ("dataset",))), False)
    late = graph_at(b, index, direction="upstream", depth=3, at_ms=300, max_entities=10)
    assert late.hops == {b: 0, c: 1, d: 2} and late.edges == ((c, b, ("dataset",)), (d, c, ("dataset",)))
    assert graph_at(a, index, direction="downstream", depth=2, at_ms=150, max_entities=10).edges == (
        (a, b, ("dataset",)), (b, a, ("dataset",)),
    )
    cut = graph_at(b, index, direction="upstream", depth=3, at_ms=300, max_entities=2)
    assert (cut.hops, cut.truncated) == ({b: 0, c: 1}, True)
