"""Silver change events as DataHub Entity Change Event V1 JSON documents (the export's and the webhooks' shape).

A document holds entityUrn, entityType, category, operation, modifier (when set), parameters (when any;
`nullable` a JSON boolean, `decommissionTime` a number, every other value a string), version (always 0:
DataHub's classes require it) and auditStamp {actor, time}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conf.values import whole_number

_BOOLEAN_PARAMS = ("nullable",)
_NUMBER_PARAMS = ("decommissionTime",)


def typed_parameters(parameters: Mapping[str, str] | None) -> dict[str, Any]:
    """Give each stored parameter (all strings) its ECE V1 JSON type."""
    typed: dict[str, Any] = {}
    for name, value in sorted((parameters or {}).items()):
        if value is None:
            continue
        if name in _BOOLEAN_PARAMS:
            typed[name] = value.lower() == "true"
        elif name in _NUMBER_PARAMS and (number := whole_number(value.removeprefix("-"))) is not None:
            typed[name] = -number if value.startswith("-") else number
        else:
            typed[name] = value
    return typed


def ece_document(row: Mapping[str, Any]) -> dict[str, Any]:
    """One silver.entity_change_events row as an ECE V1 JSON object."""
    document: dict[str, Any] = {
        "entityUrn": row["entity_urn"],
        "entityType": row["entity_type"],
        "category": row["category"],
        "operation": row["operation"],
    }
    if row.get("modifier") is not None:
        document["modifier"] = row["modifier"]
    parameters = typed_parameters(row.get("parameters"))
    if parameters:
        document["parameters"] = parameters
    document["version"] = int(row.get("version") or 0)
    document["auditStamp"] = {"actor": row["actor"], "time": int(row["event_time"])}
    return document
