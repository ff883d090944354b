"""Audit event search: the search query (a sqlglot tree), its histogram, and the response's pages and events.

The request is `gold.search_request`'s, its scroll ids `gold.scroll_ids`'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlglot import exp

from conf.errors import ConfigError, RequestError
from gold.scopes import scope_condition
from gold.scroll_ids import UNPINNED, ScrollKey, encode_scroll_id
from gold.search_request import SearchRequest
from gold.serving_contract import AUDIT_COLUMNS, LOGIN_EVENT_TYPES

# The page columns read from the table; raw_event only when the caller wants the raw document.
RESULT_COLUMNS = AUDIT_COLUMNS[: AUDIT_COLUMNS.index("raw_event")]
HISTOGRAM_BUCKETS = 128
# Built once: a type given as text is parsed again at every use.
_DATE = exp.DataType.Type.DATE


def _utc_date(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).date().isoformat()


def _in_list(column: str, values: Sequence[str]) -> exp.Expression:
    return exp.column(column).isin(*[exp.Literal.string(v) for v in values])


def _sort_actor() -> exp.Expression:
    # Sort and compare on a non-null actor so that the keyset predicate never meets a NULL.
    return exp.func("COALESCE", exp.column("actor_urn"), exp.Literal.string(""))


def page_key(row: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """Return a row's place in page order as a sort key: newest first, then event type, actor and event id.

    The same order `build_search_sql` renders as ORDER BY and as the scroll key predicate (`_after_key`),
    for an engine that orders rows it has already read.
    """
    return (-int(row["timestamp"]), row["event_type"] or "", row["actor_urn"] or "", row["event_id"] or "")


def to_page(rows: Sequence[Mapping[str, Any]], request: SearchRequest) -> list[Mapping[str, Any]]:
    """Return the request's page from `rows` that match it and hold the page: after its scroll key, in page order.

    Args:
        rows: matching rows (any order) among which the page's rows all are.
        request: the request (its size and scroll key).
    """
    ordered = sorted(rows, key=page_key)
    if request.scroll is not None:
        key = request.scroll
        after = (-key.timestamp, key.event_type, key.actor_urn, key.event_id)
        ordered = [row for row in ordered if page_key(row) > after]
    return ordered[: request.size]


def _after_key(scroll: ScrollKey) -> exp.Expression:
    """The keyset predicate: rows strictly after `scroll` in (timestamp desc, type, actor, id) order (`page_key`)."""
    ts = exp.column("timestamp")
    ts_value = exp.Literal.number(scroll.timestamp)
    event_type = exp.column("event_type")
    type_value = exp.Literal.string(scroll.event_type)
    actor_value = exp.Literal.string(scroll.actor_urn)
    id_value = exp.Literal.string(scroll.event_id)
    same_actor = exp.and_(exp.EQ(this=_sort_actor(), expression=actor_value), exp.GT(this=exp.column("event_id"), expression=id_value))
    later_actor = exp.or_(exp.GT(this=_sort_actor(), expression=actor_value), same_actor)
    same_type = exp.and_(exp.EQ(this=event_type, expression=type_value), exp.paren(later_actor))
    later_type = exp.or_(exp.GT(this=event_type.copy(), expression=type_value.copy()), same_type)
    same_time = exp.and_(exp.EQ(this=ts, expression=ts_value), exp.paren(later_type))
    return exp.paren(exp.or_(exp.LT(this=ts.copy(), expression=ts_value.copy()), same_time))


def to_match_condition(request: SearchRequest, now_ms: int, since_ms: int | None = None) -> exp.Expression:
    """Return the WHERE condition of the events that match the request (window and filters, no paging).

    The window also bounds the event_date partition column so that only the window's days are read.

    Args:
        request: the validated request.
        now_ms: the current time, for the default window.
        since_ms: a later lower time bound than the window's start (a slice of the window), or None.
    """
    resolved = request.with_window(now_ms)
    start, end = resolved.start_time, resolved.end_time
    if since_ms is not None:
        start = min(max(start, since_ms), end)
    conditions: list[exp.Expression] = [
        exp.GTE(this=exp.column("event_date"), expression=exp.cast(exp.Literal.string(_utc_date(start)), _DATE)),
        exp.LTE(this=exp.column("event_date"), expression=exp.cast(exp.Literal.string(_utc_date(end)), _DATE)),
        exp.GTE(this=exp.column("timestamp"), expression=exp.Literal.number(start)),
        exp.LT(this=exp.column("timestamp"), expression=exp.Literal.number(end)),
    ]
    for field_name, column in (
        ("event_types", "event_type"),
        ("entity_types", "entity_type"),
        ("aspect_types", "aspect_name"),
        ("actor_urns", "actor_urn"),
    ):
        values = getattr(resolved, field_name)
        if values:
            conditions.append(_in_list(column, values))
    scoped = scope_condition(resolved.scope)
    if scoped is not None:
        conditions.append(scoped)
    return exp.and_(*conditions, copy=False)


def _check_now(now_ms: int) -> None:
    if not isinstance(now_ms, int) or isinstance(now_ms, bool):
        raise RequestError(f"now_ms: {now_ms!r} is not epoch milliseconds")


def _source(table: str | exp.Expression) -> exp.Expression:
    """The FROM source: a table or view name, or a table expression (e.g. a DuckDB read_parquet call)."""
    return exp.to_table(table, dialect="spark") if isinstance(table, str) else exp.Table(this=table.copy())


def build_search_sql(
    request: SearchRequest,
    table_name: str | exp.Expression,
    now_ms: int,
    since_ms: int | None = None,
    dialect: str = "spark",
) -> str:
    """Return the SQL of one search page, in page order, built as a sqlglot tree.

    Every caller value is a literal node of the tree; nothing the caller sends becomes SQL text.

    Args:
        request: the validated request (its scroll key selects the rows after the previous page).
        table_name: the audit events table (or view), possibly qualified, or a table expression.
        now_ms: the current time, for the default window.
        since_ms: read only events at or after this time. Rows are ordered newest first, so when this
            slice of the window holds a full page, that page is the window's page; see `page_upper_bound`.
        dialect: the sqlglot dialect to render: "spark" (the pipeline engine) or "duckdb" (the serving engine).
    """
    _check_now(now_ms)
    where = to_match_condition(request, now_ms, since_ms)
    if request.scroll is not None:
        where = exp.and_(where, _after_key(request.scroll), copy=False)
    columns = RESULT_COLUMNS + (("raw_event",) if request.include_raw else ())
    query = (
        exp.select(*[exp.column(c) for c in columns])
        # Every node is built for this query alone: no copies (a read_parquet source lists many files).
        .from_(_source(table_name), copy=False)
        .where(where, copy=False)
        .order_by(
            exp.Ordered(this=exp.column("timestamp"), desc=True),
            exp.Ordered(this=exp.column("event_type")),
            exp.Ordered(this=_sort_actor()),
            exp.Ordered(this=exp.column("event_id")),
            copy=False,
        )
        .limit(request.size, copy=False)
    )
    return query.sql(dialect=dialect)


def histogram_width(request: SearchRequest, now_ms: int) -> int:
    """Return the bucket width (ms) that splits the request's window into HISTOGRAM_BUCKETS buckets."""
    resolved = request.with_window(now_ms)
    return max(1, -(-(resolved.end_time - resolved.start_time) // HISTOGRAM_BUCKETS))


def build_histogram_sql(
    request: SearchRequest, table_name: str | exp.Expression, now_ms: int, dialect: str = "spark"
) -> str:
    """Return the SQL counting the matching events per time bucket of the window (paging aside).

    Result columns: `bucket` (0 = the window's first `histogram_width` ms) and `n`. Their sum is the
    exact total; `choose_since` uses them to pick the slice of the window that holds the page.
    `dialect` is the sqlglot dialect rendered, as for `build_search_sql`.
    """
    _check_now(now_ms)
    resolved = request.with_window(now_ms)
    offset = exp.Sub(this=exp.column("timestamp"), expression=exp.Literal.number(resolved.start_time))
    bucket = exp.func("FLOOR", exp.Div(this=exp.paren(offset), expression=exp.Literal.number(histogram_width(request, now_ms))))
    query = (
        exp.select(exp.alias_(exp.cast(bucket, "bigint"), "bucket"), exp.alias_(exp.Count(this=exp.Star()), "n"))
        .from_(_source(table_name), copy=False)
        .where(to_match_condition(request, now_ms), copy=False)
        .group_by(exp.Literal.number(1), copy=False)
    )
    return query.sql(dialect=dialect)


def choose_since(histogram: Mapping[int, int], request: SearchRequest, now_ms: int) -> int | None:
    """Return the latest time from which the window surely holds the request's page, or None (whole window).

    Buckets are summed from the page's upper bound down; the bucket holding that bound counts for
    nothing (part of it is above the bound), so the slice is never too short.

    Args:
        histogram: bucket -> matching events, from `build_histogram_sql`.
        request: the request (window resolved or not).
        now_ms: the current time.
    """
    resolved = request.with_window(now_ms)
    width = histogram_width(request, now_ms)
    upper = page_upper_bound(resolved, now_ms)
    found = 0
    for bucket in sorted(histogram, reverse=True):
        bucket_start = resolved.start_time + bucket * width
        if bucket_start >= upper:
            continue
        if bucket_start + width <= upper:
            found += histogram[bucket]
        if found >= resolved.size:
            return bucket_start if bucket_start > resolved.start_time else None
    return None


def page_upper_bound(request: SearchRequest, now_ms: int) -> int:
    """Return the exclusive upper time bound of the rows the request's page can hold.

    That is the window's end, or just after the scroll key's time when paging (rows at the key's own time
    may still follow it in the sort order).
    """
    end = request.with_window(now_ms).end_time
    return end if request.scroll is None else min(end, request.scroll.timestamp + 1)


def to_event(row: Mapping[str, Any], include_raw: bool) -> dict[str, Any]:
    """Shape one table row as a UsageEventResult of DataHub's audit search response."""
    event_type = row["event_type"]
    event: dict[str, Any] = {
        "eventType": event_type,
        "timestamp": row["timestamp"],
        "actorUrn": row["actor_urn"],
        "sourceIP": row.get("source_ip"),
        "eventSource": row.get("event_source"),
        "userAgent": row.get("user_agent"),
        "telemetryTraceId": row.get("telemetry_trace_id"),
    }
    if event_type in LOGIN_EVENT_TYPES:
        event["loginSource"] = row.get("login_source")
    else:
        event["entityUrn"] = row.get("entity_urn")
        event["entityType"] = row.get("entity_type")
        event["aspectName"] = row.get("aspect_name")
    if include_raw:
        event["rawUsageEvent"] = _raw_document(row.get("raw_event"))
    return event


def _raw_document(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_response(
    rows: Sequence[Mapping[str, Any]], total: int, request: SearchRequest, table_version: int = UNPINNED
) -> dict[str, Any]:
    """Shape DataHub's audit search response from one page of rows (already in page order).

    Args:
        rows: the page's rows with the gold.audit_events column names (rows without an event id are skipped).
        total: the exact count of matching events.
        request: the request, with its window resolved (`with_window`) so later pages keep it.
        table_version: the table version the page was read from, pinned in the scroll id (UNPINNED: none).

    Returns:
        `{nextScrollId (only when the page is full), count, total, usageEvents}`.

    Raises:
        ConfigError: when the page is full and the request has no signer for the next scroll id.
    """
    page = [row for row in rows if row.get("event_id") is not None]
    response: dict[str, Any] = {}
    if page and len(page) >= request.size:
        if request.signer is None:
            raise ConfigError("scroll ids: the search request has no signer (a server key signs every scroll id)")
        last = page[-1]
        response["nextScrollId"] = encode_scroll_id(
            ScrollKey(
                timestamp=int(last["timestamp"]),
                event_type=last["event_type"],
                actor_urn=last["actor_urn"] or "",
                event_id=last["event_id"],
                start_time=request.start_time,
                end_time=request.end_time,
                table_version=table_version,
            ),
            request.signer,
            request.binding,
        )
    response["count"] = len(page)
    response["total"] = int(total)
    response["usageEvents"] = [to_event(row, request.include_raw) for row in page]
    return response
