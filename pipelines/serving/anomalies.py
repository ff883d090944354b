"""GET /api/v1/anomalies: the actor hours and days the model flagged, read from gold.actor_anomalies."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from conf.errors import InputError, RequestError
from conf.settings import Settings
from conf.tables import ACTOR_ANOMALIES, table_location
from pipelines.privacy.display import person_pseudonym, shown_to
from pipelines.runtime.storage import delta_storage_options, table_exists
from gold.serving_contract import BUCKET_MS
from conf.values import parse_time_ms, parse_whole_number
from pipelines.serving.access_log import note_result
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.tokens import TokenVerifier

ANOMALIES_PATH = "/api/v1/anomalies"
TABLE = ACTOR_ANOMALIES
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_PARAMETERS = ("since", "until", "actor", "granularity", "kind", "limit")


def parse_window(params: Mapping[str, str]) -> tuple[int | None, int | None]:
    """Return the optional (since, until) window in epoch ms from the `since` and `until` parameters.

    Raises:
        RequestError: naming the parameter, for a value that is not a time or a window that is empty.
    """
    try:
        since = parse_time_ms(params["since"], "since") if params.get("since") else None
        until = parse_time_ms(params["until"], "until") if params.get("until") else None
    except InputError as exc:
        raise RequestError(str(exc)) from None
    if since is not None and until is not None and since >= until:
        raise RequestError(f"since: {params['since']!r} is not before until ({params['until']!r})")
    return since, until


def parse_limit(params: Mapping[str, str], default: int, maximum: int) -> int:
    """Return the `limit` parameter, `default` when absent.

    Raises:
        RequestError: for a value that is not a whole number from 1 to `maximum`.
    """
    try:
        return parse_whole_number(params.get("limit") or str(default), "limit", 1, maximum)
    except InputError as exc:
        raise RequestError(str(exc)) from None


@dataclass(frozen=True)
class AnomalyQuery:
    """A validated anomalies request: a window on window_start, optional filters and a row limit."""

    since_ms: int | None = None
    until_ms: int | None = None
    actor: str | None = None
    granularity: str | None = None
    kind: str | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> AnomalyQuery:
        """Build a query from URL parameters.

        Raises:
            RequestError: naming the parameter and the value, for an unknown parameter or a bad value.
        """
        unknown = sorted(set(params) - set(_PARAMETERS))
        if unknown:
            raise RequestError(f"{unknown[0]}: unknown parameter (known: {', '.join(_PARAMETERS)})")
        since, until = parse_window(params)
        granularity = params.get("granularity") or None
        if granularity is not None and granularity not in BUCKET_MS:
            raise RequestError(f"granularity: {granularity!r} is not one of {', '.join(BUCKET_MS)}")
        return cls(since, until, params.get("actor") or None, granularity, params.get("kind") or None,
                   parse_limit(params, DEFAULT_LIMIT, MAX_LIMIT))


def read_anomalies(location: Path, query: AnomalyQuery) -> list[dict[str, Any]]:
    """Return the flagged windows matching `query` from the table's latest version, highest score first.

    Ties are broken by actor and window start, so a page is stable. An absent table holds nothing yet.
    """
    if not table_exists(location):
        return []
    dataset = DeltaTable(str(location), storage_options=delta_storage_options(location)).to_pyarrow_dataset()
    conditions = [
        (ds.field("window_start") >= query.since_ms) if query.since_ms is not None else None,
        (ds.field("window_start") < query.until_ms) if query.until_ms is not None else None,
        (ds.field("actor") == query.actor) if query.actor else None,
        (ds.field("granularity") == query.granularity) if query.granularity else None,
        (ds.field("kind") == query.kind) if query.kind else None,
    ]
    condition = None
    for part in (c for c in conditions if c is not None):
        condition = part if condition is None else condition & part
    table = dataset.to_table(filter=condition)
    order = pc.sort_indices(table, sort_keys=[("score", "descending"), ("actor", "ascending"), ("window_start", "ascending")])
    rows = table.take(order[: query.limit]).to_pylist()
    return [_as_json(row) for row in rows]


def _as_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "actor": row["actor"],
        "granularity": row["granularity"],
        "windowStart": row["window_start"],
        "windowEnd": row["window_end"],
        "score": row["score"],
        "kind": row["kind"],
        "peerScored": row["peer_scored"],
        "topFeatures": json.loads(row["top_features"]) if row["top_features"] else [],
        "modelName": row["model_name"],
        "modelVersion": row["model_version"],
        "scoredAt": row["scored_at"].isoformat() if row["scored_at"] is not None else None,
    }


def anomalies_router(settings: Settings, verifier: TokenVerifier) -> APIRouter:
    """Return the router of the anomalies endpoint, authenticated like the audit search (audit-read)."""
    router = APIRouter()
    location = table_location(settings, TABLE)

    @router.get(
        ANOMALIES_PATH,
        summary="List unusual actor activity",
        description="Actor hours and days the registered model flagged (gold.actor_anomalies), highest score "
        f"first. Parameters: since/until (epoch ms or ISO-8601, on the window start), actor, granularity "
        f"(hour or day), kind, limit (1..{MAX_LIMIT}, default {DEFAULT_LIMIT}).",
    )
    async def list_anomalies(request: Request) -> JSONResponse:
        principal = await verifier.authenticate_request(request.headers.get("authorization"), AUDIT_READ)
        query = AnomalyQuery.parse(dict(request.query_params))
        query = replace(query, actor=person_pseudonym(settings, query.actor))
        note_result(asdict(query))
        rows = await run_in_threadpool(read_anomalies, location, query)
        note_result(result_count=len(rows))
        shown = await run_in_threadpool(shown_to, settings, {"count": len(rows), "anomalies": rows}, principal)
        return JSONResponse(shown)

    return router
