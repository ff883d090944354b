"""Prometheus metrics of the HTTP API and its `/metrics` route.

Requests are counted by route template (`/openapi/v1/events/audit/search`, `/api/explorer/entity/{urn}`:
never the raw path, which may hold an URN), method and status, with a latency histogram; 503s (admission
refused a search) and 401/403s (auth failures) have their own counters. The home's state (the watcher's
freshness, the last chain verification) is read at scrape time.

Several worker processes: the parent sets PROMETHEUS_MULTIPROC_DIR to an empty folder before it starts
them (`prepare_multiprocess_dir`), and calls `worker_exited(pid)` when one ends. Each worker then writes
its values to files there, and any worker's `/metrics` aggregates every worker's files
(prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client import multiprocess
from prometheus_client.process_collector import ProcessCollector

from conf.errors import ConfigError
from conf.settings import Settings
from pipelines.runtime.metrics import HomeCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
METRICS_PATH = "/metrics"
# A page of search is milliseconds; a cold start or a large page is seconds.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ApiMetrics:
    """The API's counters and histograms.

    Args:
        registry: where to register them; None in multiprocess mode, where the values go to the
            shared folder's files and a MultiProcessCollector reads them back.
    """

    def __init__(self, registry: CollectorRegistry | None):
        self.requests = Counter(
            "lakehouse_api_requests_total", "HTTP requests by route template, method and status.",
            ["endpoint", "method", "status"], registry=registry,
        )  # fmt: skip
        self.latency = Histogram(
            "lakehouse_api_request_seconds", "HTTP request latency, from the request to the end of the response.",
            ["endpoint", "method"], buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.rejections = Counter(
            "lakehouse_api_admission_rejections_total", "Requests refused with 503: every query slot and queue place taken.",
            ["endpoint"], registry=registry,
        )  # fmt: skip
        self.auth_failures = Counter(
            "lakehouse_api_auth_failures_total", "Requests refused with 401 (no or unknown token) or 403 (role missing).",
            ["endpoint", "status"], registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "lakehouse_api_requests_in_flight", "Requests being answered now.",
            registry=registry, multiprocess_mode="livesum",
        )  # fmt: skip

        # The labelled children per (endpoint, method, status): looked up once, not per request.
        self._children: dict[tuple[str, str, int], tuple[Any, ...]] = {}

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        children = self._children.get((endpoint, method, status))
        if children is None:
            children = self._children.setdefault((endpoint, method, status), self._label(endpoint, method, status))
        for child in children[:-1]:
            child.inc()
        children[-1].observe(seconds)

    def _label(self, endpoint: str, method: str, status: int) -> tuple[Any, ...]:
        """The counters one request of this kind increments, then its latency histogram."""
        counters = [self.requests.labels(endpoint, method, str(status))]
        if status == 503:
            counters.append(self.rejections.labels(endpoint))
        elif status in (401, 403):
            counters.append(self.auth_failures.labels(endpoint, str(status)))
        return (*counters, self.latency.labels(endpoint, method))


class MetricsMiddleware:
    """ASGI middleware timing and counting every HTTP request by its route template."""

    def __init__(self, app: Any, metrics: ApiMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes every handler ends as a 500
        observed = False

        def observe() -> None:
            nonlocal observed
            observed = True
            self.metrics.in_flight.dec()
            method = scope.get("method", "")
            self.metrics.observe(
                endpoint_label(scope), method if method in _METHODS else "other", status, time.perf_counter() - started
            )

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body") and not observed:
                # Counted before the last byte leaves: a client that scrapes right after its response sees it.
                observe()
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            if not observed:
                observe()


def endpoint_label(scope: dict) -> str:
    """The route template the router matched (`/api/explorer/entity/{urn}`), or `unmatched`."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


def multiprocess_dir() -> Path | None:
    """The folder of multiprocess mode (PROMETHEUS_MULTIPROC_DIR), or None for a single process."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def metrics_registry(settings: Settings) -> tuple[CollectorRegistry, ApiMetrics]:
    """The registry `/metrics` serves and the API metrics to feed, for one process or several workers.

    Raises:
        ConfigError: when PROMETHEUS_MULTIPROC_DIR names no folder, or was set after prometheus-client
            chose single-process values (it chooses at import).
    """
    registry = CollectorRegistry(auto_describe=True)
    folder = multiprocess_dir()
    if folder is None:
        api = ApiMetrics(registry)
        ProcessCollector(registry=registry)
    else:
        if not folder.is_dir():
            raise ConfigError(f"{MULTIPROC_ENV}: {str(folder)!r} is not a folder (the parent creates it empty)")
        if values.ValueClass is values.MutexValue:
            raise ConfigError(
                f"{MULTIPROC_ENV}: set after prometheus_client was imported; set it before the workers start"
            )
        multiprocess.MultiProcessCollector(registry, path=str(folder))
        api = ApiMetrics(None)
    registry.register(HomeCollector(settings))
    return registry, api


def instrument(app: FastAPI, settings: Settings) -> None:
    """Count every request of `app` and serve the metrics at GET /metrics (no token: counts, no data).

    Nothing is added when serve.metrics is false.
    """
    if not settings.serve.metrics:
        return
    registry, api = metrics_registry(settings)
    # Each data endpoint's 503 count starts at 0, so that it is scraped (and rate() works) before the first
    # refusal: with several workers, a labelled counter is only exported once a child exists.
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith(("/openapi/v1/", "/api/v1/")):
            api.rejections.labels(endpoint=path)
    app.add_middleware(MetricsMiddleware, metrics=api)
    router = APIRouter()

    @router.get(METRICS_PATH, include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
