"""Access control wired into the API: scoped searches, aggregates for unscoped readers, the access log.

`install_access_control` adds the access log (middleware, background writer closed at shutdown) and the
admin's `/api/v1/access-log` endpoint; `scoped_search` runs an audit search as a principal may see it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from conf.errors import AuthError, InputError, RequestError
from conf.settings import Settings
from conf.tables import table_location
from conf.values import parse_whole_number, whole_number
from gold.scopes import ADMIN, UNSCOPED, Principal, Scope, parse_scope, scope_within, visible_events
from gold.search_request import SearchRequest
from pipelines.runtime.storage import delta_storage_options, table_exists
from pipelines.serving.access_log import ACCESS_TABLE, SCOPE_KEY, AccessLogMiddleware, AccessLogWriter, note_result
from pipelines.serving.identity import Authenticator

ACCESS_LOG_PATH = "/api/v1/access-log"
# The paths whose requests read audit data (or the access log itself): each is recorded.
LOGGED_PREFIXES = ("/openapi/v1/", "/api/v1/")
ACCESS_LOG_PARAMETERS = ("principal", "endpoint", "outcome", "since", "until", "size")
MAX_ACCESS_PAGE = 1000
# The filters of a stored record that is not a JSON object, as read back: its text under this key.
UNREADABLE_KEY = "unreadable"


def scoped_search(search: Any, request: SearchRequest, principal: Principal) -> dict[str, Any]:
    """Run `search` (an engine's search) as `principal` may see it: its scope, sensitive fields removed.

    Raw events are not read at all for a principal that may not see them. The access record gets the
    request's filters and total.
    """
    scoped = dataclasses.replace(
        request, scope=principal.scope, include_raw=request.include_raw and principal.sees_sensitive
    )
    response = search(scoped)
    response["usageEvents"] = visible_events(response["usageEvents"], principal)
    note_result(_search_filters(request), response.get("total"))
    return response


def _search_filters(request: SearchRequest) -> dict[str, Any]:
    return {
        "startTime": request.start_time,
        "endTime": request.end_time,
        "size": request.size,
        "scrolled": request.scroll_id is not None,
        "eventTypes": list(request.event_types),
        "entityTypes": list(request.entity_types),
        "aspectTypes": list(request.aspect_types),
        "actorUrns": list(request.actor_urns),
    }


class UnscopedReaders:
    """The authenticator of per-actor aggregates a scope cannot narrow (daily activity, anomalies): a
    principal limited to a scope gets 403 there, never figures counted over entities outside it.

    Args:
        authenticator: the API's authenticator.
    """

    def __init__(self, authenticator: Authenticator):
        self._authenticator = authenticator

    async def authenticate_request(self, authorization: str | None, role: str) -> Principal:
        """Authenticate as the API does, then refuse a scoped principal.

        Raises:
            AuthError: 401/403 as the authenticator; 403 for a principal limited to a scope.
        """
        principal = await self._authenticator.authenticate_request(authorization, role)
        if principal.scope.restricted:
            raise AuthError(
                f"{principal.name} is limited to a scope; this endpoint serves unscoped readers only "
                "(use the audit search)",
                status=403,
            )
        return principal


def install_access_control(app: FastAPI, settings: Settings, authenticator: Authenticator) -> None:
    """Add the access log (when access_log.enabled) and the admin's access log endpoint to `app`.

    The writer starts with the server and is flushed and stopped when it shuts down, after the last
    request: a clean stop loses no record.
    """
    app.include_router(access_log_router(settings, authenticator))
    if not settings.access_log.enabled:
        return
    from pipelines.audit_trail.arrow_chain import ArrowChainLinker

    linker = ArrowChainLinker(settings)
    writer = AccessLogWriter(
        settings,
        link=lambda batch_id, rows, version: linker.link(ACCESS_TABLE, batch_id, rows, version),
        on_flush=lambda: authenticator.tokens.flush(force=False),
    )
    app.add_middleware(AccessLogMiddleware, writer=writer, logged=lambda path: path.startswith(LOGGED_PREFIXES))
    running = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[Any]:
        writer.start()
        try:
            async with running(application) as state:
                yield state
        finally:
            await run_in_threadpool(writer.close)
            authenticator.close()

    app.router.lifespan_context = lifespan


def access_log_router(settings: Settings, authenticator: Authenticator) -> APIRouter:
    """The admin's search of ops.access_log: GET /api/v1/access-log?principal=&endpoint=&outcome=&since=&until=&size=."""
    router = APIRouter()
    location = table_location(settings, ACCESS_TABLE)

    @router.get(ACCESS_LOG_PATH, summary="Who read audit data: the access log, newest first (admin)")
    async def access_log(request: Request) -> JSONResponse:
        principal = await authenticator.authenticate_request(request.headers.get("authorization"), ADMIN)
        query = parse_access_query(dict(request.query_params))
        records = await run_in_threadpool(read_access_log, location, query, principal.scope)
        note_result({k: v for k, v in query.items() if k != "size"}, len(records))
        return JSONResponse({"count": len(records), "records": records})

    return router


def parse_access_query(params: Mapping[str, str]) -> dict[str, Any]:
    """Validate the access log search parameters.

    Raises:
        RequestError: naming the unknown or bad parameter.
    """
    unknown = sorted(set(params) - set(ACCESS_LOG_PARAMETERS))
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown parameter (known: {', '.join(ACCESS_LOG_PARAMETERS)})")
    query: dict[str, Any] = {name: (params.get(name) or "").strip() or None for name in ("principal", "endpoint", "outcome")}
    for name in ("since", "until"):
        text = (params.get(name) or "").strip()
        query[name] = whole_number(text) if text else None
        if text and query[name] is None:
            raise RequestError(f"{name}: {text!r} is not epoch milliseconds")
    try:
        query["size"] = parse_whole_number((params.get("size") or "100").strip(), "size", 1, MAX_ACCESS_PAGE)
    except InputError as exc:
        raise RequestError(str(exc)) from None
    return query


def read_access_log(location: Any, query: Mapping[str, Any], scope: Scope = UNSCOPED) -> list[dict[str, Any]]:
    """The access records matching `query` (principal, endpoint, outcome, since/until ms, size), newest first.

    Args:
        location: the ops.access_log table.
        query: the validated search (`parse_access_query`).
        scope: the reader's scope: a restricted one sees only the reads of principals limited to a scope
            within it (refused requests and unscoped readers are outside every scope).
    """
    from deltalake import DeltaTable

    if not table_exists(location):
        return []
    condition = None
    for name, column in (("principal", "principal"), ("endpoint", "endpoint"), ("outcome", "outcome")):
        if query.get(name):
            condition = _and(condition, ds.field(column) == query[name])
    if query.get("since") is not None:
        condition = _and(condition, ds.field("accessed_at_ms") >= query["since"])
    if query.get("until") is not None:
        condition = _and(condition, ds.field("accessed_at_ms") < query["until"])
    table = DeltaTable(str(location), storage_options=delta_storage_options(location)).to_pyarrow_dataset().to_table(filter=condition)
    if table.num_rows == 0:
        return []
    newest = table.take(pc.sort_indices(table, [("accessed_at_ms", "descending"), ("access_id", "ascending")]))
    size = int(query.get("size") or 100)
    if not scope.restricted:
        return [_to_record(row) for row in newest.slice(0, size).to_pylist()]
    records: list[dict[str, Any]] = []
    for batch in newest.to_batches(max_chunksize=MAX_ACCESS_PAGE):
        for row in batch.to_pylist():
            record = _to_record(row)
            if _read_within(record["filters"], scope):
                records.append(record)
                if len(records) == size:
                    return records
    return records


def _read_within(filters: Mapping[str, Any], scope: Scope) -> bool:
    """Whether a recorded read was limited to a scope within `scope` (one that cannot be read: no)."""
    specs = filters.get(SCOPE_KEY)
    if not isinstance(specs, list) or not specs:
        return False
    try:
        return scope_within(parse_scope(specs, SCOPE_KEY), scope)
    except InputError:
        return False


def _and(left: ds.Expression | None, right: ds.Expression) -> ds.Expression:
    return right if left is None else left & right


def _to_record(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "accessId": row["access_id"],
        "accessedAt": row["accessed_at_ms"],
        "principal": row["principal"],
        "actor": row["actor"],
        "method": row["method"],
        "endpoint": row["endpoint"],
        "filters": stored_filters(row.get("filters")),
        "resultCount": row["result_count"],
        "clientAddress": row["client_address"],
        "status": row["status"],
        "outcome": row["outcome"],
        "batchId": row["batch_id"],
    }



def stored_filters(text: str | None) -> dict[str, Any]:
    """The filters of a stored record: its JSON object, or `{"unreadable": <text>}` for a record that holds
    no JSON object (stored cut by an earlier version)."""
    if not text:
        return {}
    try:
        filters = json.loads(text)
    except ValueError:
        return {UNREADABLE_KEY: text}
    return filters if isinstance(filters, dict) else {UNREADABLE_KEY: text}
