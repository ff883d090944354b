"""The HTTP audit search API (FastAPI + uvicorn) over the serving engine (in-process, or a Spark session)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from conf.errors import AuthError, ConfigError, RequestError
from conf.settings import Settings
from conf.values import check_at_least, check_port
from gold.serving_contract import EVENT_TYPES
from gold.scroll_ids import ScrollSigner
from gold.search_request import BODY_FILTERS, DEFAULT_SIZE, MAX_SIZE, SearchRequest
from pipelines.serving.anomalies import anomalies_router
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.impact import impact_router
from pipelines.serving.report import report_router
from pipelines.serving.admission import Admission, OverloadedError
from pipelines.serving.engine import SearchEngine, build_index_files, encode_json, open_engine
from pipelines.serving.access import UnscopedReaders, install_access_control, scoped_search
from pipelines.privacy.display import pseudonymous_body, shown_to
from pipelines.serving.erasure import erasure_router
from pipelines.serving.explorer import mount_explorer
from pipelines.serving.hardening import (
    authenticated_or_none,
    decode_json_body,
    install_hardening,
    read_body,
    tls_options,
)
from pipelines.serving.identity import Authenticator
from pipelines.serving.rate_limit import RateLimitedVerifier, RateLimiter, TokenBuckets
from pipelines.serving.scroll_key import load_scroll_key
from pipelines.serving.workers import StoppableServer, default_workers, listening_socket, serve_workers

if TYPE_CHECKING:  # the in-process serving path imports no engine (docs/api.md#serving-processes)
    from pyspark.sql import SparkSession

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
    rate_buckets: TokenBuckets | None = None,
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
        rate_buckets: the callers' request rates, shared by the server's worker processes (default: this
            process's own).

    Raises:
        ConfigError: when max_queries is below 1, or the engine cannot be opened.
    """
    serve_settings = settings.serve
    slots = serve_settings.query_slots if max_queries is None else max_queries
    check_at_least("max_queries", slots, 1)
    admission = admission or Admission(slots, serve_settings.queue_depth, serve_settings.queue_timeout_seconds)
    search_engine = engine or open_engine(settings, spark)
    limiter = RateLimiter(serve_settings.rate_limit_per_minute, serve_settings.rate_limit_burst, rate_buckets)
    authenticator = Authenticator(settings)
    verifier = RateLimitedVerifier(authenticator, limiter)
    scroll_key = load_scroll_key(settings)
    docs = serve_settings.api_docs  # Swagger UI and ReDoc load their scripts from a CDN: off unless asked for.
    app = FastAPI(
        title="Metadata audit lakehouse: Audit Events Search API",
        version="1",
        description="DataHub's Audit Events Search API V1 served from gold.audit_events. "
        "Every search needs `Authorization: Bearer <token>` with the audit-read role.",
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )

    @app.exception_handler(RequestError)
    async def _bad_request(_: Request, exc: RequestError) -> JSONResponse:
        # 400, or the subclass's own status (410 for a scroll over a vacuumed version).
        return JSONResponse({"error": str(exc)}, status_code=getattr(exc, "status", 400))

    @app.exception_handler(HTTPException)
    async def _routing_error(request: Request, exc: HTTPException) -> JSONResponse:
        # The framework's own 404 and 405 answer in the shape of every other error, not as {"detail": ...}.
        message = f"{request.method} {request.url.path}: {str(exc.detail).lower()}"
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)

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

    @app.get("/health", summary="Liveness; with an audit-read token also the serving engine and the watcher status.")
    async def health(request: Request) -> dict[str, Any]:
        from pipelines.runtime.watch_status import watch_status

        # Not a data request: checked without spending the caller's rate.
        if await authenticated_or_none(authenticator, request.headers.get("authorization"), AUDIT_READ) is None:
            return {"status": "ok"}
        return await run_in_threadpool(lambda: {
            "status": "ok", **search_engine.health(), "watch": watch_status(settings), "admission": admission.status(),
        })  # fmt: skip

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
            400: {"description": "Bad request (a scroll id forged, changed or issued to another caller or query)",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            401: {"description": "Missing or unknown token", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            403: {"description": "Token without audit-read", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            410: {"description": "The scroll's table version was vacuumed: restart the search",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            413: {"description": "Body above serve.max_body_bytes", "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            429: {"description": "Above the caller's rate (see Retry-After)",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
            503: {"description": "Busy: every query slot and queue place taken (see Retry-After)",
                  "content": {"application/json": {"schema": _ERROR_SCHEMA}}},
        },
    )
    async def audit_search(request: Request) -> JSONResponse:
        # Admission (query slots, queue) is taken for every data path by the hardening middleware.
        principal = await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        raw = await read_body(request, serve_settings.max_body_bytes)
        body = decode_json_body(raw, serve_settings.max_json_depth)
        params = {p["name"]: request.query_params.get(p["name"]) for p in _QUERY_PARAMETERS}
        signer = ScrollSigner(scroll_key, principal=principal.name)
        # A person named in the filters is searched (and logged) by pseudonym when privacy.pseudonymise is on.
        body = pseudonymous_body(settings, body)
        search_request = SearchRequest.parse(params, body, max_size=serve_settings.max_size, signer=signer)
        response = await run_in_threadpool(
            lambda: encode_json(shown_to(settings, scoped_search(search_engine.search, search_request, principal), principal))
        )
        return Response(response, media_type="application/json")

    # Per-actor aggregates a scope cannot narrow are served to unscoped readers only (docs/api.md#scopes).
    unscoped = UnscopedReaders(verifier)
    app.include_router(anomalies_router(settings, unscoped))
    # The regulator report download (docs/audit-trail.md); a scope narrows it, as it does the change search.
    app.include_router(report_router(settings, verifier))
    app.include_router(erasure_router(settings, verifier))  # the admin's erasure of a person (docs/privacy.md)
    app.include_router(impact_router(settings, verifier))  # change impact across lineage, scoped
    mount_explorer(app, settings, verifier, aggregates=unscoped)
    install_hardening(app, admission)
    # Outside admission, so that the access log records the 503s too.
    install_access_control(app, settings, authenticator)
    # Added last, so outermost: it counts the 503s and 413s of the hardening middleware too.
    # Requests by route and status, latency, 503s and 401/403s; GET /metrics (docs/operations.md).
    # Imported here, in the worker: prometheus-client picks its multi-process mode when first imported, and
    # the parent of several workers sets PROMETHEUS_MULTIPROC_DIR only after importing this module.
    from pipelines.serving.metrics import instrument

    instrument(app, settings)
    return app


def serve(
    settings: Settings,
    host: str | None = None,
    port: int | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the API until interrupted, with the engine serve.engine names (a session only for spark).

    The port is bound first, so a busy port fails at once; the search index is built next, and
    `on_ready` is called only when the server answers requests with the data in place.

    Args:
        settings: the lakehouse settings; host and port default to settings.api.
        host: interface to listen on.
        port: TCP port (0 picks a free one).
        tls_cert: PEM certificate chain to serve HTTPS with (default serve.tls_cert_file).
        tls_key: its PEM private key (default serve.tls_key_file).
        on_ready: called once with the server's base URL (`http://127.0.0.1:8080`) when it accepts requests.

    Raises:
        ConfigError: when the port is out of range or cannot be bound (naming it), or the engine cannot open.
    """
    from pipelines.runtime.engine import open_session

    host = host or settings.api.host
    port = settings.api.port if port is None else port
    check_port("--port", port, zero_allowed=True)
    # The embedded engine decodes the wide columns (raw_event) only for rows that pass the filters when
    # filters are pushed into the Parquet reader: a search page costs a fraction of the scan without it.
    os.environ.setdefault(EMBEDDED_PUSHDOWN_ENV, "true")
    # log_config None: uvicorn's own lines go through the lakehouse's log format (log.format).
    tls = tls_options(settings, tls_cert, tls_key)
    config = {"log_level": "warning", "access_log": False, "log_config": None, **tls}
    with contextlib.closing(listening_socket(host, port)) as sock:
        url = f"{'https' if tls else 'http'}://{host}:{sock.getsockname()[1]}"
        announce = (lambda: on_ready(url)) if on_ready else None
        if settings.serve.engine != "spark":
            workers = settings.serve.workers or default_workers()
            # serve.row_cache_mb bounds the server: each worker caches its share.
            worker_settings = dataclasses.replace(
                settings, serve=dataclasses.replace(settings.serve, row_cache_mb=settings.serve.row_cache_mb // workers)
            )
            bounds = (settings.serve.query_slots, settings.serve.queue_depth, settings.serve.queue_timeout_seconds)
            worker_options = {k: v for k, v in config.items() if k not in ("log_level", "access_log")}
            with index_folder(worker_settings) as worker_settings:
                if not build_index_files(worker_settings):
                    log.warning("serve: the search index was not built before the workers start; each builds what it misses")
                serve_workers(sock, workers, lambda admission, buckets: create_app(worker_settings, admission=admission, rate_buckets=buckets), bounds,
                              worker_options, announce)  # fmt: skip
            return
        # The Spark engine's work runs in the session, which one process holds.
        with open_session(settings) as spark:
            server = StoppableServer(uvicorn.Config(create_app(settings, spark), **config))
            if announce:
                announce()  # the socket listens: requests wait in its queue for the loop, which starts next
            server.run(sockets=[sock])


@contextlib.contextmanager
def index_folder(settings: Settings) -> Iterator[Settings]:
    """Yield `settings` with serve.index_dir set: the one configured, else a fresh folder removed at the end."""
    if settings.serve.index_dir:
        yield settings
        return
    folder = tempfile.mkdtemp(prefix="lakehouse-index-")
    try:
        yield dataclasses.replace(settings, serve=dataclasses.replace(settings.serve, index_dir=folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
