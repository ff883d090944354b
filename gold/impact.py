"""Change impact across lineage: the change events on entities connected to one entity when they happened.

An event at time t on entity E reaches the target T (direction upstream: E feeds T; downstream: T
feeds E) when a path of at most `depth` edges, each valid at t (valid_from_time <= t < valid_to_time),
leads from T to E. The path reported is the shortest, and among the shortest the smallest by its
urns in order, so the answer does not depend on the order edges are read in.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
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


def reachable(
    target: str, index: EdgeIndex, direction: str, depth: int, keep: Callable[[Edge], bool], seen: set[Edge] | None = None
) -> dict[str, tuple[str, ...]]:
    """Every entity within `depth` hops of `target` over the edges `keep` accepts, with its path.

    Args:
        target: the urn the paths start at.
        index: the edges by their ends.
        direction: upstream walks from downstream to upstream ends, downstream the other way.
        depth: the most hops a path takes (0: the target alone).
        keep: which edges count (valid at a time, or at some time of a window).
        seen: when given, receives every kept edge leaving an entity the walk expanded (those to
            entities reached before included).

    Returns:
        urn -> path (the target first): the shortest, and among the shortest the smallest by its urns.
    """
    paths = {target: (target,)}
    frontier = [target]
    for _ in range(depth):
        reached: dict[str, tuple[str, ...]] = {}
        for node in frontier:
            for nxt, edge in index.steps(node, direction):
                if not keep(edge):
                    continue
                if seen is not None:
                    seen.add(edge)
                if nxt in paths:
                    continue
                path = (*paths[node], nxt)
                if nxt not in reached or path < reached[nxt]:
                    reached[nxt] = path
        if not reached:
            break
        paths.update(reached)
        frontier = sorted(reached)
    return paths


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

    The graph is walked once over the edges valid at some time of the window (an entity out of that
    reach is connected at no time of it), then once per span of time in which none of the edges that
    walk took changed, not once per event.

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

    def in_window(edge: Edge) -> bool:
        return edge.valid_from_time < end_ms and (edge.valid_to_time is None or edge.valid_to_time > start_ms)

    taken: set[Edge] = set()
    candidates = reachable(target, index, direction, depth, in_window, taken)
    window_events = [e for e in events if start_ms <= e.event_time < end_ms and e.entity_urn in candidates]
    # A walk at any time of the window expands only entities the window's walk expanded (an entity's hop
    # then is never below its hop over the whole window), so it reads only edges that walk saw: the graph
    # it sees changes only where one of those starts or ends.
    bounds = sorted({t for e in taken for t in (e.valid_from_time, e.valid_to_time) if t is not None})
    graphs: dict[int, dict[str, tuple[str, ...]]] = {}
    rows = []
    for event in window_events:
        span = bisect.bisect_right(bounds, event.event_time)
        if span not in graphs:
            graphs[span] = reachable(target, index, direction, depth, lambda edge, t=event.event_time: edge.valid_at(t))
        path = graphs[span].get(event.entity_urn)
        if path is not None:
            rows.append(ImpactRow(event, len(path) - 1, path))
    return sorted(rows, key=lambda r: (r.hop, r.event.event_time, r.event.event_id))
