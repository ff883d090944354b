"""Audit event search: request validation, the search query (a sqlglot tree), scroll ids and the response."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlglot import exp

from conf.errors import ConfigError, RequestError
from conf.settings_sections import SEARCH_MAX_SIZE
from conf.values import DAY_MS, MAX_TIME_MS, WHOLE_NUMBER
from gold.serving_contract import AUDIT_COLUMNS, EVENT_TYPES, LOGIN_EVENT_TYPES
from gold.scopes import UNSCOPED, Scope, scope_condition

DEFAULT_TIME = -1
DEFAULT_SIZE = 10
MAX_SIZE = SEARCH_MAX_SIZE
MAX_FILTER_VALUES = 1_000
MAX_FILTER_VALUE_CHARS = 4_096
# JSON body key -> gold.audit_events column it filters.
BODY_FILTERS = {
    "eventTypes": "event_type",
    "entityTypes": "entity_type",
    "aspectTypes": "aspect_name",
    "actorUrns": "actor_urn",
}
# The page columns read from the table; raw_event only when the caller wants the raw document.
RESULT_COLUMNS = AUDIT_COLUMNS[: AUDIT_COLUMNS.index("raw_event")]
HISTOGRAM_BUCKETS = 128
_SCROLL_VERSION = 3
# The table version of a scroll id that pins none (the Spark engine reads the latest version).
UNPINNED = -1
# Hex characters of the HMAC-SHA256 tag kept in a scroll id (128 bits).
_SCROLL_TAG_CHARS = 32
# Built once: a type given as text is parsed again at every use.
_DATE = exp.DataType.Type.DATE


@dataclass(frozen=True)
class ScrollKey:
    """Where a page ended: the last row's sort key, and the window the first page resolved."""

    timestamp: int
    event_type: str
    actor_urn: str
    event_id: str
    start_time: int
    end_time: int
    table_version: int = UNPINNED


@dataclass(frozen=True)
class ScrollSigner:
    """Signs scroll ids with the server's key (HMAC-SHA256) for one caller.

    A scroll id is valid only for the caller it was issued to and the query that produced it: the
    caller and the query's filters, size and includeRaw are part of the signed text (the window and
    the pinned table version are inside the id).

    Attributes:
        key: the server's secret key (the same in every server process of a home).
        principal: who the scroll ids are issued to, e.g. the token id.
    """

    key: bytes = field(repr=False)
    principal: str = ""

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise ConfigError(f"key: {len(self.key)} bytes; a scroll id key needs at least 16")

    def tag(self, payload: str, binding: str) -> str:
        """The hex HMAC-SHA256 tag of a scroll id's payload for this caller and a query binding."""
        message = json.dumps([self.principal, binding, payload], separators=(",", ":")).encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()[:_SCROLL_TAG_CHARS]


