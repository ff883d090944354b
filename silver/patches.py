"""DataHub PATCH proposals applied to the aspect they patch, with DataHub's semantics: pure Python.

A PATCH proposal's aspect is a JSON Patch (RFC 6902), either a list of operations or DataHub's generic
form `{"patch": [...], "arrayPrimaryKeys": {"tags": ["attribution␟source", "tag"]}}`. DataHub's server
(metadata-io's aspect templates, `ArrayMergingTemplate`) applies it like this, and so does this module:

1. The aspect is the entity's current one, or the template's default when it has none yet.
2. Each keyed array field becomes nested objects, one level per key field, so that paths address items
   by key, not by position: `tags` keyed by `tag` turns `[{"tag": "urn:li:tag:a"}]` into
   `{"urn:li:tag:a": {"tag": "urn:li:tag:a"}}`, and `/tags/urn:li:tag:a` names that item. A missing key
   is the empty string; a key with `␟` (U+241F) is a nested field (`attribution␟source`); items with the
   same keys merge; an array of strings is keyed by the string itself.
3. The operations apply in order. `add` creates the objects its path goes through (DataHub fills in the
   path's parents first); `remove` of something that is not there changes nothing; `replace`, `move`,
   `copy` and `test` need their path to exist.
4. The nested objects become arrays again, in key order of first appearance, with each key field put
   back into items that lack it (an item added at `/tags/<urn>` without its `tag`).

The keys are the patch's `arrayPrimaryKeys` when it has them, else the template's (TEMPLATES). Where
DataHub's default stamps the current time (an audit stamp), the patch record's own time is used, so
refining a batch again gives the same aspect.

One module over 400 lines on purpose: the four steps above are one algorithm (DataHub's ArrayMergingTemplate)
whose keyed form, operations and templates only make sense together.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conf.errors import InputError
from conf.values import whole_number

# DataHub's system actor (com.linkedin.metadata.Constants.SYSTEM_ACTOR): the actor of a default's stamps.
SYSTEM_ACTOR = "urn:li:corpuser:__datahub_system"
# Separates the parts of a nested key field in arrayPrimaryKeys (`attribution␟source`).
UNIT_SEPARATOR = "\u241f"
PATCH, DELETE = "PATCH", "DELETE"

_TAG_KEYS = ("tag",)
_TERM_KEYS = ("urn", f"attribution{UNIT_SEPARATOR}source")
# fineGrainedLineages: DataHub keys them by transformation, downstream and query in a shape of its own.
_FINE_GRAINED = "fineGrainedLineages"


class PatchError(InputError):
    """A PATCH proposal that cannot be applied; the message names the field and the value."""


@dataclass(frozen=True)
class Template:
    """What DataHub's aspect template for one aspect holds.

    Attributes:
        default: the aspect when the entity has none yet, given the patch record's time (epoch ms).
        arrays: keyed array field -> its key fields (empty: an array of strings keyed by themselves).
        nested: array field -> {field of its items: the template of that field's value}.
    """

    default: Callable[[int], dict]
    arrays: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    nested: Mapping[str, Mapping[str, Template]] = field(default_factory=dict)


def _stamp(now: int) -> dict:
    return {"actor": SYSTEM_ACTOR, "time": now}


def _change_stamps(now: int) -> dict:
    return {"created": _stamp(now), "lastModified": _stamp(now)}


_TAGS = Template(lambda now: {"tags": []}, {"tags": _TAG_KEYS})
_TERMS = Template(lambda now: {"terms": [], "auditStamp": _stamp(now)}, {"terms": _TERM_KEYS})

# The aspects DataHub has a patch template for (AspectTemplateEngine.SUPPORTED_TEMPLATES that this
# module carries over), with their defaults and keyed arrays.
TEMPLATES: dict[str, Template] = {
    "globalTags": _TAGS,
    "glossaryTerms": _TERMS,
    "ownership": Template(
        lambda now: {"owners": [], "lastModified": _stamp(now)}, {"owners": ("owner", "type", "typeUrn")}
    ),
    "datasetProperties": Template(lambda now: {"tags": [], "customProperties": {}}, {"tags": ()}),
    "editableDatasetProperties": Template(lambda now: {}),
    "editableSchemaMetadata": Template(
        lambda now: {**_change_stamps(now), "editableSchemaFieldInfo": []},
        {"editableSchemaFieldInfo": ("fieldPath",)},
        {"editableSchemaFieldInfo": {"globalTags": _TAGS, "glossaryTerms": _TERMS}},
    ),
    "upstreamLineage": Template(
        lambda now: {"upstreams": [], _FINE_GRAINED: []}, {"upstreams": ("dataset",)}
    ),
    "domains": Template(lambda now: {"domains": []}, {"domains": ()}),
    "siblings": Template(lambda now: {"siblings": [], "primary": False}, {"siblings": ()}),
    "structuredProperties": Template(
        lambda now: {"properties": []}, {"properties": ("propertyUrn", f"attribution{UNIT_SEPARATOR}source")}
    ),
    "dataFlowInfo": Template(lambda now: {"customProperties": {}}),
    "dataJobInfo": Template(lambda now: {"customProperties": {}}),
    "dataProductProperties": Template(lambda now: {"assets": []}, {"assets": ("destinationUrn",)}),
    "dataJobInputOutput": Template(
        lambda now: {
            "inputDatajobEdges": [],
            "inputDatasetEdges": [],
            "outputDatasetEdges": [],
            _FINE_GRAINED: [],
            "inputDatasetFields": [],
            "outputDatasetFields": [],
            "inputDatajobs": [],
            "inputDatasets": [],
            "outputDatasets": [],
        },
        {
            "inputDatajobEdges": ("destinationUrn",),
            "inputDatasetEdges": ("destinationUrn",),
            "outputDatasetEdges": ("destinationUrn",),
            "inputDatasetFields": (),
            "outputDatasetFields": (),
        },
    ),
    "chartInfo": Template(
        lambda now: {"description": "", "title": "", "lastModified": _change_stamps(now), "inputEdges": [], "inputs": []},
        {"inputEdges": ("destinationUrn",), "inputs": ()},
    ),
    "dashboardInfo": Template(
        lambda now: {
            "title": "",
            "description": "",
            "lastModified": _change_stamps(now),
            "chartEdges": [],
            "datasetEdges": [],
            "datasets": [],
            "charts": [],
        },
        {"chartEdges": ("destinationUrn",), "datasetEdges": ("destinationUrn",), "datasets": (), "charts": ()},
    ),
}


@dataclass(frozen=True)
class PatchDocument:
    """A parsed PATCH aspect: its operations and, in DataHub's generic form, its arrayPrimaryKeys."""

    operations: tuple[dict, ...]
    array_keys: Mapping[str, tuple[str, ...]] | None = None


def parse_patch(text: str) -> PatchDocument:
    """Parse a PATCH proposal's aspect text.

    Raises:
        PatchError: when it is neither a list of operations nor `{"patch": [...], "arrayPrimaryKeys": {...}}`.
    """
    try:
        document = json.loads(text)
    except (TypeError, ValueError):
        raise PatchError(f"aspect.value: {_shown(text)} is not valid JSON") from None
    keys = None
    if isinstance(document, dict):
        keys = document.get("arrayPrimaryKeys")
        if keys is not None and not (
            isinstance(keys, dict)
            and all(isinstance(v, list) and all(isinstance(k, str) for k in v) for v in keys.values())
        ):
            raise PatchError(f"aspect.value.arrayPrimaryKeys: {_shown(keys)} is not an object of key-field lists")
        document = document.get("patch")
    if not isinstance(document, list) or not all(isinstance(op, dict) for op in document):
        raise PatchError(f"aspect.value: {_shown(text)} is not a JSON Patch (a list of operations, or {{patch, arrayPrimaryKeys}})")
    return PatchDocument(tuple(document), None if keys is None else {k: tuple(v) for k, v in keys.items()})


def apply_patch(aspect_name: str, current: dict | None, patch_text: str, now: int) -> dict:
    """Apply one PATCH proposal to an aspect the way DataHub's server does (see the module docstring).

    Args:
        aspect_name: the patched aspect (its template from TEMPLATES).
        current: the aspect as it is, or None when the entity has none (the template's default is used).
        patch_text: the proposal's aspect text (`parse_patch`).
        now: the patch record's time (epoch ms), for the stamps a default carries.

    Returns:
        The full aspect after the patch (a new object; `current` is left as it was).

    Raises:
        PatchError: naming the field and value: not a JSON Patch, an aspect with no template and no
            arrayPrimaryKeys, an operation that cannot apply (a path through a value that is no
            object or list, a missing path for replace/move/copy/test, a failed test).
    """
    document = parse_patch(patch_text)
    template = TEMPLATES.get(aspect_name)
    if template is None and document.array_keys is None:
        raise PatchError(
            f"aspectName: {aspect_name!r} has no patch template and the patch names no arrayPrimaryKeys "
            f"(templates: {', '.join(sorted(TEMPLATES))})"
        )
    if current is not None and not isinstance(current, dict):
        raise PatchError(f"aspect: the current {aspect_name} is not a JSON object")
    template = template or Template(lambda now: {})
    keys = document.array_keys if document.array_keys is not None else template.arrays
    nested = template.nested if document.array_keys is None else {}
    base = copy.deepcopy(current) if current is not None else template.default(now)
    transformed = _to_keyed(base, keys, nested)
    for index, operation in enumerate(document.operations):
        _apply_operation(transformed, operation, f"aspect.value.patch[{index}]", aspect_name)
    result = _from_keyed(transformed, keys, nested)
    if aspect_name == "glossaryTerms" and "auditStamp" not in result:
        # A required field of the aspect: DataHub's template sets it when it is missing.
        result["auditStamp"] = _stamp(now)
    return result


# ------------------------------------------------------------------------------------------------
# Keyed arrays: arrays -> nested objects by key (ArrayMergingTemplate.arrayFieldToMap) and back
# (transformedMapToArray).
# ------------------------------------------------------------------------------------------------


def _to_keyed(aspect: Any, keys: Mapping[str, Sequence[str]], nested: Mapping[str, Mapping[str, Template]]) -> Any:
    if not isinstance(aspect, dict):
        return aspect
    transformed = dict(aspect)
    for name, key_fields in keys.items():
        # A field that is absent or no array becomes an empty object, as in DataHub.
        transformed[name] = _array_to_map(aspect.get(name), tuple(key_fields))
        for item_field, item_template in nested.get(name, {}).items():
            for leaf in _leaves(transformed[name], len(key_fields)):
                if isinstance(leaf, dict) and leaf.get(item_field) is not None:
                    leaf[item_field] = _to_keyed(leaf[item_field], item_template.arrays, item_template.nested)
    return transformed


def _array_to_map(items: Any, key_fields: tuple[str, ...]) -> dict:
    keyed: dict = {}
    if not isinstance(items, list):
        return keyed
    for item in items:
        if not key_fields:
            keyed[item if isinstance(item, str) else ""] = item
            continue
        node = keyed
        for key_field in key_fields:
            node = node.setdefault(_key_text(item, key_field), {})
        if not isinstance(item, dict):
            raise PatchError(f"aspect: an item keyed by {', '.join(key_fields)} is {_shown(item)}, not an object")
        node.update(copy.deepcopy(item))
    return keyed


def _key_text(item: Any, key_field: str) -> str:
    """The text of an item's key field (a nested one for `a␟b`); "" when missing, null or not a scalar."""
    value = item
    for part in key_field.split(UNIT_SEPARATOR):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return ""


def _leaves(keyed: Any, depth: int) -> list:
    if depth == 0:
        return [keyed]
    if not isinstance(keyed, dict):
        return []
    return [leaf for value in keyed.values() for leaf in _leaves(value, depth - 1)]


def _from_keyed(aspect: Any, keys: Mapping[str, Sequence[str]], nested: Mapping[str, Mapping[str, Template]]) -> Any:
    if not isinstance(aspect, dict):
        return aspect
    rebased = dict(aspect)
    for name, key_fields in keys.items():
        rebased[name] = _map_to_array(aspect.get(name), tuple(key_fields), name)
        for item_field, item_template in nested.get(name, {}).items():
            for item in rebased[name]:
                if isinstance(item, dict) and item.get(item_field) is not None:
                    item[item_field] = _from_keyed(item[item_field], item_template.arrays, item_template.nested)
    return rebased


def _map_to_array(keyed: Any, key_fields: tuple[str, ...], name: str) -> list:
    if isinstance(keyed, list):
        return keyed  # replaced as a whole by the patch
    if keyed is None:
        return []
    if not isinstance(keyed, dict):
        raise PatchError(f"aspect.value.patch: {name} became {_shown(keyed)}, which is neither a list nor keyed items")
    if not key_fields:
        return list(keyed.values())
    return _merged(keyed, key_fields)


def _merged(node: Any, key_fields: tuple[str, ...]) -> list:
    if not key_fields or _is_item(node):
        return list(node) if isinstance(node, list) else [node]
    key_field, rest = key_fields[0], key_fields[1:]
    items: list = []
    if isinstance(node, dict):
        for key, value in node.items():
            merged = _merged(value, rest)
            if key and UNIT_SEPARATOR not in key_field:
                for item in merged:
                    if isinstance(item, dict) and key_field not in item:
                        item[key_field] = key
            items.extend(merged)
    elif isinstance(node, list):
        for value in node:
            items.extend(_merged(value, rest))
    return items


def _is_item(node: Any) -> bool:
    """Whether a node at a key level is an item, not a level of keys: an object with a field that is no object.

    A level of keys holds objects only; an item added with fewer key levels than the keys (the SDK's
    field-level `/terms/<urn>`) sits there as itself.
    """
    return isinstance(node, dict) and any(not isinstance(value, (dict, list)) for value in node.values())


# ------------------------------------------------------------------------------------------------
# JSON Patch operations (RFC 6902) over the keyed aspect.
# ------------------------------------------------------------------------------------------------


def _tokens(path: Any, where: str) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"{where}.path: {_shown(path)} does not start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in path.split("/")[1:]] if path else []


def _apply_operation(document: dict, operation: dict, where: str, aspect_name: str) -> None:
    op = str(operation.get("op", "")).lower()
    path = operation.get("path")
    tokens = _tokens(path, where)
    if tokens and tokens[0] == _FINE_GRAINED and aspect_name in ("upstreamLineage", "dataJobInputOutput"):
        raise PatchError(
            f"{where}.path: {path!r} patches {_FINE_GRAINED}, which DataHub keys by transformation, downstream "
            "and query; such patches are not applied here"
        )
    if not tokens:
        raise PatchError(f"{where}.path: {path!r} names the whole aspect, which a patch cannot {op or 'change'}")
    if op == "add":
        _put(document, tokens, copy.deepcopy(operation.get("value")), where, path, create=True)
    elif op == "remove":
        parent = _parent(document, tokens, where, path, create=False)
        if isinstance(parent, dict):
            parent.pop(tokens[-1], None)
        elif isinstance(parent, list):
            parent.pop(_index(parent, tokens[-1], where, path, allow_end=False))
    elif op == "replace":
        _get(document, tokens, where, path)
        _put(document, tokens, copy.deepcopy(operation.get("value")), where, path, create=False)
    elif op in ("move", "copy"):
        source = _tokens(operation.get("from"), f"{where}.from")
        value = copy.deepcopy(_get(document, source, f"{where}.from", operation.get("from")))
        if op == "move":
            _apply_operation(document, {"op": "remove", "path": operation.get("from")}, where, aspect_name)
        _put(document, tokens, value, where, path, create=True)
    elif op == "test":
        if _get(document, tokens, where, path) != operation.get("value"):
            raise PatchError(f"{where}: test of {path!r} failed (the value there is not {_shown(operation.get('value'))})")
    else:
        raise PatchError(f"{where}.op: {_shown(operation.get('op'))} is not one of add, remove, replace, copy, move, test")


def _parent(document: Any, tokens: list[str], where: str, path: str, *, create: bool) -> Any:
    """The container the path's last token is in; None when a parent is missing and not created."""
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node or node[token] is None:
                if not create:
                    return None
                node[token] = {}
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, where, path, allow_end=False)]
        else:
            raise PatchError(f"{where}.path: {path!r} goes through {_shown(node)}, which is not an object or list")
    if not isinstance(node, (dict, list)):
        raise PatchError(f"{where}.path: {path!r} goes through {_shown(node)}, which is not an object or list")
    return node


