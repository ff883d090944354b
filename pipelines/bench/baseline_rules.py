"""The diff rules of the one-process baseline (`pipelines.bench.baseline`): `silver.events` written as Python.

Each rule reads one pair of parsed aspect versions and returns its changes as (entity urn, category,
operation, modifier, parameters); the JSON helpers read values as the engine does with the aspects'
explicit schemas. Over 400 lines on purpose: one rule per ECE category, kept together as `silver.events`
keeps them, so the two are compared rule by rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# The type part of an urn (`dataset` of urn:li:dataset:...).
URN_TYPE = re.compile(r"^urn:li:([^:]+):")
ACTION_REQUEST = "actionRequest"
SCHEMA_ASPECTS = ("schemaMetadata", "editableSchemaMetadata")
DESCRIPTION_FIELDS = {
    **dict.fromkeys(
        (
            "datasetProperties", "editableDatasetProperties", "chartInfo", "editableChartProperties",
            "dashboardInfo", "editableDashboardProperties", "dataJobInfo", "editableDataJobProperties",
            "dataFlowInfo", "editableDataFlowProperties", "containerProperties", "editableContainerProperties",
            "domainProperties", "tagProperties",
        ),
        "description",
    ),
    "glossaryTermInfo": "definition",
    "glossaryNodeInfo": "definition",
}

@dataclass
class Pair:
    """An accepted version and its predecessor (parsed aspects; None: empty or deleted)."""

    entity_urn: str
    entity_type: str | None
    aspect_name: str
    order_key: str
    is_delete: bool
    prev_change_type: str | None
    prev: dict | None
    new: dict | None


# ---- JSON values as the engine reads them with the aspects' explicit schemas -------------------------


def json_object(value: Any) -> dict:
    """`value` when it is a JSON object, else an empty one (how the engine reads a mismatched type)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list | None:
    return value if isinstance(value, list) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _blank_to_null(text: str | None) -> str | None:
    # The engine's trim removes spaces only.
    return text if text is not None and text.strip(" ") != "" else None


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _double_literal(value: float) -> str:
    # The engine writes 1.5e-7 where Python writes 1.5e-07.
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(float(value)))


def _property_value_tokens(values: Any) -> list[str]:
    tokens = []
    for value in _list(values) or []:
        value = json_object(value)
        if _text(value.get("string")) is not None:
            tokens.append(_json_string(value["string"]))
        elif isinstance(value.get("double"), (int, float)) and not isinstance(value.get("double"), bool):
            tokens.append(_double_literal(value["double"]))
        else:
            tokens.append("null")
    return tokens


def _property_values_json(values: Any) -> str:
    return "[" + ",".join(_property_value_tokens(values)) + "]"


def _keyed(items: Any, key: Callable[[dict], str | None]) -> dict[str, dict]:
    """The items of a set by key: the first item of each key; items without a key are ignored."""
    keyed: dict[str, dict] = {}
    for item in _list(items) or []:
        item = json_object(item)
        item_key = key(item)
        if item_key is not None and item_key not in keyed:
            keyed[item_key] = item
    return keyed


def _schema_fields(aspect: dict | None) -> list | None:
    if aspect is None:
        return None
    fields = _list(aspect.get("fields"))
    return fields if fields is not None else _list(aspect.get("editableSchemaFieldInfo"))


def _field_urn(dataset_urn: str, field_path: str) -> str:
    return f"urn:li:schemaField:({dataset_urn},{field_path})"


def is_key_aspect(aspect_name: str, entity_type: str | None) -> bool:
    """The entity's key aspect (`datasetKey` of a dataset)."""
    return entity_type is not None and aspect_name.endswith("Key") and aspect_name.lower() == entity_type.lower() + "key"


# ---- the diff rules: each returns (entity urn, category, operation, modifier, parameters) ------------

Change = tuple[str, str, str, str | None, dict[str, str | None]]


def _set_changes(pair: Pair, items_field: str, key: Callable[[dict], str | None]) -> tuple[list[dict], list[dict]]:
    """(removed, added) items of a set aspect."""
    prev = _keyed((pair.prev or {}).get(items_field), key)
    new = _keyed((pair.new or {}).get(items_field), key)
    return [i for k, i in prev.items() if k not in new], [i for k, i in new.items() if k not in prev]


