"""GET /api/v1/impact: the change events that reached an entity through lineage as it was, within the caller's scope.

Read in-process from gold.lineage_edges and silver.entity_change_events (latest versions). A scoped
caller sees only the events on entities in its scope, counted alike; a path keeps its hops through
entities outside the scope as hidden nodes (their place, not their urn); an entity asked about outside
the scope answers 404, as one that does not exist.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from conf.errors import InputError, RequestError
from conf.locations import Location
from conf.settings import Settings
from conf.tables import table_location
from conf.values import parse_time_ms, whole_number
from gold.impact import (
    COLUMN_KIND, DIRECTIONS, PUBLISHED_SEQ, ChangeEvent, EdgeIndex, ImpactRow, LineageGraph, graph_at, reached_events,
)  # fmt: skip
from pipelines.runtime.storage import delta_storage_options, table_exists
from pipelines.serving.access_log import note_result
from pipelines.serving.anomalies import parse_window
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.explorer import check_parameters, entity_type_of, parse_urn
from pipelines.serving.scoped_reads import ChangeEventScope, EntityDomains, OutOfScopeError, change_event_scope
from pipelines.serving.tokens import TokenVerifier

IMPACT_PATH = "/api/v1/impact"
GRAPH_PATH = "/api/v1/impact/graph"
GRAPH_PARAMETERS = ("urn", "direction", "depth", "at")
# The most entities a graph answer draws: beyond it the explorer could not lay it out readably.
MAX_GRAPH_ENTITIES = 200
EDGES_TABLE = "gold.lineage_edges"
CHANGES_TABLE = "silver.entity_change_events"
PARAMETERS = ("urn", "direction", "depth", "since", "until")
DEFAULT_DEPTH = 3
DEFAULT_WINDOW_MS = 7 * 86_400_000
# Change event rows a server keeps in memory for impact windows (about 300 bytes each).
CACHED_EVENT_ROWS = 2_000_000
_EVENT_COLUMNS = ["event_id", "entity_urn", "entity_type", "event_time", "category", "operation", "actor",
                  "aspect_entity_urn", "aspect_entity_type"]  # fmt: skip


def parse_walk(params: Mapping[str, str]) -> tuple[str, str, int]:
    """Return (urn, direction, depth) from the URL parameters (default: upstream, depth 3).

    Raises:
        RequestError: naming the parameter and the value.
    """
    urn = parse_urn(params)
    direction = params.get("direction") or "upstream"
    if direction not in DIRECTIONS:
        raise RequestError(f"direction: {direction!r} is not one of {', '.join(DIRECTIONS)}")
    raw_depth = params.get("depth") or str(DEFAULT_DEPTH)
    depth = whole_number(raw_depth)
    if depth is None or depth > 10:
        raise RequestError(f"depth: {raw_depth!r} is not a whole number from 0 to 10")
    return urn, direction, depth


def parse_impact_query(params: Mapping[str, str], now_ms: int) -> tuple[str, str, int, int, int]:
    """Return (urn, direction, depth, since, until) from the URL parameters (window default: the last 7 days).

    Raises:
        RequestError: naming the parameter and the value.
    """
    urn, direction, depth = parse_walk(params)
    since, until = parse_window(params)
    until = until if until is not None else now_ms
    since = since if since is not None else until - DEFAULT_WINDOW_MS
    if since >= until:
        raise RequestError(f"since: {since} is not before until ({until})")
    return urn, direction, depth, since, until


def parse_graph_query(params: Mapping[str, str], now_ms: int) -> tuple[str, str, int, int]:
    """Return (urn, direction, depth, at) from the URL parameters (`at` default: now).

    Raises:
        RequestError: naming the parameter and the value.
    """
    urn, direction, depth = parse_walk(params)
    try:
        at = parse_time_ms(params["at"], "at") if params.get("at") else now_ms
    except InputError as exc:
        raise RequestError(str(exc)) from None
    return urn, direction, depth, at


class _TableProbe:
    """The latest version of a Delta table, its log read incrementally.

    Opening the table on every request reads its whole log: milliseconds each, more under load.
    """

    def __init__(self, location: Location):
        self._location = location
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None

    def latest(self) -> tuple[int, Callable[[], ds.Dataset]] | None:
        """(the latest version, a function opening it as a dataset), None while the table does not exist."""
        with self._lock:
            if self._table is None:
                if not table_exists(self._location):
                    return None
                self._table = DeltaTable(str(self._location), storage_options=delta_storage_options(self._location))
            else:
                self._table.update_incremental()
            table = self._table
            return table.version(), lambda: self._dataset(table)

    def _dataset(self, table: DeltaTable) -> ds.Dataset:
        with self._lock:
            return table.to_pyarrow_dataset()


class LineageIndex:
    """The entity edges of gold.lineage_edges as an `EdgeIndex`, built once per table version.

    Args:
        settings: the lakehouse settings (the table's location).
    """

    def __init__(self, settings: Settings):
        self._table = _TableProbe(table_location(settings, EDGES_TABLE))
        self._lock = threading.Lock()
        self._cached: tuple[int, EdgeIndex] | None = None

    def current(self) -> EdgeIndex:
        """The index of the table's latest version (empty while the table does not exist)."""
        latest = self._table.latest()
        if latest is None:
            return EdgeIndex(())
        version, dataset = latest
        with self._lock:
            if self._cached is not None and self._cached[0] == version:
                return self._cached[1]
        index = EdgeIndex.from_arrow(current_entity_edges(dataset()))
        with self._lock:
            self._cached = (version, index)
        return index


_EDGE_INDEX_COLUMNS = ["upstream_urn", "downstream_urn", "valid_from_time", "valid_to_time", "edge_kind"]


def current_entity_edges(edges: ds.Dataset) -> pa.Table:
    """The entity edges (column edges left out) of each owner's newest publish in gold.lineage_edges.

    A publish appends its owners' rows and one marker (edge_kind null) per owner under a higher
    published_seq: an owner with markers keeps only its rows of its newest marker's publish; the
    others (none published since the last compaction) keep all theirs, read as before.

    Args:
        edges: the table as a dataset.

    Returns:
        upstream_urn, downstream_urn, valid_from_time, valid_to_time, edge_kind.
    """
    entity_edges = ds.field("edge_kind") != COLUMN_KIND
    markers = edges.to_table(columns=["owner_urn", PUBLISHED_SEQ], filter=ds.field("edge_kind").is_null())
    if markers.num_rows == 0:
        return edges.to_table(columns=_EDGE_INDEX_COLUMNS, filter=entity_edges)
    newest = markers.group_by("owner_urn").aggregate([(PUBLISHED_SEQ, "max")])
    rows = edges.to_table(columns=[*_EDGE_INDEX_COLUMNS, "owner_urn", PUBLISHED_SEQ], filter=entity_edges)
    published = pc.is_in(rows["owner_urn"], value_set=newest["owner_urn"])
    untouched = rows.filter(pc.invert(published)).select(_EDGE_INDEX_COLUMNS)
    touched = rows.filter(published).join(newest, "owner_urn")
    newest_rows = pc.equal(pc.fill_null(touched[PUBLISHED_SEQ], 0), touched[f"{PUBLISHED_SEQ}_max"])
    return pa.concat_tables([untouched, touched.filter(newest_rows).select(_EDGE_INDEX_COLUMNS)])


class ChangeEventReader:
    """Reads windows of silver.entity_change_events, its data files kept in memory once read.

    The table is append-only, so a data file never changes: a file read for one window serves every
    later window over its days, across table versions. Making the dataset lists every data file (one per
    day and more): once per version, not per request.

    Args:
        settings: the lakehouse settings (the table's location).
        cached_rows: the most rows kept in memory (the files read longest ago are dropped first).
    """

    def __init__(self, settings: Settings, cached_rows: int = CACHED_EVENT_ROWS):
        self._table = _TableProbe(table_location(settings, CHANGES_TABLE))
        self._lock = threading.Lock()
        self._cached: tuple[int, ds.Dataset] | None = None
        self._cached_rows = cached_rows
        self._files: OrderedDict[str, pa.Table] = OrderedDict()
        self._rows = 0

    def _dataset(self) -> ds.Dataset | None:
        latest = self._table.latest()
        if latest is None:
            return None
        version, opened = latest
        with self._lock:
            if self._cached is not None and self._cached[0] == version:
                return self._cached[1]
        dataset = opened()
        with self._lock:
            self._cached = (version, dataset)
        return dataset

    def _file(self, fragment: ds.Fragment, schema: pa.Schema) -> pa.Table:
        with self._lock:
            if fragment.path in self._files:
                self._files.move_to_end(fragment.path)
                return self._files[fragment.path]
        rows = fragment.to_table(schema=schema, columns=_EVENT_COLUMNS)
        with self._lock:
            if fragment.path not in self._files:
                self._files[fragment.path] = rows
                self._rows += rows.num_rows
            while self._rows > self._cached_rows and len(self._files) > 1:
                self._rows -= self._files.popitem(last=False)[1].num_rows
        return rows

    def window(self, since: int, until: int, scope: ChangeEventScope) -> pa.Table:
        """The change events of [since, until) that `scope` shows (by the entity whose aspect was written)."""
        dataset = self._dataset()
        if dataset is None:
            return pa.table({name: pa.array([], pa.string()) for name in _EVENT_COLUMNS})
        # The event dates choose the files read; the times then cut the window exactly.
        first, last = (dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).date() for ms in (since, until - 1))
        days = (ds.field("event_date") >= first) & (ds.field("event_date") <= last)
        files = [self._file(fragment, dataset.schema) for fragment in dataset.get_fragments(filter=days)]
        condition = (ds.field("event_time") >= since) & (ds.field("event_time") < until)
        if scope.arrow is not None:
            condition = condition & scope.arrow
        if not files:
            return dataset.schema.empty_table().select(_EVENT_COLUMNS)
        # Files read under an earlier version of the schema are unified with the later ones.
        return pa.concat_tables(files, promote_options="permissive").filter(condition)


