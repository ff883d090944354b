"""Run an audit search against gold.audit_events: the one code path of the HTTP API and the CLI."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession

from conf.settings import Settings
from conf.tables import table_name
from gold.search import SearchRequest, build_histogram_sql, build_search_sql, choose_since, to_response


def search(spark: SparkSession, settings: Settings, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
    """Return DataHub's audit search response for one request.

    Two reads: the matching events counted per time bucket (their sum is the exact total), then the page
    from the newest slice of the window that the counts show holds it. Files are sorted by time, so a
    short slice reads a small part of them; when the slice falls short the whole window is read.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings (names the audit table).
        request: the validated request.
        now_ms: the current time in epoch ms for the default window (default: the clock).

    Returns:
        `{nextScrollId?, count, total, usageEvents}` as plain JSON values.

    Raises:
        RequestError: when the request's resolved window is the wrong way round.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    resolved = request.with_window(now_ms)
    table = table_name(settings, "gold.audit_events")
    histogram = {int(r["bucket"]): int(r["n"]) for r in spark.sql(build_histogram_sql(resolved, table, now_ms)).collect()}
    total = sum(histogram.values())
    rows: list[dict[str, Any]] = []
    if total:
        since = choose_since(histogram, resolved, now_ms)
        rows = _page(spark, resolved, table, now_ms, since)
        if len(rows) < resolved.size and since is not None:
            rows = _page(spark, resolved, table, now_ms, None)
    return to_response(rows, total, resolved)


def _page(spark: SparkSession, request: SearchRequest, table: str, now_ms: int, since: int | None) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.sql(build_search_sql(request, table, now_ms, since_ms=since)).collect()]
