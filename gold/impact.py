"""Change impact across lineage: the change events on entities connected to one entity when they happened.

An event at time t on entity E reaches the target T (direction upstream: E feeds T; downstream: T
feeds E) when a path of at most `depth` edges, each valid at t (valid_from_time <= t < valid_to_time),
leads from T to E. The path reported is the shortest, and among the shortest the smallest by its
urns in order, so the answer does not depend on the order edges are read in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from conf.errors import InputError

DIRECTIONS = ("upstream", "downstream")
# The kind of the edges between schema fields (fineGrainedLineages): not walked between entities.
COLUMN_KIND = "column"


@dataclass(frozen=True)
class Edge:
    """One lineage edge span (a row of gold.lineage_edges)."""

    upstream_urn: str
    downstream_urn: str
    valid_from_time: int
    valid_to_time: int | None = None
    edge_kind: str = ""

    def valid_at(self, time_ms: int) -> bool:
        """True when the edge held at `time_ms`."""
        return self.valid_from_time <= time_ms and (self.valid_to_time is None or time_ms < self.valid_to_time)


@dataclass(frozen=True)
class ChangeEvent:
    """One change event (a row of silver.entity_change_events, the fields the impact names)."""

    event_id: str
    entity_urn: str
    event_time: int
    category: str
    operation: str
    actor: str | None


@dataclass(frozen=True)
class ImpactRow:
    """One change event that reached the target, with the hops it took then (path[0] the target)."""

    event: ChangeEvent
    hop: int
    path: tuple[str, ...]


def check_direction(direction: str) -> str:
    """Return `direction` when it is upstream or downstream.

    Raises:
        InputError: naming the value otherwise.
    """
    if direction not in DIRECTIONS:
        raise InputError(f"direction: {direction!r} is not one of {', '.join(DIRECTIONS)}")
    return direction


class EdgeIndex:
    """Lineage edge spans by their ends, so a walk reads only the edges of the entities it reaches.

    Build one per version of the edges and reuse it: a query then costs what its neighbourhood holds.
    """

    def __init__(self, edges: Iterable[Edge]):
        self._by_end: dict[str, dict[str, list[Edge]]] = {"upstream": {}, "downstream": {}}
        for edge in edges:
            # Walking upstream leaves an entity by the edges it is the downstream end of.
            self._by_end["upstream"].setdefault(edge.downstream_urn, []).append(edge)
            self._by_end["downstream"].setdefault(edge.upstream_urn, []).append(edge)

    def steps(self, node: str, direction: str) -> list[tuple[str, Edge]]:
        """The (next entity, edge) pairs leaving `node` in `direction`."""
        edges = self._by_end[direction].get(node, ())
        if direction == "upstream":
            return [(edge.upstream_urn, edge) for edge in edges]
        return [(edge.downstream_urn, edge) for edge in edges]


@dataclass(frozen=True)
class LineageGraph:
    """The entities within `depth` hops of a target at one time, and the edges between them then.

    `hops` maps each entity to its hop (0: the target); `edges` holds (upstream, downstream, kinds)
    triples, kinds the edge kinds joining the two, sorted; `truncated` says the walk stopped at its
    entity limit before reaching the depth.
    """

    hops: dict[str, int]
    edges: tuple[tuple[str, str, tuple[str, ...]], ...]
    truncated: bool


def graph_at(target: str, index: EdgeIndex, *, direction: str, depth: int, at_ms: int, max_entities: int) -> LineageGraph:
    """The lineage graph around `target` as it was at `at_ms`: the entities at most `depth` hops away then.

    Args:
        target: the entity urn asked about.
        index: the lineage edge spans (entity edges), by their ends.
        direction: upstream (what fed the target then) or downstream (what it fed).
        depth: the most hops (0 to 10).
        at_ms: the time the graph is taken at (epoch ms).
        max_entities: the most entities kept; the walk stops there (nearest first, by urn within a hop).

    Raises:
        InputError: naming a bad direction or depth.
    """
    check_direction(direction)
    if not 0 <= depth <= 10:
        raise InputError(f"depth: {depth} must be between 0 and 10")
    hops = {target: 0}
    kinds: dict[tuple[str, str], set[str]] = {}
    frontier, truncated = [target], False
    for hop in range(1, depth + 1):
        reached: dict[str, list[tuple[str, Edge]]] = {}
        for node in frontier:
            for nxt, edge in index.steps(node, direction):
                if edge.valid_at(at_ms):
                    reached.setdefault(nxt, []).append((node, edge))
        frontier = []
        for nxt in sorted(reached):
            if nxt not in hops:
                if len(hops) >= max_entities:
                    truncated = True
                    continue
                hops[nxt] = hop
                frontier.append(nxt)
            for node, edge in reached[nxt]:
                pair = (node, nxt) if direction == "downstream" else (nxt, node)
                kinds.setdefault(pair, set()).add(edge.edge_kind)
        if not frontier:
            break
    edges = tuple(sorted((up, down, tuple(sorted(k))) for (up, down), k in kinds.items()))
    return LineageGraph(hops, edges, truncated)


def impact(
    target: str,
    edges: Iterable[Edge] | EdgeIndex,
    events: Iterable[ChangeEvent],
    *,
    direction: str,
    depth: int,
    start_ms: int,
    end_ms: int,
) -> list[ImpactRow]:
    """The events of [start_ms, end_ms) on entities connected to `target` at each event's time.

    The graph is walked once, each entity labelled with the spans of time in which it lies at each hop
    (`_levels`); an event then reads its hop there, and its path is rebuilt backwards from it through
    entities one hop nearer at the event's time.

    Args:
        target: the entity urn asked about.
        edges: lineage edge spans (entity edges: column edges connect schema fields, not entities), or
            an `EdgeIndex` of them.
        events: change events (any; those outside the window are left out).
        direction: upstream (what feeds the target) or downstream (what the target feeds).
        depth: the most hops (0 to 10); hop 0 is the target's own changes.
        start_ms: window start, included.
        end_ms: window end, excluded.

    Returns:
        One row per event reached, ordered by hop, time and event id.

    Raises:
        InputError: naming a bad direction, depth or window.
    """
    check_direction(direction)
    if not 0 <= depth <= 10:
        raise InputError(f"depth: {depth} must be between 0 and 10")
    if start_ms >= end_ms:
        raise InputError(f"start: {start_ms} must be before the end {end_ms}")
    index = edges if isinstance(edges, EdgeIndex) else EdgeIndex(edges)
    levels = _levels(target, index, direction, depth, start_ms, end_ms)
    back = "downstream" if direction == "upstream" else "upstream"
    rows = []
    for event in events:
        if not start_ms <= event.event_time < end_ms:
            continue
        hop = next((k for k, level in enumerate(levels) if _holds(level.get(event.entity_urn), event.event_time)), None)
        if hop is not None:
            path = _smallest_path(event.entity_urn, hop, event.event_time, levels, index, back, {})
            rows.append(ImpactRow(event, hop, path))
    return sorted(rows, key=lambda r: (r.hop, r.event.event_time, r.event.event_id))


# Spans of time: sorted, disjoint [start, end) pairs in epoch ms (end inf: still open).
Spans = list[tuple[float, float]]


def _merged(spans: Iterable[tuple[float, float]]) -> Spans:
    merged: Spans = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _without(spans: Spans, removed: Spans) -> Spans:
    kept: Spans = []
    for start, end in spans:
        for cut_start, cut_end in removed:
            if cut_end <= start or cut_start >= end:
                continue
            if cut_start > start:
                kept.append((start, cut_start))
            start = max(start, cut_end)
            if start >= end:
                break
        if start < end:
            kept.append((start, end))
    return kept


def _holds(spans: Spans | None, time_ms: int) -> bool:
    if not spans:
        return False
    at = bisect.bisect_right(spans, (time_ms, float("inf"))) - 1
    return at >= 0 and spans[at][0] <= time_ms < spans[at][1]


def _levels(target: str, index: EdgeIndex, direction: str, depth: int, start_ms: int, end_ms: int) -> list[dict[str, Spans]]:
    """Per hop k, each entity with the spans of [start_ms, end_ms) in which its shortest path from `target` has k edges.

    An entity is k + 1 hops away at t when an entity k hops away then has an edge to it valid then, and
    it is not nearer: so each hop is built from the one before alone.
    """
    levels: list[dict[str, Spans]] = [{target: [(start_ms, end_ms)]}]
    nearer: dict[str, Spans] = {target: [(start_ms, end_ms)]}
    for _ in range(depth):
        gained: dict[str, list[tuple[float, float]]] = {}
        for node, spans in levels[-1].items():
            for nxt, edge in index.steps(node, direction):
                valid_to = float("inf") if edge.valid_to_time is None else edge.valid_to_time
                for start, end in spans:
                    low, high = max(start, edge.valid_from_time), min(end, valid_to)
                    if low < high:
                        gained.setdefault(nxt, []).append((low, high))
        level: dict[str, Spans] = {}
        for node, parts in gained.items():
            new = _without(_merged(parts), nearer.get(node, []))
            if new:
                level[node] = new
                nearer[node] = _merged([*nearer.get(node, []), *new])
        if not level:
            break
        levels.append(level)
    return levels


def _smallest_path(
    node: str, hop: int, time_ms: int, levels: list[dict[str, Spans]], index: EdgeIndex, back: str,
    known: dict[tuple[str, int], tuple[str, ...]],
) -> tuple[str, ...]:
    """The smallest by urns of the shortest paths to `node` (`hop` edges) at `time_ms`, from the target."""
    if hop == 0:
        return (node,)
    if (node, hop) not in known:
        paths = [
            _smallest_path(previous, hop - 1, time_ms, levels, index, back, known)
            for previous, edge in index.steps(node, back)
            if edge.valid_at(time_ms) and _holds(levels[hop - 1].get(previous), time_ms)
        ]
        known[node, hop] = (*min(paths), node)
    return known[node, hop]
