"""Legal holds as rows: which are active, which hold a person (shared by the engine's and the server's readers)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class LegalHold:
    """One active hold: on an actor or an entity urn, with the reason it was placed."""

    hold_id: str
    subject_kind: str
    subject_urn: str
    reason: str
    recorded_at: datetime


def active_holds_of(rows: Iterable[Mapping[str, Any]]) -> list[LegalHold]:
    """The holds added and not removed among ops.legal_holds rows, oldest first."""
    rows = list(rows)
    removed = {r["hold_id"] for r in rows if r["action"] == "remove"}
    added = [r for r in rows if r["action"] == "add" and r["hold_id"] not in removed]
    return [
        LegalHold(r["hold_id"], r["subject_kind"], r["subject_urn"], r["reason"], r["recorded_at"])
        for r in sorted(added, key=lambda r: (r["recorded_at"], r["hold_id"]))
    ]


def holds_on_actor(holds: Iterable[LegalHold], *actor_urns: str) -> list[LegalHold]:
    """The holds on any of these urns of one actor (the urn and its pseudonym)."""
    return [hold for hold in holds if hold.subject_kind == "actor" and hold.subject_urn in actor_urns]