def _urn_set(items_field: str, urn_field: str, category: str, parameter: str):
    def changes(pair: Pair) -> Iterable[Change]:
        removed, added = _set_changes(pair, items_field, lambda i: _text(i.get(urn_field)))
        for op, items in (("REMOVE", removed), ("ADD", added)):
            for item in items:
                yield pair.entity_urn, category, op, item[urn_field], {parameter: item[urn_field]}

    return changes


def domain_changes(pair: Pair) -> Iterable[Change]:
    prev = {d: d for d in _list((pair.prev or {}).get("domains")) or [] if _text(d) is not None}
    new = {d: d for d in _list((pair.new or {}).get("domains")) or [] if _text(d) is not None}
    for op, names in (("REMOVE", [d for d in prev if d not in new]), ("ADD", [d for d in new if d not in prev])):
        for domain in names:
            yield pair.entity_urn, "DOMAIN", op, domain, {"domainUrn": domain}


def owner_changes(category: str):
    def owner_type(owner: dict) -> str:
        return _text(owner.get("type")) or "CUSTOM"

    def key(owner: dict) -> str | None:
        return f"{owner['owner']}\u0001{owner_type(owner)}" if _text(owner.get("owner")) is not None else None

    def changes(pair: Pair) -> Iterable[Change]:
        removed, added = _set_changes(pair, "owners", key)
        for op, owners in (("REMOVE", removed), ("ADD", added)):
            for owner in owners:
                params = {"ownerUrn": owner["owner"], "ownerType": owner_type(owner), "ownerTypeUrn": _text(owner.get("typeUrn"))}
                yield pair.entity_urn, category, op, owner["owner"], params

    return changes


def structured_property_changes(pair: Pair) -> Iterable[Change]:
    def key(p: dict) -> str | None:
        return _text(p.get("propertyUrn"))

    prev = _keyed((pair.prev or {}).get("properties"), key)
    new = _keyed((pair.new or {}).get("properties"), key)
    for urn in prev:
        if urn not in new:
            yield pair.entity_urn, "STRUCTURED_PROPERTY", "REMOVE", urn, {}
    for urn, assignment in new.items():
        values = {"propertyUrn": urn, "propertyValues": _property_values_json(assignment.get("values"))}
        if urn not in prev:
            yield pair.entity_urn, "STRUCTURED_PROPERTY", "ADD", urn, values
        elif set(_property_value_tokens(prev[urn].get("values"))) != set(_property_value_tokens(assignment.get("values"))):
            yield pair.entity_urn, "STRUCTURED_PROPERTY", "MODIFY", urn, values


def deprecation_changes(pair: Pair) -> Iterable[Change]:
    prev, new = pair.prev or {}, pair.new or {}
    now = new.get("deprecated") is True
    if (prev.get("deprecated") is True) != now:
        status = "DEPRECATED" if now else "ACTIVE"
        decommission = new.get("decommissionTime")
        params = {
            "status": status,
            "note": _blank_to_null(_text(new.get("note"))),
            "decommissionTime": str(decommission) if isinstance(decommission, int) and not isinstance(decommission, bool) else None,
        }
        yield pair.entity_urn, "DEPRECATION", "MODIFY", status, params


