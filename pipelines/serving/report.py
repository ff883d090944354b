"""The report download endpoint: the regulator report of `lakehouse report`, read in-process and streamed.

The rows are those `pipelines.batch.audit_report.report_rows` reads with Spark (the change events of the
batches linked into the audit chain, in the window and filters, oldest first), read here with delta-rs one
UTC day (`event_date` partition) with events at a time, so a download holds one day of events in memory,
never the window. The header, the row shape and the formats are `pipelines.audit_trail.report_format`'s.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from conf.errors import InputError, RequestError
from conf.settings import Settings
from conf.tables import ENTITY_CHANGE_EVENTS, table_location
from gold.audit_chain import GENESIS_DIGEST, next_link_position
from pipelines.audit_trail.arrow_chain import last_link
from pipelines.audit_trail.chain_keys import CHAIN_TABLE
from pipelines.audit_trail.report_format import (
    MEDIA_TYPES, ReportQuery, header_for, parse_report_query, report_bytes, report_filename, report_row,
)  # fmt: skip
from pipelines.privacy.display import person_pseudonym, rows_with_identities
from pipelines.runtime.storage import delta_storage_options, table_exists
from pipelines.serving.access_log import AccessNote, current_note, note_result
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.explorer_data import latest_dataset
from pipelines.serving.scoped_reads import EntityDomains, change_event_scope
from pipelines.serving.tokens import TokenVerifier

REPORT_PATH = "/openapi/v1/audit/report"
# The change-event columns a report row is made of.
EVENT_COLUMNS = ("event_time", "event_id", "actor", "entity_urn", "entity_type", "category", "operation",
                 "modifier", "old_value", "new_value", "batch_id")  # fmt: skip


def chain_head(settings: Settings) -> str:
    """The digest of the audit chain's newest link (all zeros for an empty chain), read with delta-rs."""
    location = table_location(settings, CHAIN_TABLE)
    if not table_exists(location):
        return GENESIS_DIGEST
    last = last_link(DeltaTable(str(location), storage_options=delta_storage_options(location)), str(location))
    return next_link_position([last] if last else [])[1]


def chained_batches(settings: Settings) -> list[str]:
    """The change-event batches linked into the audit chain (a report shows only those)."""
    dataset = latest_dataset(table_location(settings, CHAIN_TABLE))
    if dataset is None:
        return []
    linked = dataset.to_table(columns=["batch_id"], filter=ds.field("table_key") == ENTITY_CHANGE_EVENTS)
    return pc.unique(linked["batch_id"]).to_pylist()


def read_report_rows(settings: Settings, query: ReportQuery, scope: ds.Expression | None) -> Iterator[dict[str, str]]:
    """Yield the report's rows oldest first (ties by event id), reading one UTC day of events at a time.

    Args:
        scope: an Arrow filter over the change events the reader may see (None: every row).
    """
    dataset = latest_dataset(table_location(settings, ENTITY_CHANGE_EVENTS))
    batches = chained_batches(settings)
    if dataset is None or not batches:
        return
    condition = ds.field("batch_id").isin(batches)
    if scope is not None:
        condition &= scope
    if query.actor:
        condition &= ds.field("actor") == query.actor
    if query.entity:
        condition &= (ds.field("entity_urn") == query.entity) | (ds.field("aspect_entity_urn") == query.entity)
    # The window's days that hold events, from the partition values of the files (empty days cost nothing).
    in_window = (ds.field("event_time") >= query.from_ms) & (ds.field("event_time") < query.to_ms)
    fragments = dataset.get_fragments(filter=condition & in_window & _days_filter(query.from_ms, query.to_ms))
    days = sorted({ds.get_partition_keys(f.partition_expression).get("event_date") for f in fragments} - {None})
    for day in days:
        on_day = ds.field("event_date") == pa.scalar(day)
        events = dataset.to_table(columns=list(EVENT_COLUMNS), filter=condition & in_window & on_day)
        for event in events.sort_by([("event_time", "ascending"), ("event_id", "ascending")]).to_pylist():
            yield report_row(event)


def _days_filter(from_ms: int, to_ms: int) -> ds.Expression:
    """The event_date partitions of [from_ms, to_ms) (UTC days)."""
    first, last = (dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date() for ms in (from_ms, to_ms - 1))
    return (ds.field("event_date") >= pa.scalar(first)) & (ds.field("event_date") <= pa.scalar(last))


def report_router(settings: Settings, verifier: TokenVerifier) -> APIRouter:
    """Return the router of the report download, authenticated like the audit search (audit-read).

    Downloads are data requests: each holds a query slot for its whole length (the hardening middleware),
    so at most serve.query_slots reports are read at once.

    Args:
        settings: the lakehouse settings.
        verifier: the API's token verifier.
    """
    router = APIRouter()
    domains = EntityDomains(settings)

    @router.get(
        REPORT_PATH,
        summary="Download a regulator report of metadata changes",
        description="Who changed what and when (chained silver change events), one row per change, with a "
        "header naming the window, the filters and the chain head digest. Parameters: from, to (required; "
        "epoch ms or ISO-8601, UTC; [from, to)), actor, entity, format (csv, parquet or html; default csv). "
        "The body is streamed as it is produced. A token limited to a scope gets the change events of its "
        "scope only.",
        response_class=StreamingResponse,
        responses={200: {"content": {media: {} for media in MEDIA_TYPES.values()}}},
    )
    async def download_report(request: Request) -> StreamingResponse:
        principal = await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        try:
            query = parse_report_query(dict(request.query_params))
        except InputError as exc:
            raise RequestError(str(exc)) from None
        asked, query = query, dataclasses.replace(query, actor=person_pseudonym(settings, query.actor))
        note_result({"from": query.from_ms, "to": query.to_ms, "actor": query.actor, "entity": query.entity,
                     "format": query.format})  # fmt: skip
        # Resolved before the body starts, so that a failure is an error status, not a cut download.
        scope = (await run_in_threadpool(change_event_scope, principal.scope, domains)).arrow
        scope_label = ", ".join(principal.scope.to_specs()) or "(all)"
        # The header names the filter as the reader asked it; the access log, by pseudonym.
        header = header_for(asked, await run_in_threadpool(chain_head, settings), scope_label)
        return StreamingResponse(
            _stream(settings, query, header, scope, current_note(), principal.sees_sensitive),
            media_type=MEDIA_TYPES[query.format],
            headers={
                "Content-Disposition": f'attachment; filename="{report_filename(query)}"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    return router


def _stream(
    settings: Settings,
    query: ReportQuery,
    header: dict[str, str],
    scope: ds.Expression | None,
    note: AccessNote | None,
    identities: bool,
) -> Iterator[bytes]:
    """The report's bytes (Parquet: through a scratch file removed after); the rows read are counted on `note`
    (the access record is built after the last byte is sent); `identities`: people shown as who they are."""
    rows = read_report_rows(settings, query, scope)
    if identities:
        rows = rows_with_identities(settings, rows)
    with tempfile.TemporaryDirectory(prefix="report-") as scratch:
        yield from report_bytes(query, header, _counted(rows, note), Path(scratch) / "report.parquet")


def _counted(rows: Iterator[dict[str, str]], note: AccessNote | None) -> Iterator[dict[str, str]]:
    if note is not None:
        note.result_count = 0
    for row in rows:
        if note is not None:
            note.result_count += 1
        yield row
