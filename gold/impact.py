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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    check_direction(direction)
    if not 0 <= depth <= 10:
        raise InputError(f"depth: {depth} must be between 0 and 10")
    if start_ms >= end_ms:
        raise InputError(f"start: {start_ms} must be before the end {end_ms}")
    index = edges if isinstance(edges, EdgeIndex) else EdgeIndex(edges)
    in_window = [event for event in events if start_ms <= event.event_time < end_ms]
    if target not in index.ids:
        return sorted((ImpactRow(e, 0, (target,)) for e in in_window if e.entity_urn == target),
                      key=lambda r: (r.event.event_time, r.event.event_id))  # fmt: skip
    levels = _levels(index.ids[target], index, direction, depth, start_ms, end_ms)
    back = "downstream" if direction == "upstream" else "upstream"
    known: dict[tuple[int, int, int], tuple[str, ...]] = {}
    rows = []
    for event in in_window:
        node = index.ids.get(event.entity_urn)
        hop = None if node is None else levels.hop_at(node, event.event_time)
        if hop is not None:
            epoch = bisect.bisect_right(levels.cuts, event.event_time)
            path = _smallest_path(node, hop, event.event_time, epoch, levels, index, back, known)
            rows.append(ImpactRow(event, hop, path))
    return sorted(rows, key=lambda r: (r.hop, r.event.event_time, r.event.event_id))


# Spans of time: sorted, disjoint [start, end) pairs in epoch ms.
Spans = list[tuple[int, int]]


def _holds(spans: Spans | None, time_ms: int) -> bool:
    if not spans:
        return False
    at = bisect.bisect_right(spans, (time_ms, _OPEN)) - 1
    return at >= 0 and spans[at][0] <= time_ms < spans[at][1]


@dataclass
class _Levels:
    """Where each entity lies from the target during the window (entity ids of an `EdgeIndex`).

    `whole[e]` is the hop at which e lies throughout the window (-1: none); `partial[k]` maps the
    entities lying k hops away for part of it to those spans. `cuts` are the times within the window
    at which a walked edge starts or ends: between two, the graph the walk saw does not change.
    """

    whole: np.ndarray
    partial: list[dict[int, Spans]]
    cuts: list[int]

    def holds(self, node: int, hop: int, time_ms: int) -> bool:
        """True when entity `node` lies `hop` hops away at `time_ms`."""
        return self.whole[node] == hop or (hop < len(self.partial) and _holds(self.partial[hop].get(node), time_ms))

    def hop_at(self, node: int, time_ms: int) -> int | None:
        """The hop at which entity `node` lies at `time_ms`, None when it is not within the depth then."""
        if self.whole[node] >= 0:
            return int(self.whole[node])
        return next((k for k, level in enumerate(self.partial) if _holds(level.get(node), time_ms)), None)


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
    partial: list[dict[int, Spans]] = [{}]
    frontier = np.array([target], dtype=np.int64)
    cuts: set[int] = set()
    for hop in range(1, depth + 1):
        # From the entities lying there throughout the window: an edge holding throughout makes a
        # whole candidate (a span of the whole window for one lying nearer in part of it), one
        # holding in part of the window a span.
        edges, reached = index.leaving(frontier, direction)
        valid_from, valid_to = index.valid_from[edges], index.valid_to[edges]
        throughout = (valid_from <= start_ms) & (valid_to >= end_ms)
        some = ~throughout & (valid_from < end_ms) & (valid_to > start_ms)
        cuts.update(_inside(valid_from[some], valid_to[some], start_ms, end_ms))
        candidates = np.unique(reached[throughout & ~covered[reached]])
        fresh = candidates[~spanned[candidates]]
        rest = candidates[spanned[candidates]]
        steps = [(rest, np.full(len(rest), start_ms), np.full(len(rest), end_ms)),
                 (reached[some], np.maximum(valid_from[some], start_ms), np.minimum(valid_to[some], end_ms))]  # fmt: skip
        # From the entities lying there in spans: each span steps along its entity's edges.
        if partial[-1]:
            sources, span_starts, span_ends = (np.array(column, dtype=np.int64) for column in zip(*(
                (source, span_start, span_end) for source, spans in partial[-1].items() for span_start, span_end in spans
            )))  # fmt: skip
            edges, reached = index.leaving(sources, direction)
            runs = index.run_lengths(sources, direction)
            valid_from, valid_to = index.valid_from[edges], index.valid_to[edges]
            cuts.update(_inside(valid_from, valid_to, start_ms, end_ms))
            steps.append((reached, np.maximum(valid_from, np.repeat(span_starts, runs)),
                          np.minimum(valid_to, np.repeat(span_ends, runs))))  # fmt: skip
        whole[fresh], covered[fresh] = hop, True
        nodes, lows, highs = (np.concatenate(column).astype(np.int64) for column in zip(*steps))
        keep = (lows < highs) & ~covered[nodes]
        new = _new_spans(nodes[keep], lows[keep], highs[keep], *nearer)
        level: dict[int, Spans] = {}
        for node, span_start, span_end in zip(*(column.tolist() for column in new)):
            level.setdefault(node, []).append((span_start, span_end))
        nearer = tuple(np.concatenate([old, more]) for old, more in zip(nearer, new))
        np.add.at(nearer_ms, new[0], new[2] - new[1])
        spanned[new[0]] = True
        covered[new[0]] = nearer_ms[new[0]] >= width
        partial.append(level)
        frontier = fresh
        if not len(fresh) and not level:
            break
    return _Levels(whole, partial, sorted(cuts))


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


def _inside(valid_from: np.ndarray, valid_to: np.ndarray, start_ms: int, end_ms: int) -> list[int]:
    """The times strictly inside [start_ms, end_ms) at which the given edges start or end."""
    times = np.concatenate([valid_from, valid_to])
    return times[(times > start_ms) & (times < end_ms)].tolist()


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
        edges, previous = index.leaving(np.array([node], dtype=np.int64), back)
        paths = [
            _smallest_path(before, hop - 1, time_ms, epoch, levels, index, back, known)
            for edge, before in zip(edges.tolist(), previous.tolist())
            if index.valid_from[edge] <= time_ms < index.valid_to[edge] and levels.holds(before, hop - 1, time_ms)
        ]
        known[node, hop, epoch] = (*min(paths), index.urns[node])
    return known[node, hop, epoch]
