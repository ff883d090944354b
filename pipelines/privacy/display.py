"""Pseudonyms on the way in and identities on the way out of a search, without an engine.

A search that names a person (`actorUrns: ["urn:li:corpuser:jdoe"]`) is turned into one by pseudonym;
the events it returns show each person, source IP and user agent as who they are to a caller allowed
to see identities, or as an erased subject once the person was erased (the pseudonym stays beside it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from bronze.pseudonym_rules import PERSON_PREFIX, PSEUDONYM_PREFIX, pseudonym_of
from conf.settings import Settings
from conf.tables import table_location
from pipelines.privacy.identities import IDENTITIES_TABLE, resolve_rows
from pipelines.privacy.keystore import key_store_for

# Fields of a search's events that hold a pseudonym, and the field the identity is shown in.
_EVENT_FIELDS = ("actorUrn", "sourceIP", "userAgent")
_BODY_PERSON_FIELDS = ("actorUrns",)


def pseudonymous_body(settings: Settings, body: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The search body with every person urn it filters on replaced by its pseudonym (as stored)."""
    if body is None or not settings.privacy.pseudonymise:
        return body
    secret = key_store_for(settings).pseudonym_secret()
    changed = dict(body)
    for field in _BODY_PERSON_FIELDS:
        values = changed.get(field)
        if isinstance(values, list):
            changed[field] = [pseudonym_of(v, secret) if isinstance(v, str) and v.startswith(PERSON_PREFIX) else v for v in values]
    return changed


def with_identities(settings: Settings, result: dict[str, Any]) -> dict[str, Any]:
    """A search response whose events show identities (`actorUrn` etc.), each pseudonym kept as `<field>Pseudonym`."""
    events = result.get("usageEvents") or []
    if not settings.privacy.pseudonymise or not events:
        return result
    wanted = {e[f] for e in events for f in _EVENT_FIELDS if isinstance(e.get(f), str)}
    resolved = read_identities(settings, wanted)
    shown = []
    for event in events:
        event = dict(event)
        for field in _EVENT_FIELDS:
            value = event.get(field)
            if value in resolved:
                event[f"{field}Pseudonym"] = value
                event[field] = resolved[value]
        shown.append(event)
    return {**result, "usageEvents": shown}


def shown_to(settings: Settings, result: dict[str, Any], principal: Any) -> dict[str, Any]:
    """A search response as a principal may see it: identities for one that sees sensitive fields, else pseudonyms."""
    return with_identities(settings, result) if principal.sees_sensitive else result


def read_identities(settings: Settings, pseudonyms: set[str]) -> dict[str, str]:
    """pseudonym -> identity (or the erased subject) read from ops.identities with delta-rs."""
    wanted = sorted(p for p in pseudonyms if p.startswith((PSEUDONYM_PREFIX, "ip-", "ua-")))
    if not wanted:
        return {}
    table = DeltaTable(str(table_location(settings, IDENTITIES_TABLE))).to_pyarrow_table(
        columns=["pseudonym", "owner", "ciphertext"]
    )
    rows = table.filter(pc.is_in(table.column("pseudonym"), value_set=pa.array(wanted))).to_pylist()
    return resolve_rows(rows, key_store_for(settings))
