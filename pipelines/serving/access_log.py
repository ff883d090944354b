"""The audit of the auditors: one ops.access_log record per request that reads audit data, refused ones included.

`AccessLogMiddleware` wraps the API: for each request to a data endpoint it opens an `AccessNote` (a
context variable the authentication and the handlers fill in: principal, filters, result count) and,
when the response has started, hands a record to `AccessLogWriter`. The writer buffers records and
appends them with delta-rs from a background thread, every access_log.flush_seconds and at shutdown,
each flush one batch linked into the audit chain (`pipelines.batch.audit_chain.link_arrow_batch`).
Nothing here runs on the request path but appending to a list.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conf.settings import Settings
from conf.tables import ACCESS_LOG, table_location, table_spec
from gold.scopes import Principal
from pipelines.privacy.readers import pseudonymous_access_rows
from pipelines.runtime.storage import delta_storage_options, table_exists

ACCESS_TABLE = ACCESS_LOG
log = logging.getLogger("lakehouse.access_log")
# Outcome of a request by its status: redirect (3xx), refused (401/403), invalid (other 4xx), busy (429/503),
# error (5xx).
_OUTCOMES = {401: "refused", 403: "refused", 429: "busy", 503: "busy"}
MAX_FILTER_CHARS = 4096
# The filters key of a record cut to fit: the length of the filters' whole JSON text.
TRUNCATED_KEY = "truncatedFromChars"
# The filters key holding the reader's scope (`kind=value` texts), never cut: who may see the record.
SCOPE_KEY = "scope"
# How far each value of too large filters is cut, tried in turn: characters of a text, items of a list.
_CUT_LENGTHS = (256, 64, 16)
# A flush is one commit: a checkpoint every so many keeps opening the table from growing with them.
CHECKPOINT_EVERY = 100


@dataclass
class AccessNote:
    """What one request's handlers learned about it, for its access record.

    Attributes:
        principal: the authenticated caller (None until authenticated, or when refused).
        claimed: who the caller claimed to be when refused (a token id or a JWT subject), if known.
        filters: the request's filters as the handler parsed them.
        result_count: how many results the response holds (the total where the endpoint reports one).
    """

    principal: Principal | None = None
    claimed: str | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    result_count: int | None = None


_CURRENT: contextvars.ContextVar[AccessNote | None] = contextvars.ContextVar("lakehouse_access_note", default=None)


def current_note() -> AccessNote | None:
    """The access note of the request being handled (None outside a logged request)."""
    return _CURRENT.get()


def note_result(filters: Mapping[str, Any] | None = None, result_count: int | None = None) -> None:
    """Record the filters and result count of the request being handled (nothing outside a logged request)."""
    note = _CURRENT.get()
    if note is None:
        return
    if filters:
        note.filters.update({k: v for k, v in filters.items() if v not in (None, "", [], ())})
    if result_count is not None:
        note.result_count = int(result_count)


def outcome_of(status: int) -> str:
    """The access record outcome of an HTTP status."""
    if status < 300:
        return "ok"
    if status < 400:
        return "redirect"
    return _OUTCOMES.get(status, "error" if status >= 500 else "invalid")


def filters_json(filters: Mapping[str, Any]) -> str:
    """The filters as stored: JSON of at most MAX_FILTER_CHARS characters, always valid.

    Filters too large to store whole have each text and list cut (the reader's scope aside) and carry
    TRUNCATED_KEY, the length of the whole text; when even that does not fit, only the marker and the
    scope are kept.
    """
    text = json.dumps(filters, sort_keys=True, default=str, ensure_ascii=False)
    if len(text) <= MAX_FILTER_CHARS:
        return text
    plain = json.loads(text)
    kept = {SCOPE_KEY: plain[SCOPE_KEY]} if SCOPE_KEY in plain else {}
    for length in _CUT_LENGTHS:
        cut = {name: _cut(value, length) for name, value in plain.items() if name != SCOPE_KEY}
        shorter = json.dumps({**cut, **kept, TRUNCATED_KEY: len(text)}, sort_keys=True, ensure_ascii=False)
        if len(shorter) <= MAX_FILTER_CHARS:
            return shorter
    marker_only = json.dumps({**kept, TRUNCATED_KEY: len(text)}, sort_keys=True, ensure_ascii=False)
    # A scope too long to keep is dropped: the record is then shown to unscoped admins only.
    return marker_only if len(marker_only) <= MAX_FILTER_CHARS else json.dumps({TRUNCATED_KEY: len(text)})


def _cut(value: Any, length: int) -> Any:
    """`value` with every text cut to `length` characters and every list to `length` items."""
    if isinstance(value, str):
        return value if len(value) <= length else value[:length] + "…"
    if isinstance(value, list):
        return [_cut(item, length) for item in value[:length]]
    if isinstance(value, dict):
        return {name: _cut(item, length) for name, item in list(value.items())[:length]}
    return value


def arrow_schema() -> pa.Schema:
    """The Arrow schema of ops.access_log as its registry entry declares it."""
    types = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32(), "DATE": pa.date32()}
    return pa.schema([(name, types[kind]) for name, kind in table_spec(ACCESS_TABLE).column_types])


class AccessLogWriter:
    """Buffers access records and appends them to ops.access_log in batches, off the request path.

    Args:
        settings: the lakehouse settings (table location, access_log.flush_seconds and max_buffered).
        link: links a written batch into the audit chain: (batch id, its rows, table version) -> None.
        on_flush: called after each timed flush (e.g. to write token last-used times).
    """

    def __init__(
        self,
        settings: Settings,
        link: Callable[[str, pa.Table, int], None] | None = None,
        on_flush: Callable[[], None] | None = None,
    ):
        self._settings = settings
        self._location = str(table_location(settings, ACCESS_TABLE))
        self._options = delta_storage_options(self._location)
        self._interval = settings.access_log.flush_seconds
        self._max = settings.access_log.max_buffered
        self._link = link
        self._on_flush = on_flush
        self._buffer: list[dict[str, Any] | Callable[[], dict[str, Any]]] = []
        self._table: Any = None
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, record: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Queue one record, or a function building it (built by the flush, off the request path).

        A full buffer wakes the flusher at once.
        """
        with self._lock:
            self._buffer.append(record)
            full = len(self._buffer) >= self._max
        if full:
            self._wake.set()

    def start(self) -> None:
        """Start the background flusher."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lakehouse-access-log", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
                if self._on_flush is not None:
                    self._on_flush()
            except Exception:  # noqa: BLE001 - the records stay buffered and the next flush retries them
                log.exception("access log flush failed; the records are kept for the next flush")

    def flush(self) -> int:
        """Append the buffered records as one batch and link it; return how many were written.

        On a failed write the records go back to the front of the buffer: none is lost.
        """
        with self._writing:
            with self._lock:
                records, self._buffer = self._buffer, []
            if not records:
                return 0
            try:
                self._write(records)
            except BaseException:
                with self._lock:
                    self._buffer = records + self._buffer
                raise
            return len(records)

    def _write(self, records: list[dict[str, Any] | Callable[[], dict[str, Any]]]) -> None:
        from deltalake import DeltaTable, write_deltalake

        batch_id = f"access-{int(time.time() * 1000)}-{secrets.token_hex(4)}"
        rows = [{**(r() if callable(r) else r), "batch_id": batch_id} for r in records]
        # The readers are people too: stored as pseudonyms when privacy.pseudonymise is on.
        rows = pseudonymous_access_rows(self._settings, rows)
        table = pa.Table.from_pylist(rows, schema=arrow_schema())
        if self._table is None and table_exists(self._location):
            self._table = DeltaTable(self._location, storage_options=self._options)
        if self._table is None:
            write_deltalake(self._location, table, mode="append", storage_options=self._options, partition_by=list(table_spec(ACCESS_TABLE).partitioned_by))
            self._table = DeltaTable(self._location, storage_options=self._options)
        else:
            # The table object is kept and brought up to date by each write: no replay of its log per flush.
            write_deltalake(self._table, table, mode="append")
        version = int(self._table.version())
        if version % CHECKPOINT_EVERY == 0:
            self._table.create_checkpoint()
        if self._link is not None:
            self._link(batch_id, table, version)

    def close(self) -> None:
        """Stop the flusher and write what is buffered (a clean stop loses no record)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.flush()
        if self._on_flush is not None:
            self._on_flush()


def access_record(
    note: AccessNote, method: str, endpoint: str, client: str | None, status: int, now_ms: int
) -> dict[str, Any]:
    """The ops.access_log row of one finished request (batch_id is set by the flush)."""
    principal = note.principal
    filters = dict(note.filters)
    if principal is not None and principal.scope.restricted:
        filters[SCOPE_KEY] = principal.scope.to_specs()
    return {
        "access_id": secrets.token_hex(16),
        "accessed_at_ms": now_ms,
        "principal": principal.name if principal else note.claimed,
        "actor": principal.actor if principal else None,
        "method": method,
        "endpoint": endpoint,
        "filters": filters_json(filters),
        "result_count": note.result_count,
        "client_address": client,
        "status": status,
        "outcome": outcome_of(status),
        "access_date": dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.timezone.utc).date(),
    }


class AccessLogMiddleware:
    """ASGI middleware recording every request to a data endpoint in the access log.

    Args:
        app: the application.
        writer: where records go.
        logged: whether a request path reads audit data.
    """

    def __init__(self, app: ASGIApp, writer: AccessLogWriter, logged: Callable[[str], bool]):
        self.app = app
        self._writer = writer
        self._logged = logged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._logged(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        note = AccessNote()
        token = _CURRENT.set(note)
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            _CURRENT.reset(token)
            client = scope.get("client")
            request = (scope.get("method", ""), scope.get("path", ""), client[0] if client else None, status)
            now_ms = int(time.time() * 1000)
            self._writer.add(lambda: access_record(note, *request, now_ms))