@dataclass(frozen=True)
class SearchRequest:
    """One validated audit search request.

    Attributes:
        start_time: window start in epoch ms (inclusive); -1 = one day before the window end.
        end_time: window end in epoch ms (exclusive); -1 = now.
        size: page size, 1..10000.
        scroll_id: the opaque scroll id given by the caller, if any.
        scroll: the decoded scroll id.
        include_raw: whether results carry rawUsageEvent.
        event_types, entity_types, aspect_types, actor_urns: filters (empty = no filter).
        signer: signs the next page's scroll id (and checked the given one).
        scope: the rows the caller may see at all (set from its principal, never from the request).
        binding: what a scroll id of this request is bound to besides the window: filters, size and
            includeRaw as the caller sent them (`query_binding`).
    """

    start_time: int = DEFAULT_TIME
    end_time: int = DEFAULT_TIME
    size: int = DEFAULT_SIZE
    scroll_id: str | None = None
    scroll: ScrollKey | None = None
    include_raw: bool = True
    event_types: tuple[str, ...] = ()
    entity_types: tuple[str, ...] = ()
    aspect_types: tuple[str, ...] = ()
    actor_urns: tuple[str, ...] = ()
    signer: ScrollSigner | None = field(default=None, compare=False, repr=False)
    scope: Scope = UNSCOPED
    binding: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        # Fixed when the request is made: the caller's scope may later narrow what is read (raw events
        # left out), but the next page's scroll id stays bound to the query the caller sent.
        if not self.binding:
            filters = {
                "event_types": self.event_types,
                "entity_types": self.entity_types,
                "aspect_types": self.aspect_types,
                "actor_urns": self.actor_urns,
            }
            object.__setattr__(self, "binding", query_binding(filters, self.size, self.include_raw))

    @classmethod
    def parse(
        cls,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        max_size: int = MAX_SIZE,
        signer: ScrollSigner | None = None,
    ) -> SearchRequest:
        """Validate query parameters (strings or typed values) and the decoded JSON body.

        Args:
            params: startTime, endTime, size, scrollId, includeRaw; other keys are ignored, as DataHub does.
            body: the decoded JSON body: None (no body) or an object with the list filters.
            max_size: the largest page size the server allows (at most MAX_SIZE).
            signer: checks the given scroll id and signs the next one (None: scroll ids are refused).

        Raises:
            RequestError: naming the parameter or body field and the bad value; for a scroll id that was
                forged, changed, or issued to another caller or for another query.
        """
        params = params or {}
        start_time = _parse_time(params.get("startTime"), "startTime")
        end_time = _parse_time(params.get("endTime"), "endTime")
        size = _parse_size(params.get("size"), max_size)
        include_raw = _parse_bool(params.get("includeRaw"), "includeRaw", default=True)
        scroll_id = params.get("scrollId")
        if scroll_id is not None and not isinstance(scroll_id, str):
            raise RequestError(f"scrollId: {scroll_id!r} is not a string")
        scroll_id = scroll_id or None
        filters = _parse_body(body)
        binding = query_binding(filters, size, include_raw)
        scroll = decode_scroll_id(scroll_id, signer, binding) if scroll_id else None
        if scroll is not None:
            # Later pages keep the window the first page resolved, so a default window does not slide;
            # a window given again must be that one.
            for name, given, issued in (("startTime", start_time, scroll.start_time), ("endTime", end_time, scroll.end_time)):
                if given not in (DEFAULT_TIME, issued):
                    raise RequestError(
                        f"{name}: {given} is not the window of the scrollId ({issued}); send the first page's window or none"
                    )
            start_time, end_time = scroll.start_time, scroll.end_time
        if start_time != DEFAULT_TIME and end_time != DEFAULT_TIME and start_time > end_time:
            raise RequestError(f"startTime: {start_time} is after endTime {end_time}")
        return cls(
            start_time=start_time,
            end_time=end_time,
            size=size,
            scroll_id=scroll_id,
            scroll=scroll,
            include_raw=include_raw,
            signer=signer,
            binding=binding,
            **filters,
        )

    @property
    def filtered(self) -> bool:
        """Whether the body filters select events (any of event, entity or aspect types, or actors)."""
        return bool(self.event_types or self.entity_types or self.aspect_types or self.actor_urns)

    def with_window(self, now_ms: int) -> SearchRequest:
        """Return the request with a concrete window: end -1 = now, start -1 = end - 1 day.

        Raises:
            RequestError: when the resolved start is after the resolved end.
        """
        end_time = now_ms if self.end_time == DEFAULT_TIME else self.end_time
        start_time = end_time - DAY_MS if self.start_time == DEFAULT_TIME else self.start_time
        if start_time > end_time:
            raise RequestError(f"startTime: {start_time} is after endTime {end_time}")
        return dataclasses.replace(self, start_time=start_time, end_time=end_time)


