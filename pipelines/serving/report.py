"""The report download endpoint: the regulator report of `lakehouse report`, streamed over HTTP."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from conf.errors import InputError, RequestError
from conf.settings import Settings
from gold.auth import AUDIT_READ
from pipelines.batch.audit_report import MEDIA_TYPES, ReportQuery, parse_report_query, report_download, report_filename
from pipelines.serving.explorer import SessionSource
from pipelines.serving.scoped_reads import EntityDomains, change_event_scope
from pipelines.serving.tokens import TokenVerifier

if TYPE_CHECKING:  # the in-process serving path imports no engine (docs/api.md#serving-processes)
    from pyspark.sql import SparkSession

REPORT_PATH = "/openapi/v1/audit/report"


def report_router(settings: Settings, verifier: TokenVerifier, sessions: SessionSource) -> APIRouter:
    """Return the router of the report download, authenticated like the audit search (audit-read).

    Downloads are data requests: each holds a query slot for its whole length (the hardening middleware),
    and all read with the server's one session, so concurrent downloads neither start engines nor grow
    the process beyond serve.query_slots reports at once.

    Args:
        settings: the lakehouse settings.
        verifier: the API's token verifier.
        sessions: the server's session (opened on the first download when the server has none).
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
        # Resolved before the body starts, so that a failure is an error status, not a cut download.
        scope_sql = (await run_in_threadpool(change_event_scope, principal.scope, domains)).spark_sql
        scope_label = ", ".join(principal.scope.to_specs()) or "(all)"
        spark = await run_in_threadpool(sessions.get)
        return StreamingResponse(
            _stream(spark, settings, query, scope_sql, scope_label),
            media_type=MEDIA_TYPES[query.format],
            headers={
                "Content-Disposition": f'attachment; filename="{report_filename(query)}"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    return router


def _stream(
    spark: SparkSession, settings: Settings, query: ReportQuery, scope_sql: str | None, scope_label: str
) -> Iterator[bytes]:
    """The report's bytes, read with the server's session (Parquet: through a scratch file removed after)."""
    with tempfile.TemporaryDirectory(prefix="report-") as scratch:
        scratch_file = Path(scratch) / "report.parquet"
        yield from report_download(spark, settings, query, scratch_file, scope_sql, scope_label)
