"""Run an audit search: the one code path of the HTTP API and the CLI, for every serving engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from conf.settings import Settings
from conf.tables import AUDIT_EVENTS, table_name
from gold.scroll_ids import UNPINNED
from gold.search import build_histogram_sql, build_search_sql, choose_since, page_upper_bound, to_response
from gold.search_request import SearchRequest

if TYPE_CHECKING:  # the in-process serving path imports no engine (docs/api.md#serving-processes)
    from pyspark.sql import SparkSession

# Runs one SQL text on an engine and returns its rows as dicts.
RunSql = Callable[[str], list[dict[str, Any]]]
# The table a query over [start, end) reads (the engine may narrow it to the files of that range), or
# None when the engine knows no row of the table falls in that range.
SourceFor = Callable[[int, int], "str | exp.Expression | None"]


def run_search(
    run_sql: RunSql,
    source: SourceFor,
    dialect: str,
    request: SearchRequest,
    now_ms: int,
    table_version: int = UNPINNED,
) -> dict[str, Any]:
    """Return DataHub's audit search response for one request, reading through `run_sql`.

    Two steps: the matching events are counted per time bucket (their sum is the exact total), then the
    page is read from the newest slice of the window the buckets show to hold it; when the slice falls
    short the whole window is read.

    Args:
        run_sql: runs a query of `dialect` and returns its rows.
        source: the table (or table expression) a query over a time range reads.
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
    upper = page_upper_bound(resolved, now_ms)
    window = source(resolved.start_time, resolved.end_time)
    histogram_sql = build_histogram_sql(resolved, window, now_ms, dialect) if window is not None else None
    histogram = {int(r["bucket"]): int(r["n"]) for r in (run_sql(histogram_sql) if histogram_sql else [])}
    total = sum(histogram.values())
    since = choose_since(histogram, resolved, now_ms)
    rows: list[dict[str, Any]] = []
    if total:
        rows = _page(run_sql, source, dialect, resolved, now_ms, since, upper)
        if len(rows) < resolved.size and since is not None:
            rows = _page(run_sql, source, dialect, resolved, now_ms, None, upper)
    return to_response(rows, total, resolved, table_version)


def _page(
    run_sql: RunSql, source: SourceFor, dialect: str, request: SearchRequest, now_ms: int, since: int | None, upper: int
) -> list[dict[str, Any]]:
    table = source(request.start_time if since is None else since, upper)
    if table is None:
        return []
    return run_sql(build_search_sql(request, table, now_ms, since_ms=since, dialect=dialect))


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

    table = table_name(settings, AUDIT_EVENTS)
    return run_search(run_sql, lambda start, end: table, "spark", request, now_ms)