def reached_changes(
    index: EdgeIndex, events: pa.Table, urn: str, *, direction: str, depth: int, since: int, until: int
) -> tuple[list[ImpactRow], dict[str, dict[str, Any]]]:
    """The events of a window (`ChangeEventReader.window`) that reached `urn` (`gold.impact.impact`).

    Only the events that reached it are read out of the columns.

    Returns:
        The rows ordered by hop, time and event id, and those events' columns by event id.

    Raises:
        InputError: naming a bad direction, depth or window.
    """
    # An event belongs to the entity whose aspect was written (a schema field's to its dataset).
    owners = pc.coalesce(events["aspect_entity_urn"], events["entity_urn"])
    times = events["event_time"].to_numpy() if events.num_rows else np.zeros(0, dtype=np.int64)
    found = reached_events(urn, index, owners, times, direction=direction, depth=depth, start_ms=since, end_ms=until)
    picked = events.take(pa.array([position for position, _, _ in found], pa.int64())).to_pylist()
    rows = [
        ImpactRow(ChangeEvent(e["event_id"], e["aspect_entity_urn"] or e["entity_urn"], e["event_time"], e["category"],
                              e["operation"], e["actor"]), hop, path)
        for e, (_, hop, path) in zip(picked, found)
    ]  # fmt: skip
    rows.sort(key=lambda r: (r.hop, r.event.event_time, r.event.event_id))
    return rows, {e["event_id"]: e for e in picked}


