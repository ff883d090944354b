"""Run an audit search: the one code path of the HTTP API and the CLI, for every serving engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from conf.settings import Settings
from conf.tables import table_name
from gold.search import UNPINNED, SearchRequest, build_histogram_sql, build_search_sql, choose_since, to_response

# Runs one SQL text on an engine and returns its rows as dicts.
RunSql = Callable[[str], list[dict[str, Any]]]


def run_search(
    run_sql: RunSql, table: str, dialect: str, request: SearchRequest, now_ms: int, table_version: int = UNPINNED
) -> dict[str, Any]:
    """Return DataHub's audit search response for one request, reading through `run_sql`.

    Two reads: the matching events counted per time bucket (their sum is the exact total), then the page
    from the newest slice of the window that the counts show holds it. Files are sorted by time, so a
    short slice reads a small part of them; when the slice falls short the whole window is read.

    Args:
        run_sql: runs a query of `dialect` and returns its rows.
        table: the audit events table name as the engine knows it.
        dialect: the sqlglot dialect of the engine ("spark" or "duckdb").
        request: the validated request.
        now_ms: the current time in epoch ms for the default window.
        table_version: the table version read, pinned in the next scroll id (UNPINNED: none).

    Returns:
        `{nextScrollId?, count, total, usageEvents}` as plain JSON values.

    Raises:
        RequestError: when the request's resolved window is the wrong way round.
    """
    resolved = request.with_window(now_ms)
    histogram = {int(r["bucket"]): int(r["n"]) for r in run_sql(build_histogram_sql(resolved, table, now_ms, dialect))}
    total = sum(histogram.values())
    rows: list[dict[str, Any]] = []
    if total:
        since = choose_since(histogram, resolved, now_ms)
        rows = run_sql(build_search_sql(resolved, table, now_ms, since_ms=since, dialect=dialect))
        if len(rows) < resolved.size and since is not None:
            rows = run_sql(build_search_sql(resolved, table, now_ms, dialect=dialect))
    return to_response(rows, total, resolved, table_version)


def search(spark: SparkSession, settings: Settings, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
    """Return DataHub's audit search response for one request, read with Spark SQL (latest table version).

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings (names the audit table).
        request: the validated request.
        now_ms: the current time in epoch ms for the default window (default: the clock).

    Raises:
        RequestError: when the request's resolved window is the wrong way round.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms

    def run_sql(sql: str) -> list[dict[str, Any]]:
        return [row.asDict() for row in spark.sql(sql).collect()]

    return run_search(run_sql, table_name(settings, "gold.audit_events"), "spark", request, now_ms)
