"""Malformed copies of good lines, in the kinds the lakehouse must reject, and where they go in a file."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from datetime import datetime, timezone

from conf.errors import InputError
from datagen.manifest import MalformedLine

# Malformed kinds: (kind, broken field, reason). Entity and action request lines use the MCL kinds.
_SNAPSHOT_MALFORMED_KINDS = (
    ("malformed_json", "json", "malformed_json"),
    ("missing_entity_urn", "entityUrn", "missing"),
    ("missing_aspect_name", "aspectName", "missing"),
    ("missing_change_type", "changeType", "missing"),
    ("bad_urn", "entityUrn", "bad_urn"),
    ("aspect_not_json", "aspect.value", "not_json"),
)
# An MCL record's time is created.time, an MCP record's systemMetadata.lastObserved.
MCL_MALFORMED_KINDS = (*_SNAPSHOT_MALFORMED_KINDS, ("iso_time", "created.time", "not_epoch_ms"))
MCP_MALFORMED_KINDS = (*_SNAPSHOT_MALFORMED_KINDS, ("iso_time", "systemMetadata.lastObserved", "not_epoch_ms"))
USAGE_MALFORMED_KINDS = (
    ("malformed_json", "json", "malformed_json"),
    ("missing_actor", "actorUrn", "missing"),
    ("missing_type", "type", "missing"),
    ("missing_timestamp", "timestamp", "missing"),
    ("unknown_type", "type", "unknown_type"),
    ("iso_time", "timestamp", "not_epoch_ms"),
)

# A "missing" kind is its line without that top-level field.
_MISSING_FIELDS = {kind: fld for kind, fld, reason in (*_SNAPSHOT_MALFORMED_KINDS, *USAGE_MALFORMED_KINDS) if reason == "missing"}
_UNKNOWN_USAGE_TYPES = ("SearchAcrossEntitiesEvent", "PageViewEvent", "ExportCsvEvent")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _corrupt(line: str, kind: str, rng: random.Random) -> str:
    """Return a broken copy of a good JSON line."""
    if kind == "malformed_json":
        return line[: max(1, int(len(line) * (0.2 + 0.6 * rng.random())))]
    doc = json.loads(line)
    if kind in _MISSING_FIELDS:
        doc.pop(_MISSING_FIELDS[kind])
    elif kind == "bad_urn":
        urn = doc["entityUrn"]
        doc["entityUrn"] = rng.choice((urn.replace("urn:li:", "", 1), "urn:li:" + doc["entityType"],
                                       urn.replace("urn:li:", "urn::", 1), "urn:li:"))
    elif kind == "aspect_not_json":
        value = doc["aspect"]["value"]
        doc["aspect"]["value"] = rng.choice((value[: len(value) // 2], "N/A", "{'removed': False}"))
    elif kind == "iso_time":
        if "created" in doc:
            doc["created"]["time"] = _iso(doc["created"]["time"])
        else:
            doc["systemMetadata"]["lastObserved"] = _iso(doc["systemMetadata"]["lastObserved"])
    elif kind == "unknown_type":
        doc["type"] = rng.choice(_UNKNOWN_USAGE_TYPES)
    elif kind == "iso_time_usage":
        doc["timestamp"] = _iso(doc["timestamp"])
    else:
        raise InputError(f"kind: {kind!r} is not a malformed line kind")
    return json.dumps(doc)


def _malformed_count(share: float, lines: int) -> int:
    if share <= 0 or lines == 0:
        return 0
    return max(1, round(share * lines))


def with_malformed(lines: list[str], share: float, kinds: Sequence[tuple[str, str, str]], rng: random.Random,
                    needs_aspect: bool) -> tuple[list[str], list[MalformedLine]]:
    """Insert broken copies of some lines at random places; return all lines and the broken ones' entries."""
    count = _malformed_count(share, len(lines))
    if count == 0:
        return lines, []
    offset = int(len(kinds) * rng.random())
    inserts: list[tuple[int, int, str, str, str]] = []
    for k in range(count):
        kind, fld, reason = kinds[(offset + k) % len(kinds)]
        source = int(len(lines) * rng.random())
        if needs_aspect and kind in ("aspect_not_json",):
            for step in range(len(lines)):
                candidate = lines[(source + step) % len(lines)]
                if '"aspect": {"value": ' in candidate:
                    source = (source + step) % len(lines)
                    break
            else:
                kind, fld, reason = kinds[1]
        corrupt_kind = "iso_time_usage" if (kind == "iso_time" and fld == "timestamp") else kind
        broken = _corrupt(lines[source], corrupt_kind, rng)
        inserts.append((int((len(lines) + 1) * rng.random()), k, broken, fld, reason))
    inserts.sort()
    out: list[str] = []
    entries: list[MalformedLine] = []
    position = 0
    for at, _, broken, fld, reason in inserts:
        out.extend(lines[position:at])
        position = at
        out.append(broken)
        entries.append(MalformedLine(len(out), fld, reason))
    out.extend(lines[position:])
    return out, entries
