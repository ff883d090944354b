"""The report download endpoint: the regulator report of `lakehouse report`, streamed over HTTP."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pyspark.sql import SparkSession

from conf.errors import InputError, RequestError
from conf.settings import Settings
from gold.auth import AUDIT_READ
from pipelines.batch.audit_report import MEDIA_TYPES, parse_report_query, report_download, report_filename
from pipelines.serving.tokens import TokenVerifier

REPORT_PATH = "/openapi/v1/audit/report"


def report_router(settings: Settings, verifier: TokenVerifier, spark: SparkSession | None = None) -> APIRouter:
    """Return the router of the report download, authenticated like the audit search (audit-read).

    Args:
        settings: the lakehouse settings.
        verifier: the API's token verifier.
        spark: a session to read with; without one each download opens its own for its length.
    """
    router = APIRouter()

    @router.get(
        REPORT_PATH,
        summary="Download a regulator report of metadata changes",
        description="Who changed what and when (chained silver change events), one row per change, with a "
        "header naming the window, the filters and the chain head digest. Parameters: from, to (required; "
        "epoch ms or ISO-8601, UTC; [from, to)), actor, entity, format (csv, parquet or html; default csv). "
        "The body is streamed as it is produced.",
        response_class=StreamingResponse,
        responses={200: {"content": {media: {} for media in MEDIA_TYPES.values()}}},
    )
    async def download_report(request: Request) -> StreamingResponse:
        await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        try:
            query = parse_report_query(dict(request.query_params))
        except InputError as exc:
            raise RequestError(str(exc)) from None
        return StreamingResponse(
            _stream(settings, spark, query),
            media_type=MEDIA_TYPES[query.format],
            headers={
                "Content-Disposition": f'attachment; filename="{report_filename(query)}"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    return router


def _stream(settings: Settings, spark: SparkSession | None, query) -> Iterator[bytes]:
    """The report's bytes, reading with `spark` or a session opened for the length of the download."""
    from pipelines.runtime.engine import open_session

    with contextlib.ExitStack() as stack:
        session = spark or stack.enter_context(open_session(settings))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="report-"))) / "report.parquet"
        yield from report_download(session, settings, query, scratch)
