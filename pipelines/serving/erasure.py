"""Erasure of one person, without an engine: `lakehouse erase` and the admin's POST /api/v1/privacy/erasures.

With privacy.pseudonymise on, the tables hold the person only as a pseudonym; the identity is in
ops.identities, encrypted under the person's key in the key store. Destroying that key makes every
copy of the identity unreadable at once: every table version, every backup of the tables, the BI
replica's next sync. Counts and events stay (under the pseudonym) and no row changes, so `verify`
passes. The erasure is recorded first (who asked, when, why, the pseudonym; never the identity) as its
own batch of ops.erasures, linked in the audit chain, and only then is the key destroyed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from bronze.pseudonym_rules import PERSON_PREFIX, pseudonym_of
from conf.errors import ConfigError, InputError, RequestError
from conf.settings import Settings
from conf.tables import table_location, table_spec
from gold.scopes import ADMIN
from pipelines.audit_trail.arrow_chain import ArrowChainLinker
from pipelines.privacy.holds import active_holds_of, holds_on_actor
from pipelines.privacy.identities import IDENTITIES_TABLE
from pipelines.privacy.keystore import key_store_for
from pipelines.runtime.storage import delta_storage_options, table_exists

ERASURES_TABLE = "ops.erasures"
HOLDS_TABLE = "ops.legal_holds"
ERASURES_PATH = "/api/v1/privacy/erasures"
_ARROW_TYPES = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC")}


@dataclass(frozen=True)
class Erasure:
    """One erasure done: its id, the person's pseudonym and how many identity rows its key encrypted."""

    erasure_id: str
    pseudonym: str
    identities: int


def erase_person(settings: Settings, actor_urn: str, reason: str, requested_by: str) -> Erasure:
    """Erase one person: refuse a held or unknown one, record and link the erasure, then destroy the key.

    Args:
        settings: the lakehouse settings (privacy.key_file).
        actor_urn: the person's urn as they know it (urn:li:corpuser:...).
        reason: why (the request's reference); recorded.
        requested_by: who asked; recorded.

    Raises:
        InputError: naming the field for a value that is not a person urn, an empty reason, a person no
            identity row names (unknown, or erased already), or a person under a legal hold.
        ConfigError: naming privacy.key_file when the key store is missing (nothing is changed).
    """
    if not isinstance(actor_urn, str) or not actor_urn.startswith(PERSON_PREFIX) or actor_urn == PERSON_PREFIX:
        raise InputError(f"--actor: {actor_urn!r} is not a person urn ({PERSON_PREFIX}<id>)")
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(f"--reason: {reason!r} must say why (the erasure request's reference)")
    keys = key_store_for(settings)
    pseudonym = pseudonym_of(actor_urn, keys.pseudonym_secret())
    held = holds_on_actor(active_holds_of(_rows(settings, HOLDS_TABLE)), actor_urn, pseudonym)
    if held:
        listed = ", ".join(f"{h.hold_id} ({h.reason})" for h in held)
        raise InputError(f"--actor: {actor_urn!r} is under legal hold {listed}; remove the hold first (`lakehouse hold remove`)")
    owned = sum(1 for row in _rows(settings, IDENTITIES_TABLE, ["owner"]) if row["owner"] == pseudonym)
    if owned == 0 or not keys.has_person(pseudonym):
        state = "erased already" if owned else "no identity of that person was landed"
        raise InputError(f"--actor: {actor_urn!r} is unknown ({state}); nothing was changed")
    erasure_id = f"erasure-{uuid.uuid4().hex[:12]}"
    row = {"erasure_id": erasure_id, "pseudonym": pseudonym, "reason": reason.strip(), "requested_by": requested_by,
           "erased_at_ms": int(time.time() * 1000), "identities": owned, "batch_id": erasure_id}  # fmt: skip
    table, version = _append(settings, ERASURES_TABLE, row)
    ArrowChainLinker(settings).link(ERASURES_TABLE, erasure_id, table, version)
    keys.destroy(pseudonym)
    return Erasure(erasure_id, pseudonym, owned)


def _rows(settings: Settings, table_key: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """A small ops table's rows read with delta-rs (none when it was never written)."""
    from deltalake import DeltaTable

    location = str(table_location(settings, table_key))
    if not table_exists(location):
        return []
    return DeltaTable(location, storage_options=delta_storage_options(location)).to_pyarrow_table(columns=columns).to_pylist()


def _append(settings: Settings, table_key: str, row: dict[str, Any]) -> tuple[pa.Table, int]:
    """Append one row with delta-rs; return it as Arrow and the version written."""
    from deltalake import DeltaTable, write_deltalake

    spec = table_spec(table_key)
    schema = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in spec.column_types])
    table = pa.Table.from_pylist([row], schema=schema)
    location = str(table_location(settings, table_key))
    options = delta_storage_options(location)
    if table_exists(location):
        written = DeltaTable(location, storage_options=options)
        write_deltalake(written, table, mode="append")
    else:
        write_deltalake(location, table, mode="append", storage_options=options, configuration=dict(spec.properties))
        written = DeltaTable(location, storage_options=options)
    return table, int(DeltaTable(location, storage_options=options).version())


def erasure_router(settings: Settings, authenticator: Any) -> APIRouter:
    """POST /api/v1/privacy/erasures {"actor": URN, "reason": TEXT} (admin): erase a person, as `lakehouse erase`."""
    router = APIRouter()

    @router.post(ERASURES_PATH, summary="Erase a person: their key destroyed, the erasure chained (admin)")
    async def erase(request: Request) -> JSONResponse:
        principal = await authenticator.authenticate_request(request.headers.get("authorization"), ADMIN)
        try:
            body = await request.json()
        except ValueError:
            raise RequestError("body: not a JSON object with actor and reason") from None
        if not isinstance(body, dict):
            raise RequestError("body: not a JSON object with actor and reason")
        try:
            erasure = await run_in_threadpool(erase_person, settings, body.get("actor"), body.get("reason"), principal.name)
        except InputError as exc:
            raise RequestError(str(exc).replace("--actor", "actor").replace("--reason", "reason")) from None
        except ConfigError as exc:
            # The key store is missing or unreadable: nothing was changed; the operator restores it.
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse({"erasureId": erasure.erasure_id, "pseudonym": erasure.pseudonym, "identities": erasure.identities})

    return router

