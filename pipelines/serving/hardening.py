"""The API's hardened HTTP surface: admission on every data endpoint, body limits, HEAD, HSTS, 429 and 413.

Every request under a data prefix (the audit search, the report, the explorer's and anomalies' JSON)
holds an admission place and a query slot for its whole length, streamed bodies included, so neither
many searches nor many report downloads can take more than serve.query_slots of the process at once.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conf.errors import AuthError, ConfigError, RequestError
from conf.settings import Settings
from conf.values import whole_number
from pipelines.serving.admission import Admission, OverloadedError
from pipelines.serving.rate_limit import RateLimitedError

# The paths that read audit data: every request under them goes through admission.
DATA_PREFIXES = ("/openapi/v1/", "/api/v1/")
# A JSON string (escapes included), and the bytes that are not brackets: what json_depth ignores.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# A year, the common minimum for HSTS preload lists; sent only on HTTPS responses.
HSTS_VALUE = "max-age=31536000; includeSubDomains"


class PayloadTooLargeError(RequestError):
    """A request body above serve.max_body_bytes: served as HTTP 413."""

    status = 413


def is_data_path(path: str) -> bool:
    """Tell whether `path` reads audit data (and so needs admission and `Cache-Control: no-store`)."""
    return path.startswith(DATA_PREFIXES)


async def read_body(request: Request, limit: int) -> bytes:
    """Read the request body, refusing one above `limit` bytes before reading it all.

    Raises:
        PayloadTooLargeError: when the declared or the received length is above `limit`.
        RequestError: when the client goes away before the end of the body.
    """
    too_large = f"body: larger than the limit of {limit} bytes (serve.max_body_bytes)"
    declared = whole_number(request.headers.get("content-length", ""))
    if declared is not None and declared > limit:
        raise PayloadTooLargeError(too_large)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(too_large)
            chunks.append(chunk)
    except ClientDisconnect:
        raise RequestError("body: the client disconnected before sending all of it") from None
    return b"".join(chunks)


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do not count).

    Done in C (regex, translate, a cumulative sum): a body near serve.max_body_bytes costs milliseconds
    on the event loop, whatever its shape.
    """
    brackets = np.frombuffer(_JSON_STRING.sub(b"", raw).translate(None, delete=_NOT_BRACKETS), dtype=np.uint8)
    if brackets.size == 0:
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def decode_json_body(raw: bytes, max_depth: int) -> Any:
    """Decode a request body: empty means none (None); anything else must be JSON nested at most `max_depth` deep.

    The depth is checked before parsing: a deeply nested document would exhaust the parser's recursion.

    Raises:
        RequestError: for a body that is not JSON or is nested too deep.
    """
    if not raw.strip():
        return None
    depth = json_depth(raw)
    if depth > max_depth:
        raise RequestError(f"body: JSON nested {depth} levels deep, above the limit of {max_depth} (serve.max_json_depth)")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RequestError(f"body: not valid JSON ({exc})") from None


async def authenticated_or_none(verifier: Any, authorization: str | None, role: str) -> Any:
    """The caller's token record when the request carries a valid token with `role`, else None."""
    if not authorization:
        return None
    try:
        return await verifier.authenticate_request(authorization, role)
    except AuthError:
        return None


class HardenedHttp:
    """ASGI middleware: HEAD served as GET without a body, admission on data paths, HSTS over HTTPS.

    Args:
        app: the application.
        admission: the query slots and wait queue every data request goes through.
    """

    def __init__(self, app: ASGIApp, admission: Admission):
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        https = scope.get("scheme") == "https"
        if head:
            scope = {**scope, "method": "GET"}

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start" and https:
                MutableHeaders(scope=message)["Strict-Transport-Security"] = HSTS_VALUE
            if message["type"] == "http.response.body" and head:
                message = {**message, "body": b""}
            await send(message)

        if not is_data_path(scope["path"]):
            await self.app(scope, receive, send_hardened)
            return
        async with contextlib.AsyncExitStack() as held:
            try:
                held.enter_context(self.admission.admit())
                await held.enter_async_context(self.admission.slot())
            except OverloadedError as exc:
                await _overloaded(exc)(scope, receive, send_hardened)
                return
            # The place and the slot are held until the response's last byte is sent.
            await self.app(scope, receive, send_hardened)


def _overloaded(exc: OverloadedError) -> JSONResponse:
    return JSONResponse(
        {"error": str(exc)},
        status_code=503,
        headers={"Retry-After": str(exc.retry_after_s), "Cache-Control": "no-store"},
    )


def install_hardening(app: FastAPI, admission: Admission) -> None:
    """Add the hardened HTTP surface to `app`: the middleware and the 429 answer.

    A 413 (`PayloadTooLargeError`) is a RequestError carrying its status, answered by the app's handler of those.
    """

    @app.exception_handler(RateLimitedError)
    async def _rate_limited(_: Request, exc: RateLimitedError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=429, headers={"Retry-After": str(exc.retry_after_s)})

    app.add_middleware(HardenedHttp, admission=admission)


def tls_options(settings: Settings, cert: str | Path | None = None, key: str | Path | None = None) -> dict[str, str]:
    """The uvicorn options serving HTTPS with `cert` and `key` (default serve.tls_cert_file and tls_key_file).

    Returns:
        `{ssl_certfile, ssl_keyfile}`, or nothing when neither is set (plain HTTP).

    Raises:
        ConfigError: when only one is set, or a file cannot be read.
    """
    cert = cert if cert is not None else settings.serve.tls_cert_file
    key = key if key is not None else settings.serve.tls_key_file
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        raise ConfigError(f"--tls-cert: {cert!r} and --tls-key: {key!r} must be given together")
    paths = {"--tls-cert": settings.secret_path(str(cert)), "--tls-key": settings.secret_path(str(key))}
    for option, path in paths.items():
        if not path.is_file():
            raise ConfigError(f"{option}: {str(path)!r} is not a readable file")
    return {"ssl_certfile": str(paths["--tls-cert"]), "ssl_keyfile": str(paths["--tls-key"])}