def _parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise RequestError(f"{name}: {value!r} is not a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and WHOLE_NUMBER.fullmatch(value.strip()):
        return int(value.strip())
    raise RequestError(f"{name}: {value!r} is not a whole number")


def _parse_time(value: Any, name: str) -> int:
    if value is None or value == "":
        return DEFAULT_TIME
    millis = _parse_int(value, name)
    if millis < DEFAULT_TIME:
        raise RequestError(f"{name}: {millis} must be epoch milliseconds >= 0 (or -1 for the default)")
    if millis > MAX_TIME_MS:
        raise RequestError(f"{name}: {millis} is after the year 9999")
    return millis


def _parse_size(value: Any, max_size: int) -> int:
    if value is None or value == "":
        return min(DEFAULT_SIZE, max_size)
    size = _parse_int(value, "size")
    if not 1 <= size <= max_size:
        raise RequestError(f"size: {size} is out of range (1..{max_size}); the server's limit is {max_size}")
    return size


def _parse_bool(value: Any, name: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise RequestError(f"{name}: {value!r} is not true or false")


def _parse_body(body: Any) -> dict[str, tuple[str, ...]]:
    """Validate the JSON body and return the filter fields of SearchRequest."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RequestError(f"body: expected a JSON object with {', '.join(BODY_FILTERS)}, got {type(body).__name__}")
    unknown = sorted(set(body) - set(BODY_FILTERS))
    if unknown:
        raise RequestError(f"body: unknown field(s) {unknown} (known: {', '.join(BODY_FILTERS)})")
    filters: dict[str, tuple[str, ...]] = {}
    for key in BODY_FILTERS:
        values = body.get(key)
        if values is None:
            values = []
        if not isinstance(values, list):
            raise RequestError(f"body.{key}: expected a list of strings, got {_describe(values)}")
        if len(values) > MAX_FILTER_VALUES:
            raise RequestError(f"body.{key}: {len(values)} values; at most {MAX_FILTER_VALUES} are allowed")
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise RequestError(f"body.{key}[{index}]: expected a string, got {_describe(value)}")
            if len(value) > MAX_FILTER_VALUE_CHARS:
                raise RequestError(f"body.{key}[{index}]: longer than {MAX_FILTER_VALUE_CHARS} characters")
        if key == "eventTypes":
            unknown_types = [v for v in values if v not in EVENT_TYPES]
            if unknown_types:
                raise RequestError(
                    f"body.eventTypes: unknown event type(s) {unknown_types} (known: {', '.join(EVENT_TYPES)})"
                )
        field_name = {"eventTypes": "event_types", "entityTypes": "entity_types",
                      "aspectTypes": "aspect_types", "actorUrns": "actor_urns"}[key]  # fmt: skip
        filters[field_name] = tuple(dict.fromkeys(values))
    return filters


def _describe(value: Any) -> str:
    text = json.dumps(value)
    return f"{type(value).__name__} {text[:60]}"


def query_binding(filters: Mapping[str, Sequence[str]], size: int, include_raw: bool) -> str:
    """The canonical text of what a scroll id is bound to: the filters (order and repeats aside), size, includeRaw."""
    canonical = {name: sorted(set(values)) for name, values in sorted(filters.items())}
    return json.dumps([canonical, size, include_raw], separators=(",", ":"))


def encode_scroll_id(key: ScrollKey, signer: ScrollSigner, binding: str) -> str:
    """Return the opaque scroll id of a sort key: urlsafe base64 of JSON plus its HMAC tag.

    Args:
        key: where the page ended, its window and pinned table version.
        signer: the server's key and the caller the id is issued to.
        binding: the query the id is bound to (`query_binding`).
    """
    payload = json.dumps(
        [_SCROLL_VERSION, key.timestamp, key.event_type, key.actor_urn, key.event_id, key.start_time, key.end_time,
         key.table_version],
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(f"{payload}|{signer.tag(payload, binding)}".encode()).decode().rstrip("=")


def decode_scroll_id(scroll_id: str, signer: ScrollSigner | None, binding: str) -> ScrollKey:
    """Decode a scroll id made by `encode_scroll_id` with the same key, caller and query binding.

    Raises:
        RequestError: when the text is not a scroll id this service issued to this caller for this query
            (bad encoding, a tag that does not match: forged, changed or foreign).
    """
    shown = scroll_id if len(scroll_id) <= 80 else scroll_id[:77] + "..."
    problem = RequestError(
        f"scrollId: {shown!r} is not a valid scroll id for this caller and query (use the nextScrollId of the "
        "previous page, with the same filters, size and includeRaw)"
    )
    if signer is None:
        raise problem
    try:
        text = base64.urlsafe_b64decode(scroll_id + "=" * (-len(scroll_id) % 4)).decode()
        payload, tag = text.rsplit("|", 1)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise problem from None
    if not hmac.compare_digest(signer.tag(payload, binding).encode(), tag.encode()):
        raise problem
    try:
        fields = json.loads(payload)
    except ValueError:
        raise problem from None
    # Signed by this server, but check the shape and ranges as for any input (an older id's layout).
    if not isinstance(fields, list) or len(fields) != 8:
        raise problem
    version, timestamp, event_type, actor_urn, event_id, start_time, end_time, table_version = fields
    ints = (timestamp, start_time, end_time)
    strings = (event_type, actor_urn, event_id)
    if version != _SCROLL_VERSION or not all(type(v) is int for v in ints) or not all(isinstance(v, str) for v in strings):
        raise problem
    if not all(0 <= v <= MAX_TIME_MS for v in ints):
        raise problem
    if type(table_version) is not int or table_version < UNPINNED:
        raise problem
    return ScrollKey(timestamp, event_type, actor_urn, event_id, start_time, end_time, table_version)


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
