"""DataHub MetadataChangeEvent snapshots (`proposedSnapshot`) as one aspect proposal per aspect.

Pure Python: no Spark, no file system. DataHub's SQL sources and older emitters write an entity's aspects
inside one MCE, `{"proposedSnapshot": {"com.linkedin.pegasus2avro.metadata.snapshot.DatasetSnapshot":
{"urn": ..., "aspects": [{"com.linkedin.pegasus2avro.schema.SchemaMetadata": {...}}, ...]}},
"systemMetadata": {...}}` (or with `com.linkedin.*` class names, the REST form). Bronze lands each aspect as
the MCP record DataHub's server turns it into: an UPSERT of the aspect named by its class, with the MCE's
urn and systemMetadata. Union keys inside the aspect are written in the REST form, as DataHub's emitter
does before sending an MCE (`pre_json_transform`), so the same schema lands with the same text from an MCE
and from an MCP.
"""

from __future__ import annotations

import json
from typing import Any

from bronze.aspect_classes import ASPECT_NAMES_BY_CLASS

SNAPSHOT_KEY = "proposedSnapshot"
# The two spellings of DataHub's class names: the Avro form files and Kafka carry, and the REST form.
_AVRO_PREFIX = "com.linkedin.pegasus2avro."
_REST_PREFIX = "com.linkedin."


def is_snapshot_record(record: Any) -> bool:
    """Whether a parsed JSON record is an MCE (carries `proposedSnapshot`)."""
    return isinstance(record, dict) and SNAPSHOT_KEY in record


def class_short_name(class_name: str) -> str:
    """A class name without its namespace prefix (`schema.SchemaMetadata`), in either spelling."""
    for prefix in (_AVRO_PREFIX, _REST_PREFIX):
        if class_name.startswith(prefix):
            return class_name[len(prefix) :]
    return class_name


def aspect_name_of(class_name: str) -> str | None:
    """DataHub's aspect name for an aspect class (`...schema.SchemaMetadata` -> schemaMetadata), or None."""
    return ASPECT_NAMES_BY_CLASS.get(class_short_name(class_name))


def to_rest_form(value: Any) -> Any:
    """The value with Avro union keys in the REST form, as DataHub's emitter sends it (`pre_json_transform`).

    A one-key object whose key starts with `com.linkedin.pegasus2avro.` gets the `com.linkedin.` key; an
    aliased union (`fieldDiscriminator`) keeps only the field it names; null fields are left out.
    """
    if isinstance(value, list):
        return [to_rest_form(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, inner),) = value.items()
        if key.startswith(_AVRO_PREFIX):
            return {_REST_PREFIX + key[len(_AVRO_PREFIX) :]: to_rest_form(inner)}
    if "fieldDiscriminator" in value:
        field = value["fieldDiscriminator"]
        return {field: to_rest_form(value.get(field))}
    return {key: to_rest_form(inner) for key, inner in value.items() if inner is not None}


def snapshot_proposals(record: dict) -> list[tuple[str, str | None]]:
    """Split one MCE into one MCP line per aspect, and the parts that cannot land with their reasons.

    Args:
        record: a parsed MCE (`is_snapshot_record`).

    Returns:
        In the snapshot's order, (MCP record as one JSON line, None) per aspect that lands and (the part's
        JSON text, reason) per part that cannot: a snapshot that is not one `{<class>: {urn, aspects}}`
        object, an aspect that is not one `{<class>: {...}}` object, or an aspect class DataHub does not
        have (the reason names it). The MCP records carry `entityUrn`, `changeType` UPSERT, `aspectName`,
        the aspect as `value` text, and the MCE's `systemMetadata` (and `auditHeader`) when it has one.
    """
    snapshot = record.get(SNAPSHOT_KEY)
    if not (isinstance(snapshot, dict) and len(snapshot) == 1):
        reason = f"{SNAPSHOT_KEY}: {_shown(snapshot)} is not one {{<snapshot class>: {{urn, aspects}}}} object"
        return [(json.dumps(record), reason)]
    ((snapshot_class, body),) = snapshot.items()
    if not isinstance(body, dict) or not isinstance(body.get("urn"), str):
        return [(json.dumps(record), f"{SNAPSHOT_KEY}.urn: missing ({class_short_name(snapshot_class)})")]
    aspects = body.get("aspects")
    if not isinstance(aspects, list):
        reason = f"{SNAPSHOT_KEY}.aspects: {_shown(aspects)} is not a list ({class_short_name(snapshot_class)})"
        return [(json.dumps(record), reason)]
    envelope = {k: v for k, v in record.items() if k in ("systemMetadata", "auditHeader")}
    results: list[tuple[str, str | None]] = []
    for index, aspect in enumerate(aspects):
        where = f"{SNAPSHOT_KEY}.aspects[{index}]"
        if not (isinstance(aspect, dict) and len(aspect) == 1):
            results.append((json.dumps(aspect), f"{where}: {_shown(aspect)} is not one {{<aspect class>: {{...}}}} object"))
            continue
        ((aspect_class, value),) = aspect.items()
        name = aspect_name_of(aspect_class)
        if name is None:
            reason = f"{where}: {aspect_class!r} is not a DataHub aspect class ({body['urn']})"
            results.append((json.dumps(aspect), reason))
            continue
        if not isinstance(value, dict):
            results.append((json.dumps(aspect), f"{where}: {_shown(value)} is not a JSON object ({aspect_class})"))
            continue
        proposal = {
            "entityUrn": body["urn"],
            "changeType": "UPSERT",
            "aspectName": name,
            "aspect": {"value": json.dumps(to_rest_form(value)), "contentType": "application/json"},
            **envelope,
        }
        results.append((json.dumps(proposal), None))
    return results


def _shown(value: Any, limit: int = 80) -> str:
    """A value as a quarantine reason shows it: its JSON, cut to a readable length."""
    text = json.dumps(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def expand_snapshot_line(text: str) -> list[tuple[str, str | None]]:
    """The records one JSON line lands as: an MCE's aspects (`snapshot_proposals`), else the line itself.

    A line that is no MCE, or no JSON at all, is returned as it is: the record checks judge it.
    """
    if SNAPSHOT_KEY not in text:
        return [(text, None)]
    try:
        record = json.loads(text)
    except ValueError:
        return [(text, None)]
    return snapshot_proposals(record) if is_snapshot_record(record) else [(text, None)]