def impact_response(rows: list[ImpactRow], events: Mapping[str, dict[str, Any]], scope: ChangeEventScope) -> list[dict[str, Any]]:
    """The JSON of each reached event, its path's nodes outside the scope hidden."""
    nodes = sorted({node for row in rows for node in row.path})
    shown = dict(zip(nodes, scope.visible_entities(nodes, [entity_type_of(n) for n in nodes])))
    return [
        {
            "hop": row.hop,
            "eventId": row.event.event_id,
            "entityUrn": events[row.event.event_id]["entity_urn"],
            "entityType": events[row.event.event_id]["entity_type"],
            "eventTime": row.event.event_time,
            "category": row.event.category,
            "operation": row.event.operation,
            "actor": row.event.actor,
            "path": [{"urn": node, "hidden": False} if shown[node] else {"urn": None, "hidden": True} for node in row.path],
        }
        for row in rows
    ]


def graph_response(graph: LineageGraph, scope: ChangeEventScope) -> dict[str, Any]:
    """The JSON of a graph: entities outside the scope as hidden nodes (their place, not their urn)."""
    nodes = sorted(graph.hops, key=lambda node: (graph.hops[node], node))
    shown = dict(zip(nodes, scope.visible_entities(nodes, [entity_type_of(n) for n in nodes])))
    ids = {node: f"n{number}" for number, node in enumerate(nodes)}
    return {
        "nodes": [
            {"id": ids[node], "hop": graph.hops[node], "hidden": not shown[node],
             "urn": node if shown[node] else None, "entityType": entity_type_of(node) if shown[node] else None}
            for node in nodes
        ],  # fmt: skip
        "edges": [{"from": ids[up], "to": ids[down], "kinds": list(kinds)} for up, down, kinds in graph.edges],
        "truncated": graph.truncated,
    }


