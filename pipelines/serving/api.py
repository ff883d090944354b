"""The HTTP audit search API (FastAPI + uvicorn) over the serving engine (in-process, or a Spark session)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pyspark.sql import SparkSession
from starlette.concurrency import run_in_threadpool

from conf.errors import AuthError, ConfigError, RequestError
from conf.settings import Settings
from gold.audit import EVENT_TYPES
from gold.auth import AUDIT_READ
from gold.search import BODY_FILTERS, DEFAULT_SIZE, MAX_SIZE, SearchRequest
from pipelines.serving.anomalies import anomalies_router
from pipelines.serving.report import report_router
from pipelines.serving.admission import Admission, OverloadedError
from pipelines.serving.engine import SearchEngine, open_engine, search_json
from pipelines.serving.explorer import mount_explorer
from pipelines.serving.tokens import TokenVerifier
from pipelines.serving.workers import StoppableServer, default_workers, serve_workers

SEARCH_PATH = "/openapi/v1/events/audit/search"
EMBEDDED_PUSHDOWN_ENV = "SAIL_PARQUET__PUSHDOWN_FILTERS"
log = logging.getLogger("lakehouse.api")

_BODY_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        key: {
            "type": "array",
            "items": {"type": "string", **({"enum": list(EVENT_TYPES)} if key == "eventTypes" else {})},
            "description": f"Filter on {column} (empty or absent: no filter; values are OR-ed).",
        }
        for key, column in BODY_FILTERS.items()
    },
}
_EVENT_SCHEMA = {
    "type": "object",
    "required": ["eventType", "timestamp", "actorUrn"],
    "properties": {
        "eventType": {"type": "string", "enum": list(EVENT_TYPES)},
        "timestamp": {"type": "integer", "format": "int64"},
        "actorUrn": {"type": "string"},
        "sourceIP": {"type": "string", "nullable": True},
        "eventSource": {"type": "string", "nullable": True, "enum": ["RESTLI", "OPENAPI", "GRAPHQL", "SSO_SCIM"]},
        "userAgent": {"type": "string", "nullable": True},
        "telemetryTraceId": {"type": "string", "nullable": True},
        "entityUrn": {"type": "string", "nullable": True},
        "entityType": {"type": "string", "nullable": True},
        "aspectName": {"type": "string", "nullable": True},
        "loginSource": {"type": "string", "nullable": True},
        "rawUsageEvent": {"type": "object", "nullable": True},
    },
}
_RESPONSE_SCHEMA = {
    "type": "object",
    "required": ["count", "total", "usageEvents"],
    "properties": {
        "nextScrollId": {"type": "string", "description": "Present only when the page is full."},
        "count": {"type": "integer", "format": "int32"},
        "total": {"type": "integer", "description": "The exact number of matching events."},
        "usageEvents": {"type": "array", "items": _EVENT_SCHEMA},
    },
}
_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}

# The query parameters as the API documents them. Requests are parsed by `SearchRequest.parse`, not by
# the framework, so that a bad value is a 400 naming the parameter rather than a framework 422.
_QUERY_PARAMETERS = [
    {"name": name, "in": "query", "required": False, "description": description, "schema": schema}
    for name, description, schema in (
        ("startTime", "Window start, epoch ms (inclusive); -1: one day before the end.",
         {"type": "integer", "format": "int64", "default": -1}),
        ("endTime", "Window end, epoch ms (exclusive); -1: now.", {"type": "integer", "format": "int64", "default": -1}),
        ("size", f"Page size 1..{MAX_SIZE}.",
         {"type": "integer", "format": "int32", "default": DEFAULT_SIZE, "minimum": 1, "maximum": MAX_SIZE}),
        ("scrollId", "The nextScrollId of the previous page.", {"type": "string"}),
        ("includeRaw", "Include rawUsageEvent.", {"type": "boolean", "default": True}),
    )
]  # fmt: skip


def create_app(
    settings: Settings,
    spark: SparkSession | None = None,
    *,
    max_queries: int | None = None,
    engine: SearchEngine | None = None,
    admission: Admission | None = None,
) -> FastAPI:
    """Build the API application around a serving engine.

    Args:
        settings: the lakehouse settings (audit table, token file, the serve section).
        spark: an open session; needed when serve.engine is spark.
        max_queries: searches that run at once (default serve.query_slots); serve.queue_depth more wait,
            the rest get 503.
        engine: the engine to search with (default: the one serve.engine names).
        admission: the bounds shared by the server's worker processes (default: this process's own,
            from max_queries and the serve section).

    Raises:
        ConfigError: when max_queries is below 1, or the engine cannot be opened.
    """
    serve_settings = settings.serve
    slots = serve_settings.query_slots if max_queries is None else max_queries
    if slots < 1:
        raise ConfigError(f"max_queries: {slots!r} must be at least 1")
    admission = admission or Admission(slots, serve_settings.queue_depth, serve_settings.queue_timeout_seconds)
    search_engine = engine or open_engine(settings, spark)
    verifier = TokenVerifier(settings.tokens_path)
    app = FastAPI(
        title="Metadata audit lakehouse: Audit Events Search API",
        version="1",
        description="DataHub's Audit Events Search API V1 served from gold.audit_events. "
        "Every search needs `Authorization: Bearer <token>` with the audit-read role.",
    )

    @app.exception_handler(RequestError)
    async def _bad_request(_: Request, exc: RequestError) -> JSONResponse:
        # 400, or the subclass's own status (410 for a scroll over a vacuumed version).
        return JSONResponse({"error": str(exc)}, status_code=getattr(exc, "status", 400))

    @app.exception_handler(OverloadedError)
    async def _overloaded(_: Request, exc: OverloadedError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(AuthError)
    async def _unauthorized(_: Request, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("search failed")
        return JSONResponse({"error": f"internal error ({type(exc).__name__})"}, status_code=500)

    @app.get("/health", summary="Liveness: the server and its serving engine answer; the home's watcher status.")
    def health() -> dict[str, Any]:
        from pipelines.batch.watch_status import watch_status

        return {"status": "ok", **search_engine.health(), "watch": watch_status(settings), "admission": admission.status()}

    @app.post(
        SEARCH_PATH,
        summary="Search audit events",
        openapi_extra={
            "parameters": _QUERY_PARAMETERS,
            # An empty body is accepted as no filters; the body DataHub documents is the same object.
            "requestBody": {"required": False, "content": {"application/json": {"schema": _BODY_SCHEMA}}},
        },
        responses={
            200: {"content": {"application/json": {"schema": _RESPONSE_SCHEMA}}},
            400: {"description": "Bad request", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            401: {"description": "Missing or unknown token", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            403: {"description": "Token without audit-read", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            410: {"description": "The scroll's table version was vacuumed: restart the search",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            503: {"description": "Busy: every query slot and queue place taken (see Retry-After)",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
        },
    )
    async def audit_search(request: Request) -> JSONResponse:
        authorization = request.headers.get("authorization")
        await verifier.authenticate_request(authorization, AUDIT_READ)
        body = _decode_body(await _read_body(request, serve_settings.max_body_bytes))
        params = {p["name"]: request.query_params.get(p["name"]) for p in _QUERY_PARAMETERS}
        search_request = SearchRequest.parse(params, body, max_size=serve_settings.max_size)

        with admission.admit():
            async with admission.slot():
                body = await run_in_threadpool(search_json, search_engine, search_request)
                return Response(body, media_type="application/json")

    app.include_router(anomalies_router(settings, verifier))
    # The regulator report download (docs/audit-trail.md).
    app.include_router(report_router(settings, verifier, spark))
    mount_explorer(app, settings, verifier, spark)
    return app


async def _read_body(request: Request, limit: int) -> bytes:
    """Read the request body, refusing one above `limit` bytes before reading it all."""
    too_large = f"body: larger than the limit of {limit} bytes (serve.max_body_bytes)"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(too_large)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode_body(raw: bytes) -> Any:
    """Decode the request body: empty means no filters; anything else must be JSON."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"body: not valid JSON ({exc})") from None


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Serve the API until interrupted, with the engine serve.engine names (a session only for spark).

    Args:
        settings: the lakehouse settings; host and port default to settings.api.
        host: interface to listen on.
        port: TCP port (0 picks a free one).
    """
    from pipelines.runtime.engine import open_session

    host = host or settings.api.host
    port = settings.api.port if port is None else port
    if not 0 <= port < 65536:
        raise ConfigError(f"--port: {port!r} is not a TCP port (0..65535)")
    # The embedded engine decodes the wide columns (raw_event) only for rows that pass the filters when
    # filters are pushed into the Parquet reader: a search page costs a fraction of the scan without it.
    os.environ.setdefault(EMBEDDED_PUSHDOWN_ENV, "true")
    config = {"host": host, "port": port, "log_level": "warning", "access_log": False}
    if settings.serve.engine != "spark":
        workers = settings.serve.workers or default_workers()
        # serve.row_cache_mb bounds the server: each worker caches its share.
        worker_settings = dataclasses.replace(
            settings, serve=dataclasses.replace(settings.serve, row_cache_mb=settings.serve.row_cache_mb // workers)
        )
        bounds = (settings.serve.query_slots, settings.serve.queue_depth, settings.serve.queue_timeout_seconds)
        serve_workers(host, port, workers, lambda admission: create_app(worker_settings, admission=admission), bounds)
        return
    # The Spark engine's work runs in the session, which one process holds.
    with open_session(settings) as spark:
        StoppableServer(uvicorn.Config(create_app(settings, spark), **config)).run()


@contextlib.contextmanager
def serving(app: FastAPI, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> Iterator[str]:
    """Run `app` on a real uvicorn server in a background thread for the length of the block.

    Yields:
        The server's base URL, e.g. `http://127.0.0.1:43121`.

    Raises:
        ConfigError: when the server does not start within `timeout` seconds.
    """
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="lakehouse-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise ConfigError(f"api: the server on {host}:{port} did not start")
        time.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)
