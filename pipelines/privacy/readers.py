"""The readers in the access log: with privacy.pseudonymise on, each record's actor and client address are
stored as pseudonyms and their identities recorded encrypted, as landing does for the audited events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bronze.pseudonym_rules import PERSON_PREFIX, is_pseudonym, pseudonym_of
from conf.settings import Settings
from pipelines.privacy.identities import record_identities_without_engine
from pipelines.privacy.keystore import key_store_for


def pseudonymous_access_rows(settings: Settings, rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Access log rows with the reader's person urn and client address pseudonymous (rows as given when off).

    A client address is owned by the reader's person (erased with them); a request without a person
    (an unknown token) keeps its address, which names no one the lakehouse knows.
    """
    if not settings.privacy.pseudonymise or not rows:
        return rows
    keys = key_store_for(settings, create=True)
    secret = keys.pseudonym_secret()
    identities, shown = [], []
    for row in rows:
        actor, client = row.get("actor"), row.get("client_address")
        if not (isinstance(actor, str) and actor.startswith(PERSON_PREFIX) and not is_pseudonym(actor)):
            shown.append(row)
            continue
        identities.append(("person", actor, actor))
        changed = {**row, "actor": pseudonym_of(actor, secret)}
        if client:
            identities.append(("ip", client, actor))
            changed["client_address"] = pseudonym_of(client, secret, "ip-")
        shown.append(changed)
    record_identities_without_engine(settings, keys, identities)
    return shown
