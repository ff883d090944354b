"""The audit explorer: the web page at `/`, its static files, and the JSON endpoints it reads beyond search.

Endpoints (all authenticated like the audit search, audit-read role; a token's scope narrows the change
events and timelines, while the per-actor aggregates serve unscoped readers only, see docs/api.md#scopes):
- GET /api/v1/changes?actor=&entity=&category=&operation=&since=&until=&size=&after=   change-event search
- GET /api/v1/timeline?urn=        the change events of an entity, oldest first
- GET /api/v1/timeline/as-of?urn=&at=   the entity's aspects as they were at a time
- GET /api/v1/activity?since=&until=&limit=   events per day and category, top actors, top entities
- GET /api/v1/activity/actor?actor=&since=&until=&limit=   one actor's days, entities touched, anomalies
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Mapping

from fastapi import APIRouter, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conf.errors import InputError, RequestError
from conf.settings import Settings
from gold.scopes import Principal
from conf.values import parse_time_ms, whole_number
from pipelines.privacy.display import person_pseudonym, shown_to
from pipelines.serving.access_log import note_result
from pipelines.serving.anomalies import AnomalyQuery, parse_limit, parse_window
from pipelines.serving.as_of import read_aspects_as_of
from conf.tables import table_location
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.explorer_data import CHANGES_TABLE, ActivityReader, ChangeQuery, read_entity_history, search_changes
from pipelines.serving.scoped_reads import (
    ChangeEventScope, EntityDomains, OutOfScopeError, change_event_scope, visible_history,
)  # fmt: skip
from pipelines.serving.tokens import TokenVerifier

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_PREFIX = "/static"
DEFAULT_LIMIT = 10
MAX_LIMIT = 100
DEFAULT_PAGE = 50
MAX_PAGE = 1000
CHANGE_PARAMETERS = ("actor", "entity", "category", "operation", "since", "until", "size", "after")
# Scripts, styles and data only from this origin; no inline code, no eval, never framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
STATIC_CACHE_CONTROL = "public, max-age=3600"
PAGE_CACHE_CONTROL = "no-cache"


def parse_urn(params: Mapping[str, str]) -> str:
    """Return the `urn` parameter.

    Raises:
        RequestError: when it is absent or not a DataHub urn.
    """
    urn = (params.get("urn") or "").strip()
    if not urn.startswith("urn:li:"):
        raise RequestError(f"urn: {urn!r} is not a DataHub urn (urn:li:<type>:<id>)")
    return urn


def parse_change_query(params: Mapping[str, str]) -> ChangeQuery:
    """Build a change-event search from URL parameters.

    Raises:
        RequestError: naming the parameter, for a bad size, cursor or window.
    """
    since, until = parse_window(params)
    raw_size = params.get("size") or str(DEFAULT_PAGE)
    size = whole_number(raw_size)
    if size is None or not 1 <= size <= MAX_PAGE:
        raise RequestError(f"size: {raw_size!r} is not a whole number from 1 to {MAX_PAGE}")
    after = None
    if params.get("after"):
        time_text, _, event_id = params["after"].partition(":")
        after_ms = whole_number(time_text)
        if after_ms is None or not event_id:
            raise RequestError(f"after: {params['after']!r} is not a cursor (the nextCursor of the previous page)")
        after = (after_ms, event_id)
    text = {name: (params.get(name) or "").strip() or None for name in ("actor", "entity", "category", "operation")}
    return ChangeQuery(**text, since_ms=since, until_ms=until, size=size, after=after)


def check_parameters(params: Mapping[str, str], known: tuple[str, ...]) -> None:
    """Refuse a parameter the endpoint does not know (a typo would otherwise be silently ignored).

    Raises:
        RequestError: naming the first unknown parameter.
    """
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown parameter (known: {', '.join(known)})")


def entity_type_of(urn: str) -> str:
    """The entity type an urn names: `urn:li:<type>:...` gives `<type>`."""
    return urn.split(":", 3)[2]


def explorer_router(
    settings: Settings, verifier: TokenVerifier, aggregates: TokenVerifier | None = None
) -> APIRouter:
    """Return the router of the page and its JSON endpoints.

    Args:
        verifier: authenticates the change search and the timelines (a principal's scope narrows them).
        aggregates: authenticates the per-actor activity endpoints (default: `verifier`).
    """
    router = APIRouter()
    activity = ActivityReader(settings)
    changes_location = table_location(settings, CHANGES_TABLE)
    domains = EntityDomains(settings)
    aggregates = aggregates or verifier

    async def authenticated(
        request: Request, known: tuple[str, ...], by: TokenVerifier = verifier
    ) -> tuple[Principal, dict[str, str]]:
        principal = await by.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        params = dict(request.query_params)
        check_parameters(params, known)
        return principal, params

    def scope_of(principal: Principal) -> ChangeEventScope:
        return change_event_scope(principal.scope, domains)

    def history(urn: str, principal: Principal) -> dict[str, Any]:
        events = read_entity_history(changes_location, urn)
        if not principal.scope.restricted:
            note_result(result_count=len(events))
            return {"urn": urn, "events": events}
        scope = scope_of(principal)
        # Events are shown by the entity whose aspect was written (a schema field's by its dataset's).
        visible = visible_history(events, scope)
        if not visible and not scope.visible_entities([urn], [entity_type_of(urn)])[0]:
            # The same answer whether the entity exists or not: a scope does not reveal what lies outside it.
            raise OutOfScopeError(f"urn: {urn!r} is not in the caller's scope")
        note_result(result_count=len(visible))
        return {"urn": urn, "events": visible}

    def as_of(urn: str, at_ms: int, principal: Principal) -> dict[str, Any]:
        if principal.scope.restricted and not scope_of(principal).visible_entities([urn], [entity_type_of(urn)])[0]:
            raise OutOfScopeError(f"urn: {urn!r} is not in the caller's scope")
        aspects = read_aspects_as_of(settings, urn, at_ms)
        note_result(result_count=len(aspects))
        return {"urn": urn, "at": at_ms, "aspects": aspects}

    async def respond(work: Callable[[], Any], principal: Principal) -> JSONResponse:
        # Identities are shown as the audit search shows them (docs/privacy.md).
        return JSONResponse(jsonable_encoder(await run_in_threadpool(lambda: shown_to(settings, work(), principal))))

    @router.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for /favicon.ico whatever the page links; an SVG icon answers both.
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    @router.get("/api/v1/timeline", summary="The change events of one entity, oldest first")
    async def timeline(request: Request) -> JSONResponse:
        principal, params = await authenticated(request, ("urn",))
        urn = parse_urn(params)
        note_result({"urn": urn})
        return await respond(lambda: history(urn, principal), principal)

    @router.get("/api/v1/timeline/as-of", summary="The aspects of one entity as they were at a time")
    async def timeline_as_of(request: Request) -> JSONResponse:
        principal, params = await authenticated(request, ("urn", "at"))
        urn = parse_urn(params)
        if not params.get("at"):
            raise RequestError("at: missing (epoch ms or ISO-8601 time)")
        try:
            at_ms = parse_time_ms(params["at"], "at")
        except InputError as exc:
            raise RequestError(str(exc)) from None
        note_result({"urn": urn, "at": at_ms})
        return await respond(lambda: as_of(urn, at_ms, principal), principal)

    @router.get("/api/v1/changes", summary="Search change events: actor, entity urn or prefix, category, operation")
    async def changes(request: Request) -> JSONResponse:
        principal, params = await authenticated(request, CHANGE_PARAMETERS)
        query = parse_change_query(params)
        query = dataclasses.replace(query, actor=person_pseudonym(settings, query.actor))
        note_result(dataclasses.asdict(query))

        def search() -> dict[str, Any]:
            found = search_changes(changes_location, query, scope_of(principal).arrow)
            note_result(result_count=found["total"])
            return found

        return await respond(search, principal)

    @router.get("/api/v1/activity", summary="Events per day and category, top actors and top entities")
    async def activity_overview(request: Request) -> JSONResponse:
        principal, params = await authenticated(request, ("since", "until", "limit"), aggregates)
        since, until = parse_window(params)
        limit = parse_limit(params, DEFAULT_LIMIT, MAX_LIMIT)
        note_result({"since": since, "until": until, "limit": limit})

        def overview() -> dict[str, Any]:
            found = activity.overview(since, until, limit)
            note_result(result_count=len(found["days"]))
            return found

        return await respond(overview, principal)

    @router.get("/api/v1/activity/actor", summary="One actor: activity per day, entities touched, anomalies")
    async def actor_activity(request: Request) -> JSONResponse:
        principal, params = await authenticated(request, ("actor", "since", "until", "limit"), aggregates)
        actor = (params.get("actor") or "").strip()
        if not actor:
            raise RequestError("actor: missing (an actor urn, e.g. urn:li:corpuser:alice)")
        actor = person_pseudonym(settings, actor)
        since, until = parse_window(params)
        limit = parse_limit(params, DEFAULT_LIMIT, MAX_LIMIT)
        anomalies = AnomalyQuery(since_ms=since, until_ms=until, actor=actor, limit=MAX_LIMIT)
        note_result({"actor": actor, "since": since, "until": until, "limit": limit})

        def actor_days() -> dict[str, Any]:
            found = activity.actor(actor, since, until, limit, anomalies)
            note_result(result_count=len(found["days"]))
            return found

        return await respond(actor_days, principal)

    return router


def mount_explorer(app: FastAPI, settings: Settings, verifier: TokenVerifier, aggregates: TokenVerifier | None = None) -> None:
    """Serve the explorer on `app`: the page at `/`, /static, the JSON endpoints and the security headers.

    Args:
        app: the API application.
        settings: the lakehouse settings.
        verifier: the token verifier the audit search uses.
        aggregates: the verifier of the per-actor activity endpoints (default: `verifier`).
    """
    app.include_router(explorer_router(settings, verifier, aggregates))
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIR), name="explorer-static")
    app.add_middleware(SecurityHeaders)


def security_headers(path: str, status: int) -> dict[str, str]:
    """The headers a response to `path` with `status` gets besides its own."""
    headers = {"X-Content-Type-Options": "nosniff"}
    if path == "/" or path.startswith((STATIC_PREFIX + "/", "/api/v1/")):
        headers.update({
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
        })  # fmt: skip
    if path.startswith(STATIC_PREFIX + "/"):
        if status == 200:
            headers["Cache-Control"] = STATIC_CACHE_CONTROL
    elif path == "/":
        headers["Cache-Control"] = PAGE_CACHE_CONTROL
    elif path.startswith(("/api/v1/", "/openapi/v1/")):
        headers["Cache-Control"] = "no-store"
    return headers


class SecurityHeaders:
    """ASGI middleware adding `security_headers` to every HTTP response (streamed bodies pass untouched)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in security_headers(scope["path"], message["status"]).items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