def _matched(prev: dict[str, Any], new: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(old, new) of every key on either side (None where a side lacks it)."""
    for key in {**prev, **new}:
        yield prev.get(key), new.get(key)


def technical_schema_changes(pair: Pair) -> Iterable[Change]:
    def by_path(aspect: dict | None) -> dict[str, dict]:
        return _keyed(_schema_fields(aspect), lambda f: _text(f.get("fieldPath")))

    for old, new in _matched(by_path(pair.prev), by_path(pair.new)):
        if old is None:
            op = "ADD"
        elif new is None:
            op = "REMOVE"
        elif _text(old.get("nativeDataType")) != _text(new.get("nativeDataType")):
            op = "MODIFY"
        else:
            continue
        field_ = new if op == "ADD" else old
        urn = _field_urn(pair.entity_urn, field_["fieldPath"])
        params = {
            "fieldUrn": urn,
            "fieldPath": field_["fieldPath"],
            "nullable": "true" if field_.get("nullable") is True else "false",
            "modificationCategory": "TYPE_CHANGE" if op == "MODIFY" else None,
        }
        yield pair.entity_urn, "TECHNICAL_SCHEMA", op, urn, params


def _field_tags_terms(aspect: dict | None) -> dict[str, tuple[str, str, str]]:
    """(kind, fieldPath, urn) of every tag, then every term, of an aspect's fields, by key."""
    fields = [json_object(f) for f in _schema_fields(aspect) or []]
    items = [("TAG", f, json_object(t).get("tag")) for f in fields for t in _list(json_object(f.get("globalTags")).get("tags")) or []]
    items += [("GLOSSARY_TERM", f, json_object(t).get("urn")) for f in fields for t in _list(json_object(f.get("glossaryTerms")).get("terms")) or []]
    keyed: dict[str, tuple[str, str, str]] = {}
    for kind, f, urn in items:
        path = _text(f.get("fieldPath"))
        if path is not None and _text(urn) is not None:
            keyed.setdefault(f"{kind}\u0001{path}\u0001{urn}", (kind, path, urn))
    return keyed


def field_tag_term_changes(pair: Pair) -> Iterable[Change]:
    prev, new = _field_tags_terms(pair.prev), _field_tags_terms(pair.new)
    for op, items in (("REMOVE", [i for k, i in prev.items() if k not in new]), ("ADD", [i for k, i in new.items() if k not in prev])):
        for kind, path, urn in items:
            params = {
                "fieldPath": path,
                "parentUrn": pair.entity_urn,
                "tagUrn": urn if kind == "TAG" else None,
                "termUrn": urn if kind == "GLOSSARY_TERM" else None,
            }
            yield _field_urn(pair.entity_urn, path), kind, op, urn, params


def _description_op(old: str | None, new: str | None) -> str | None:
    if old is None and new is not None:
        return "ADD"
    if old is not None and new is None:
        return "REMOVE"
    return "MODIFY" if old != new else None


def entity_documentation_changes(pair: Pair) -> Iterable[Change]:
    name = DESCRIPTION_FIELDS[pair.aspect_name]
    old = _blank_to_null(_text((pair.prev or {}).get(name)))
    new = _blank_to_null(_text((pair.new or {}).get(name)))
    op = _description_op(old, new)
    if op:
        yield pair.entity_urn, "DOCUMENTATION", op, None, {"description": new if new is not None else old}


def field_documentation_changes(pair: Pair) -> Iterable[Change]:
    def texts(aspect: dict | None) -> dict[str, str]:
        described: dict[str, str] = {}
        for f in _schema_fields(aspect) or []:
            f = json_object(f)
            path, text = _text(f.get("fieldPath")), _blank_to_null(_text(f.get("description")))
            if path is not None and text is not None:
                described.setdefault(path, text)
        return described

    prev, new = texts(pair.prev), texts(pair.new)
    for path in {**prev, **new}:
        old_text, new_text = prev.get(path), new.get(path)
        op = _description_op(old_text, new_text)
        if op:
            params = {"description": new_text if new_text is not None else old_text, "fieldPath": path, "parentUrn": pair.entity_urn}
            yield _field_urn(pair.entity_urn, path), "DOCUMENTATION", op, None, params


def key_lifecycle_changes(pair: Pair) -> Iterable[Change]:
    if not pair.is_delete and pair.prev is None and pair.entity_type != ACTION_REQUEST:
        yield pair.entity_urn, "LIFECYCLE", "CREATE", None, {}
    elif pair.is_delete and (pair.prev_change_type or "").upper() != "DELETE":
        yield pair.entity_urn, "LIFECYCLE", "HARD_DELETE", None, {}


def status_changes(pair: Pair) -> Iterable[Change]:
    was, now = (pair.prev or {}).get("removed") is True, (pair.new or {}).get("removed") is True
    if was != now:
        yield pair.entity_urn, "LIFECYCLE", "SOFT_DELETE" if now else "REINSTATE", None, {}


def _first(values: Any) -> Any:
    values = _list(values)
    return values[0] if values else None


def _coalesce(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _owner_json(owner: dict) -> str:
    shown = {"type": _text(owner.get("type")) or "CUSTOM", "typeUrn": _text(owner.get("typeUrn")), "ownerUrn": _text(owner.get("owner"))}
    return json.dumps({k: v for k, v in shown.items() if v is not None}, ensure_ascii=False, separators=(",", ":"))


def _assignment_json(assignment: dict) -> str | None:
    urn = _text(assignment.get("propertyUrn"))
    if urn is None:
        return None
    return '{"propertyUrn":' + _json_string(urn) + ',"values":' + _property_values_json(assignment.get("values")) + "}"


def _json_array(items: Any, to_token: Callable[[Any], str | None]) -> str | None:
    items = _list(items)
    if items is None:
        return None
    return "[" + ",".join(t for t in (to_token(i) for i in items) if t is not None) + "]"


def action_request_changes(pair: Pair) -> Iterable[Change]:
    new = pair.new or {}
    request_type = _text(new.get("type"))
    if pair.prev_change_type is not None or pair.is_delete or request_type is None:
        return
    p = json_object(new.get("params"))

    def proposal(name: str) -> dict:
        return json_object(p.get(name))

    resource = _text(new.get("resource"))
    resource_match = URN_TYPE.match(resource) if resource is not None else None
    resource_type = _coalesce(
        _text(new.get("resourceType")),
        resource_match.group(1) if resource_match else None,
        "glossaryTerm" if request_type == "CREATE_GLOSSARY_TERM" else None,
    )

    def only(*types: str) -> Callable[[Any], Any]:
        return lambda value: value if request_type in types else None

    on_resource = only(
        "DOMAIN_ASSOCIATION", "OWNER_ASSOCIATION", "TAG_ASSOCIATION", "TERM_ASSOCIATION", "UPDATE_DESCRIPTION",
        "STRUCTURED_PROPERTY_ASSOCIATION",
    )
    tag = _coalesce(_text(proposal("tagProposal").get("tag")), _text(_first(proposal("tagProposal").get("tags"))), _text(p.get("tag")))
    term = _coalesce(
        _text(proposal("glossaryTermProposal").get("glossaryTerm")),
        _text(_first(proposal("glossaryTermProposal").get("glossaryTerms"))),
        _text(p.get("glossaryTerm")),
    )
    domains = _coalesce(_list(proposal("domainProposal").get("domains")), _list(p.get("domains")))
    owners = _coalesce(_list(proposal("ownerProposal").get("owners")), _list(p.get("owners")))
    assignments = _coalesce(
        _list(proposal("structuredPropertyProposal").get("structuredPropertyValues")), _list(p.get("structuredPropertyValues"))
    )
    create_term = proposal("createGlossaryTermProposal")
    params = {
        "actionRequestType": request_type,
        "resourceUrn": on_resource(resource),
        "resourceType": resource_type,
        "domains": only("DOMAIN_ASSOCIATION")(_json_array(domains, lambda d: _json_string(d) if _text(d) is not None else None)),
        "owners": only("OWNER_ASSOCIATION")(_json_array(owners, lambda o: _owner_json(json_object(o)))),
        "tagUrn": only("TAG_ASSOCIATION")(tag),
        "glossaryTermUrn": only("TERM_ASSOCIATION")(term),
        "glossaryEntityName": only("CREATE_GLOSSARY_TERM")(_coalesce(_text(create_term.get("name")), _text(p.get("name")))),
        "parentNodeUrn": only("CREATE_GLOSSARY_TERM")(_coalesce(_text(create_term.get("parentNode")), _text(p.get("parentNode")))),
        "description": only("UPDATE_DESCRIPTION")(
            _coalesce(_text(proposal("updateDescriptionProposal").get("description")), _text(p.get("description")))
        ),
        "structuredProperties": only("STRUCTURED_PROPERTY_ASSOCIATION")(_json_array(assignments, lambda a: _assignment_json(json_object(a)))),
    }
    yield pair.entity_urn, "LIFECYCLE", "CREATE", None, params


def rules_by_aspect(owner_category: str = "OWNER") -> dict[str, list[Callable[[Pair], Iterable[Change]]]]:
    """The diff rules that read each aspect (key aspects are handled apart: `is_key_aspect`)."""
    rules: dict[str, list[Callable[[Pair], Iterable[Change]]]] = {
        "globalTags": [_urn_set("tags", "tag", "TAG", "tagUrn")],
        "glossaryTerms": [_urn_set("terms", "urn", "GLOSSARY_TERM", "termUrn")],
        "domains": [domain_changes],
        "ownership": [owner_changes(owner_category)],
        "structuredProperties": [structured_property_changes],
        "deprecation": [deprecation_changes],
        "status": [status_changes],
        "actionRequestInfo": [action_request_changes],
        "schemaMetadata": [technical_schema_changes, field_tag_term_changes, field_documentation_changes],
        "editableSchemaMetadata": [field_tag_term_changes, field_documentation_changes],
    }
    for aspect_name in DESCRIPTION_FIELDS:
        rules.setdefault(aspect_name, []).append(entity_documentation_changes)
    return rules