def _put(document: dict, tokens: list[str], value: Any, where: str, path: str, *, create: bool) -> None:
    parent = _parent(document, tokens, where, path, create=create)
    if parent is None:
        raise PatchError(f"{where}.path: {path!r} does not exist")
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif tokens[-1] == "-":
        parent.append(value)
    else:
        index = _index(parent, tokens[-1], where, path, allow_end=create)
        if create:
            parent.insert(index, value)
        else:
            parent[index] = value


def _get(document: Any, tokens: list[str], where: str, path: Any) -> Any:
    node = document
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and (position := whole_number(token)) is not None and position < len(node):
            node = node[position]
        else:
            raise PatchError(f"{where}.path: {path!r} does not exist")
    return node


def _index(items: list, token: str, where: str, path: str, *, allow_end: bool) -> int:
    limit = len(items) if allow_end else len(items) - 1
    position = whole_number(token)
    if position is None or position > limit:
        raise PatchError(f"{where}.path: {path!r} names no item of a list of {len(items)}")
    return position


def _shown(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ------------------------------------------------------------------------------------------------
# The versions of one (entity, aspect) in order, patches applied.
# ------------------------------------------------------------------------------------------------


def fold_versions(aspect_name: str, base_json: str | None, versions: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Apply a key's versions in order, each PATCH to the aspect the versions before it left.

    Args:
        aspect_name: the aspect of the key.
        base_json: the aspect before the first version (the state's), or None when there is none.
        versions: in order, each with `order_key`, `change_type`, `json` (the record's aspect text: a full
            aspect, a patch document, or None on DELETE) and `created_time`.

    Returns:
        One dict per version, in order: order_key, prev_json (the full aspect before it), new_json (the
        full aspect after it: the record's own for a write, the patched aspect for a PATCH, None on
        DELETE or when the patch failed), error (why a PATCH could not be applied, else None) and
        is_last (the newest version that was applied). A failed PATCH changes nothing.
    """
    current = base_json
    results: list[dict] = []
    for version in versions:
        change_type = str(version["change_type"]).upper()
        entry = {"order_key": version["order_key"], "prev_json": current, "new_json": None, "error": None}
        if change_type == DELETE:
            current = None
        elif change_type == PATCH:
            try:
                parsed = None if current is None else json.loads(current)
                patched = apply_patch(aspect_name, parsed, version["json"], int(version["created_time"] or 0))
            except PatchError as exc:
                entry["error"] = str(exc)
            else:
                current = json.dumps(patched)
                entry["new_json"] = current
        else:
            current = version["json"]
            entry["new_json"] = current
        results.append(entry)
    applied = [entry for entry in results if entry["error"] is None]
    for entry in results:
        entry["is_last"] = bool(applied) and entry is applied[-1]
    return results
