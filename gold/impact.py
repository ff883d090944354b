"""Change impact across lineage: the change events on entities connected to one entity when they happened.

An event at time t on entity E reaches the target T (direction upstream: E feeds T; downstream: T
feeds E) when a path of at most `depth` edges, each valid at t (valid_from_time <= t < valid_to_time),
leads from T to E. The path reported is the shortest, and among the shortest the smallest by its
urns in order, so the answer does not depend on the order edges are read in.

One module over 400 lines: the index of edge spans and the walk over it are one algorithm, each half
meaningless without the other.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError

DIRECTIONS = ("upstream", "downstream")
# The kind of the edges between schema fields (fineGrainedLineages): not walked between entities.
COLUMN_KIND = "column"
# gold.lineage_edges: the publish that appended a row; an owner's edges are its rows of its newest publish.
PUBLISHED_SEQ = "published_seq"


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


# valid_to of an edge still holding, in the index's arrays.
_OPEN = np.iinfo(np.int64).max
_ARROW_COLUMNS = ("upstream_urn", "downstream_urn", "valid_from_time", "valid_to_time", "edge_kind")


class EdgeIndex:
    """Lineage edge spans by their ends, so a walk reads only the edges of the entities it reaches.

    Build one per version of the edges and reuse it: a query then costs what its neighbourhood holds.
    Entities are numbered; the edges are held as arrays (ends, validity) sorted by each end, so a walk
    steps from a whole set of entities at once.
    """

    def __init__(self, edges: Iterable[Edge]):
        listed = list(edges)
        self._build(
            pa.array([e.upstream_urn for e in listed], pa.string()), pa.array([e.downstream_urn for e in listed], pa.string()),
            pa.array([e.valid_from_time for e in listed], pa.int64()), pa.array([e.valid_to_time for e in listed], pa.int64()),
            pa.array([e.edge_kind for e in listed], pa.string()),
        )  # fmt: skip

    @classmethod
    def from_arrow(cls, edges: pa.Table) -> EdgeIndex:
        """The index of a table of edge spans (upstream_urn, downstream_urn, valid_from_time, valid_to_time, edge_kind)."""
        index = cls.__new__(cls)
        index._build(*(edges[name].combine_chunks() for name in _ARROW_COLUMNS))
        return index

    def _build(self, upstream: pa.Array, downstream: pa.Array, valid_from: pa.Array, valid_to: pa.Array, kinds: pa.Array) -> None:
        # Entities numbered by dictionary encoding, without a loop over the edges.
        encoded = pc.dictionary_encode(pa.concat_arrays([upstream, downstream]))
        self.urns: list[str] = encoded.dictionary.to_pylist()
        self.ids = {urn: number for number, urn in enumerate(self.urns)}
        ends = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        pairs = np.stack([ends[: len(upstream)], ends[len(upstream) :]], axis=1)
        self.valid_from = valid_from.to_numpy(zero_copy_only=False).astype(np.int64)
        self.valid_to = pc.fill_null(valid_to, _OPEN).to_numpy(zero_copy_only=False).astype(np.int64)
        kind_codes = pc.dictionary_encode(kinds)
        self._kinds, self._kind_names = kind_codes.indices.to_numpy(zero_copy_only=False), kind_codes.dictionary.to_pylist()
        self._pairs = pairs
        # Per direction: the edges sorted by the end a walk leaves from, where each entity's run starts,
        # and the entity each edge leads to. Walking upstream leaves an entity by the edges it is the
        # downstream end of.
        self._runs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for direction, (leave, reach) in {"upstream": (1, 0), "downstream": (0, 1)}.items():
            order = np.argsort(pairs[:, leave], kind="stable")
            starts = np.searchsorted(pairs[order, leave], np.arange(len(self.urns) + 1))
            self._runs[direction] = (order, starts, pairs[:, reach])

    def steps(self, node: str, direction: str) -> list[tuple[str, Edge]]:
        """The (next entity, edge) pairs leaving `node` in `direction`."""
        if node not in self.ids:
            return []
        edges, reached = self.leaving(np.array([self.ids[node]], dtype=np.int64), direction)
        return [
            (self.urns[nxt], Edge(self.urns[self._pairs[edge, 0]], self.urns[self._pairs[edge, 1]], int(self.valid_from[edge]),
                                  None if self.valid_to[edge] == _OPEN else int(self.valid_to[edge]),
                                  self._kind_names[self._kinds[edge]]))
            for edge, nxt in zip(edges.tolist(), reached.tolist())
        ]  # fmt: skip

    def run_lengths(self, nodes: np.ndarray, direction: str) -> np.ndarray:
        """How many edges leave each of the entities `nodes` (ids) in `direction`."""
        starts = self._runs[direction][1]
        return starts[nodes + 1] - starts[nodes]

    def leaving_one(self, node: int, direction: str) -> tuple[np.ndarray, np.ndarray]:
        """The edges (indices) leaving the entity `node` (id) in `direction`, and the entity each leads to."""
        order, starts, reach = self._runs[direction]
        edges = order[starts[node] : starts[node + 1]]
        return edges, reach[edges]

    def leaving(self, nodes: np.ndarray, direction: str) -> tuple[np.ndarray, np.ndarray]:
        """The edges (indices) leaving the entities `nodes` (ids) in `direction`, and the entity each leads to."""
        order, starts, reach = self._runs[direction]
        first, counts = starts[nodes], starts[nodes + 1] - starts[nodes]
        total = int(counts.sum())
        offsets = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(total)
        edges = order[offsets]
        return edges, reach[edges]


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

    The graph is walked once, each entity labelled with the hop at which it lies throughout the
    window, or with the spans of time in which it lies at each hop (`_levels`); an event then reads its
    hop there, and its path is rebuilt backwards from it through entities one hop nearer at the event's
    time (shared by the events between the same changes of the walked edges).

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
    _check_walk(direction, depth, start_ms, end_ms)
    index = edges if isinstance(edges, EdgeIndex) else EdgeIndex(edges)
    listed = list(events)
    found = reached_events(target, index, pa.array([e.entity_urn for e in listed], pa.string()),
                           np.array([e.event_time for e in listed], dtype=np.int64), direction=direction, depth=depth,
                           start_ms=start_ms, end_ms=end_ms)  # fmt: skip
    rows = [ImpactRow(listed[position], hop, path) for position, hop, path in found]
    return sorted(rows, key=lambda r: (r.hop, r.event.event_time, r.event.event_id))


def reached_events(
    target: str,
    index: EdgeIndex,
    entity_urns: pa.Array | pa.ChunkedArray,
    event_times: np.ndarray,
    *,
    direction: str,
    depth: int,
    start_ms: int,
    end_ms: int,
) -> list[tuple[int, int, tuple[str, ...]]]:
    """Which of the events given as columns reached `target` (`impact`'s rule), with their hop and path.

    The events are looked up as arrays (each distinct entity once, each event's hop read from the
    walk's labels), so a window of many events costs what the events that reached the target cost.

    Args:
        target: the entity urn asked about.
        index: the lineage edge spans by their ends.
        entity_urns: each event's entity (non-null strings).
        event_times: each event's time (epoch ms), in the same order.
        direction, depth, start_ms, end_ms: as `impact` takes them.

    Returns:
        (position in the columns, hop, path) of each event that reached the target, in column order.

    Raises:
        InputError: naming a bad direction, depth or window.
    """
    _check_walk(direction, depth, start_ms, end_ms)
    times = np.asarray(event_times, dtype=np.int64)
    urns = entity_urns.combine_chunks() if isinstance(entity_urns, pa.ChunkedArray) else entity_urns
    inside = (times >= start_ms) & (times < end_ms)
    if target not in index.ids:
        own = np.asarray(pc.equal(urns, target).to_numpy(zero_copy_only=False), dtype=bool) & inside
        return [(int(position), 0, (target,)) for position in np.flatnonzero(own)]
    encoded = pc.dictionary_encode(urns)
    numbered = np.array([index.ids.get(urn, -1) for urn in encoded.dictionary.to_pylist()], dtype=np.int64)
    nodes = numbered[encoded.indices.to_numpy(zero_copy_only=False)] if len(urns) else _NO_IDS
    levels = _levels(index.ids[target], index, direction, depth, start_ms, end_ms)
    known = inside & (nodes >= 0)
    hops = np.full(len(nodes), -1, dtype=np.int64)
    hops[known] = levels.hops_at(nodes[known], times[known])
    back = "downstream" if direction == "upstream" else "upstream"
    known_paths: dict[tuple[int, int, int], tuple[str, ...]] = {}
    found = []
    for position in np.flatnonzero(hops >= 0).tolist():
        time_ms, hop = int(times[position]), int(hops[position])
        epoch = bisect.bisect_right(levels.cuts, time_ms)
        path = _smallest_path(int(nodes[position]), hop, time_ms, epoch, levels, index, back, known_paths)
        found.append((position, hop, path))
    return found


def _check_walk(direction: str, depth: int, start_ms: int, end_ms: int) -> None:
    check_direction(direction)
    if not 0 <= depth <= 10:
        raise InputError(f"depth: {depth} must be between 0 and 10")
    if start_ms >= end_ms:
        raise InputError(f"start: {start_ms} must be before the end {end_ms}")


# Spans of time of entities: (entity ids, starts, ends) arrays sorted by entity then start, the spans
# of one entity disjoint and [start, end) in epoch ms.
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def _span_hits(spans: Spans, nodes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each (entity, time) of `nodes` and `times`, whether one of the entity's `spans` holds that time."""
    span_nodes, starts, ends = spans
    first = span_nodes.searchsorted(nodes)
    counts = span_nodes.searchsorted(nodes, "right") - first
    total = int(counts.sum())
    hits = np.zeros(len(nodes), dtype=bool)
    if total:
        asked = np.repeat(np.arange(len(nodes)), counts)
        candidates = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(total)
        at = times[asked]
        hits[asked[(starts[candidates] <= at) & (at < ends[candidates])]] = True
    return hits


@dataclass
class _Levels:
    """Where each entity lies from the target during the window (entity ids of an `EdgeIndex`).

    `whole[e]` is the hop at which e lies throughout the window (-1: none); `partial[k]` holds the
    spans in which entities lie k hops away for part of it. `cuts` are the times within the window
    at which a walked edge starts or ends: between two, the graph the walk saw does not change.
    """

    whole: np.ndarray
    partial: list[Spans]
    cuts: list[int]

    def hops_at(self, nodes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The hop at which each entity of `nodes` lies at the time of `times` (-1: not within the depth then)."""
        hops = self.whole[nodes].astype(np.int64)
        for hop, spans in enumerate(self.partial):
            open_ = np.flatnonzero(hops < 0)
            hops[open_[_span_hits(spans, nodes[open_], times[open_])]] = hop
        return hops


def _levels(target: int, index: EdgeIndex, direction: str, depth: int, start_ms: int, end_ms: int) -> _Levels:
    """Per hop k, the entities whose shortest path from `target` has k edges, throughout the window or in spans of it.

    An entity is k + 1 hops away at t when an entity k hops away then has an edge to it valid then, and
    it is not nearer: so each hop is built from the one before alone. The entities reached throughout
    the window by edges holding throughout it (nearly all, as edges change rarely) are a set; the
    others carry their spans (`_new_spans`). Both are stepped as arrays.
    """
    width = end_ms - start_ms
    whole = np.full(len(index.urns), -1, dtype=np.int8)
    # Lies nearer throughout the window (no span left to gain); lies nearer in part of it, for how long.
    covered = np.zeros(len(index.urns), dtype=bool)
    spanned = np.zeros(len(index.urns), dtype=bool)
    nearer_ms = np.zeros(len(index.urns), dtype=np.int64)
    nearer = (_NO_IDS, _NO_IDS, _NO_IDS)
    whole[target], covered[target] = 0, True
    partial: list[Spans] = [(_NO_IDS, _NO_IDS, _NO_IDS)]
    frontier = np.array([target], dtype=np.int64)
    cuts: list[np.ndarray] = []
    for hop in range(1, depth + 1):
        # From the entities lying there throughout the window: an edge holding throughout makes a
        # whole candidate (a span of the whole window for one lying nearer in part of it), one
        # holding in part of the window a span.
        edges, reached = index.leaving(frontier, direction)
        valid_from, valid_to = index.valid_from[edges], index.valid_to[edges]
        throughout = (valid_from <= start_ms) & (valid_to >= end_ms)
        some = ~throughout & (valid_from < end_ms) & (valid_to > start_ms)
        cuts.append(_inside(valid_from[some], valid_to[some], start_ms, end_ms))
        candidates = _distinct(reached[throughout & ~covered[reached]], len(index.urns))
        fresh = candidates[~spanned[candidates]]
        rest = candidates[spanned[candidates]]
        steps = [(rest, np.full(len(rest), start_ms), np.full(len(rest), end_ms)),
                 (reached[some], np.maximum(valid_from[some], start_ms), np.minimum(valid_to[some], end_ms))]  # fmt: skip
        # From the entities lying there in spans: each span steps along its entity's edges.
        sources, span_starts, span_ends = partial[-1]
        if len(sources):
            edges, reached = index.leaving(sources, direction)
            runs = index.run_lengths(sources, direction)
            valid_from, valid_to = index.valid_from[edges], index.valid_to[edges]
            cuts.append(_inside(valid_from, valid_to, start_ms, end_ms))
            steps.append((reached, np.maximum(valid_from, np.repeat(span_starts, runs)),
                          np.minimum(valid_to, np.repeat(span_ends, runs))))  # fmt: skip
        whole[fresh], covered[fresh] = hop, True
        nodes, lows, highs = (np.concatenate(column).astype(np.int64) for column in zip(*steps))
        keep = (lows < highs) & ~covered[nodes]
        new = _new_spans(nodes[keep], lows[keep], highs[keep], *nearer)
        nearer = tuple(np.concatenate([old, more]) for old, more in zip(nearer, new))
        np.add.at(nearer_ms, new[0], new[2] - new[1])
        spanned[new[0]] = True
        covered[new[0]] = nearer_ms[new[0]] >= width
        partial.append(new)
        frontier = fresh
        if not len(fresh) and not len(new[0]):
            break
    return _Levels(whole, partial, np.unique(np.concatenate([_NO_IDS, *cuts])).tolist())


_NO_IDS = np.zeros(0, dtype=np.int64)


def _new_spans(
    nodes: np.ndarray, lows: np.ndarray, highs: np.ndarray,
    near_nodes: np.ndarray, near_starts: np.ndarray, near_ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per entity, the union of its spans [lows, highs) less the union of its nearer spans, as arrays.

    A sweep over every span's bounds, sorted by entity and time: counts of the spans gained and of the
    nearer ones covering each stretch between two bounds; the stretches gained and not nearer are kept
    and joined where they touch.

    Returns:
        (entity, start, end): sorted, disjoint and not touching within an entity.
    """
    if not len(nodes):
        return _NO_IDS, _NO_IDS, _NO_IDS
    kept = np.isin(near_nodes, nodes)
    near_nodes, near_starts, near_ends = near_nodes[kept], near_starts[kept], near_ends[kept]
    ones, near_ones = np.ones(len(nodes), dtype=np.int64), np.ones(len(near_nodes), dtype=np.int64)
    point_nodes = np.concatenate([nodes, nodes, near_nodes, near_nodes])
    times = np.concatenate([lows, highs, near_starts, near_ends])
    gains = np.concatenate([ones, -ones, 0 * near_ones, 0 * near_ones])
    losses = np.concatenate([0 * ones, 0 * ones, near_ones, -near_ones])
    order = np.lexsort((times, point_nodes))
    point_nodes, times = point_nodes[order], times[order]
    gained, lost = np.cumsum(gains[order]), np.cumsum(losses[order])
    # The state after the last bound of each (entity, time): bounds at one time count together.
    last = np.ones(len(times), dtype=bool)
    last[:-1] = (point_nodes[1:] != point_nodes[:-1]) | (times[1:] != times[:-1])
    point_nodes, times, on = point_nodes[last], times[last], (gained[last] > 0) & (lost[last] == 0)
    stretch = on[:-1] & (point_nodes[1:] == point_nodes[:-1])
    nodes, starts, ends = point_nodes[:-1][stretch], times[:-1][stretch], times[1:][stretch]
    if not len(nodes):
        return _NO_IDS, _NO_IDS, _NO_IDS
    first = np.ones(len(nodes), dtype=bool)
    first[1:] = (nodes[1:] != nodes[:-1]) | (starts[1:] != ends[:-1])
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], len(nodes)) - 1
    return nodes[heads], starts[heads], ends[tails]


def _distinct(nodes: np.ndarray, size: int) -> np.ndarray:
    """The distinct entity ids of `nodes`, sorted (a mask over every entity: faster than sorting many)."""
    seen = np.zeros(size, dtype=bool)
    seen[nodes] = True
    return np.flatnonzero(seen)


def _inside(valid_from: np.ndarray, valid_to: np.ndarray, start_ms: int, end_ms: int) -> np.ndarray:
    """The times strictly inside [start_ms, end_ms) at which the given edges start or end."""
    times = np.concatenate([valid_from, valid_to])
    return times[(times > start_ms) & (times < end_ms)]


def _smallest_path(
    node: int, hop: int, time_ms: int, epoch: int, levels: _Levels, index: EdgeIndex, back: str,
    known: dict[tuple[int, int, int], tuple[str, ...]],
) -> tuple[str, ...]:
    """The smallest by urns of the shortest paths to `node` (`hop` edges) at `time_ms`, from the target.

    Memoized per (entity, hop, epoch): between two cuts every walked edge and level holds alike.
    """
    if hop == 0:
        return (index.urns[node],)
    if (node, hop, epoch) not in known:
        edges, previous = index.leaving_one(node, back)
        previous = previous[(index.valid_from[edges] <= time_ms) & (time_ms < index.valid_to[edges])]
        # An entity lies at one hop throughout the window or at hops in spans of it, never both.
        at_hop = levels.whole[previous]
        befores = previous[at_hop == hop - 1]
        if hop - 1 < len(levels.partial):
            spanned = previous[at_hop < 0]
            hits = _span_hits(levels.partial[hop - 1], spanned, np.full(len(spanned), time_ms, dtype=np.int64))
            befores = np.concatenate([befores, spanned[hits]])
        paths = [
            _smallest_path(before, hop - 1, time_ms, epoch, levels, index, back, known)
            for before in set(befores.tolist())
        ]
        known[node, hop, epoch] = (*min(paths), index.urns[node])
    return known[node, hop, epoch]