def impact_router(settings: Settings, verifier: TokenVerifier) -> APIRouter:
    """Return the router of the impact endpoint, authenticated like the change search (audit-read, scoped)."""
    router = APIRouter()
    domains = EntityDomains(settings)
    lineage = LineageIndex(settings)
    change_events = ChangeEventReader(settings)

    def answer(urn: str, direction: str, depth: int, since: int, until: int, scope: ChangeEventScope) -> dict[str, Any]:
        if not scope.visible_entities([urn], [entity_type_of(urn)])[0]:
            raise OutOfScopeError(f"urn: {urn!r} is not in the caller's scope")
        try:
            rows, events = reached_changes(lineage.current(), change_events.window(since, until, scope), urn,
                                           direction=direction, depth=depth, since=since, until=until)  # fmt: skip
        except InputError as exc:
            raise RequestError(str(exc)) from None
        note_result(result_count=len(rows))
        return {"urn": urn, "direction": direction, "depth": depth, "since": since, "until": until, "count": len(rows),
                "changes": impact_response(rows, events, scope)}  # fmt: skip

    def graph(urn: str, direction: str, depth: int, at: int, scope: ChangeEventScope) -> dict[str, Any]:
        if not scope.visible_entities([urn], [entity_type_of(urn)])[0]:
            raise OutOfScopeError(f"urn: {urn!r} is not in the caller's scope")
        found = graph_at(urn, lineage.current(), direction=direction, depth=depth, at_ms=at,
                         max_entities=MAX_GRAPH_ENTITIES)  # fmt: skip
        answer = {"urn": urn, "direction": direction, "depth": depth, "at": at, **graph_response(found, scope)}
        note_result(result_count=len(answer["nodes"]))
        return answer

    @router.get(
        GRAPH_PATH,
        summary="The lineage graph around an entity as it was at a time",
        description="The entities at most `depth` hops (0..10, default 3) upstream or downstream of `urn` through "
        f"the lineage edges valid at `at` (epoch ms or ISO-8601; default now), and those edges; at most "
        f"{MAX_GRAPH_ENTITIES} entities, nearest first (`truncated` says some were left out). Entities outside the "
        "caller's scope are hidden nodes.",
    )
    async def impact_graph(request: Request) -> JSONResponse:
        principal = await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        params = dict(request.query_params)
        check_parameters(params, GRAPH_PARAMETERS)
        urn, direction, depth, at = parse_graph_query(params, int(time.time() * 1000))
        note_result({"urn": urn, "direction": direction, "depth": depth, "at": at})
        scope = change_event_scope(principal.scope, domains)
        return JSONResponse(await run_in_threadpool(graph, urn, direction, depth, at, scope))

    @router.get(
        IMPACT_PATH,
        summary="What changed upstream (or downstream) of an entity, through lineage as it was then",
        description="The change events of [since, until) on entities joined to `urn` by lineage edges valid at "
        "each event's time, at most `depth` hops away (0..10, default 3), with the path. Parameters: urn, "
        "direction (upstream or downstream), depth, since/until (epoch ms or ISO-8601; default the last 7 days).",
    )
    async def impact_of(request: Request) -> JSONResponse:
        principal = await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        params = dict(request.query_params)
        check_parameters(params, PARAMETERS)
        urn, direction, depth, since, until = parse_impact_query(params, int(time.time() * 1000))
        note_result({"urn": urn, "direction": direction, "depth": depth, "since": since, "until": until})
        scope = change_event_scope(principal.scope, domains)
        return JSONResponse(await run_in_threadpool(answer, urn, direction, depth, since, until, scope))

    return router
