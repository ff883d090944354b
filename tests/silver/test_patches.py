"""PATCH proposals from DataHub's SDK applied with DataHub's template semantics: input/output fixtures."""

from __future__ import annotations

import json

import pytest
from datahub.metadata.schema_classes import (
    GlossaryTermAssociationClass,
    OwnerClass,
    OwnershipTypeClass,
    TagAssociationClass,
    UpstreamClass,
)
from datahub.specific.dataset import DatasetPatchBuilder

from silver.patches import SYSTEM_ACTOR, PatchError, apply_patch, fold_versions, parse_patch

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
UPSTREAM = "urn:li:dataset:(urn:li:dataPlatform:hive,db.raw_orders,PROD)"
NOW = 1700000000000


def sdk_patches(build) -> dict[str, list[str]]:
    """The patch texts a DatasetPatchBuilder call chain emits, by aspect name, in order."""
    builder = DatasetPatchBuilder(URN)
    build(builder)
    texts: dict[str, list[str]] = {}
    for mcp in builder.build():
        texts.setdefault(mcp.aspectName, []).append(mcp.aspect.value.decode())
    return texts


def applied(aspect_name: str, current: dict | None, texts: list[str]) -> dict | None:
    for text in texts:
        current = apply_patch(aspect_name, current, text, NOW)
    return current


# (what the SDK call does, aspect name, the aspect before, the aspect after)
CASES = [
    (
        lambda b: b.add_tag(TagAssociationClass("urn:li:tag:pii")).remove_tag("urn:li:tag:legacy"),
        "globalTags",
        {"tags": [{"tag": "urn:li:tag:legacy"}, {"tag": "urn:li:tag:gold", "context": "kept"}]},
        {"tags": [{"tag": "urn:li:tag:gold", "context": "kept"}, {"tag": "urn:li:tag:pii"}]},
    ),
    (
        # The entity has no globalTags yet: the template's default, then the patch; removing a tag that
        # is not there changes nothing.
        lambda b: b.remove_tag("urn:li:tag:none").add_tag(TagAssociationClass("urn:li:tag:pii")),
        "globalTags",
        None,
        {"tags": [{"tag": "urn:li:tag:pii"}]},
    ),
    (
        lambda b: b.add_owner(OwnerClass("urn:li:corpuser:jdoe", OwnershipTypeClass.TECHNICAL_OWNER))
        .add_owner(OwnerClass("urn:li:corpuser:ann", OwnershipTypeClass.DATAOWNER))
        .remove_owner("urn:li:corpuser:old"),
        "ownership",
        {
            "owners": [
                {"owner": "urn:li:corpuser:old", "type": "DATAOWNER"},
                {"owner": "urn:li:corpuser:ann", "type": "DATAOWNER", "source": {"type": "MANUAL"}},
            ],
            "lastModified": {"time": 5, "actor": "urn:li:corpuser:x"},
        },
        {
            "owners": [
                {"owner": "urn:li:corpuser:ann", "type": "DATAOWNER"},
                {"owner": "urn:li:corpuser:jdoe", "type": "TECHNICAL_OWNER"},
            ],
            "lastModified": {"time": 5, "actor": "urn:li:corpuser:x"},
        },
    ),
    (
        lambda b: b.add_term(GlossaryTermAssociationClass("urn:li:glossaryTerm:Finance.Revenue")),
        "glossaryTerms",
        None,
        {"terms": [{"urn": "urn:li:glossaryTerm:Finance.Revenue"}], "auditStamp": {"actor": SYSTEM_ACTOR, "time": NOW}},
    ),
    (
        lambda b: b.set_description("Orders").add_custom_property("team", "sales").remove_custom_property("old"),
        "datasetProperties",
        {"customProperties": {"old": "1", "keep": "2"}, "name": "orders"},
        {"customProperties": {"keep": "2", "team": "sales"}, "name": "orders", "tags": [], "description": "Orders"},
    ),
    (
        lambda b: b.for_field("amount").add_tag(TagAssociationClass("urn:li:tag:money"))
        .add_term(GlossaryTermAssociationClass("urn:li:glossaryTerm:Finance.Amount")),
        "editableSchemaMetadata",
        {"editableSchemaFieldInfo": [{"fieldPath": "id", "description": "key"}], "created": {"time": 1, "actor": "urn:li:corpuser:x"}},
        {
            "editableSchemaFieldInfo": [
                {"fieldPath": "id", "description": "key"},
                {
                    "globalTags": {"tags": [{"tag": "urn:li:tag:money"}]},
                    "glossaryTerms": {"terms": [{"urn": "urn:li:glossaryTerm:Finance.Amount"}]},
                    "fieldPath": "amount",
                },
            ],
            "created": {"time": 1, "actor": "urn:li:corpuser:x"},
        },
    ),
    (
        lambda b: b.add_upstream_lineage(UpstreamClass(dataset=UPSTREAM, type="TRANSFORMED")),
        "upstreamLineage",
        None,
        {
            "upstreams": [{"auditStamp": {"time": 0, "actor": "urn:li:corpuser:unknown"}, "dataset": UPSTREAM, "type": "TRANSFORMED"}],
            "fineGrainedLineages": [],
        },
    ),
]


@pytest.mark.parametrize("build, aspect_name, before, after", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_sdk_patches_give_the_aspect_datahub_stores(build, aspect_name, before, after):
    texts = sdk_patches(build)
    assert list(texts) == [aspect_name]
    original = json.dumps(before)
    assert applied(aspect_name, before, texts[aspect_name]) == after
    assert json.dumps(before) == original  # the aspect given is left as it was


def test_plain_json_patch_operations_on_lists_and_objects():
    aspect = {"customProperties": {"a": "1"}, "tags": ["x", "y"]}
    patch = json.dumps([
        {"op": "add", "path": "/tags/z", "value": "z"},
        {"op": "remove", "path": "/tags/x"},
        {"op": "replace", "path": "/customProperties/a", "value": "2"},
        {"op": "copy", "from": "/customProperties/a", "path": "/customProperties/b"},
        {"op": "move", "from": "/customProperties/b", "path": "/customProperties/c"},
        {"op": "test", "path": "/customProperties/c", "value": "2"},
    ])
    assert apply_patch("datasetProperties", aspect, patch, NOW) == {"customProperties": {"a": "2", "c": "2"}, "tags": ["y", "z"]}
    # Replacing a keyed array as a whole keeps the list given.
    replaced = apply_patch("globalTags", {"tags": [{"tag": "a"}]}, json.dumps([{"op": "replace", "path": "/tags", "value": [{"tag": "b"}]}]), NOW)
    assert replaced == {"tags": [{"tag": "b"}]}


@pytest.mark.parametrize(
    "aspect_name, current, patch, reason",
    [
        ("schemaMetadata", None, [{"op": "add", "path": "/fields/x", "value": {}}],
         "aspectName: 'schemaMetadata' has no patch template and the patch names no arrayPrimaryKeys"),
        ("datasetProperties", {"customProperties": {}}, [{"op": "replace", "path": "/customProperties/nope", "value": "1"}],
         "aspect.value.patch[0].path: '/customProperties/nope' does not exist"),
        ("datasetProperties", {"name": "orders"}, [{"op": "add", "path": "/name/deeper", "value": "1"}],
         "aspect.value.patch[0].path: '/name/deeper' goes through 'orders', which is not an object or list"),
        ("datasetProperties", {"name": "orders"}, [{"op": "test", "path": "/name", "value": "other"}],
         "aspect.value.patch[0]: test of '/name' failed"),
        ("datasetProperties", {}, [{"op": "merge", "path": "/name", "value": "x"}],
         "aspect.value.patch[0].op: 'merge' is not one of add, remove, replace, copy, move, test"),
        ("upstreamLineage", None, [{"op": "add", "path": "/fineGrainedLineages/NONE/f/NONE/u", "value": 1.0}],
         "aspect.value.patch[0].path: '/fineGrainedLineages/NONE/f/NONE/u' patches fineGrainedLineages"),
        ("globalTags", None, {"patch": "nope"}, "aspect.value: "),
        # '²' is a digit to str.isdigit() but no number to int(): a position that names no item.
        ("datasetProperties", {"lst": [[1], [2]]}, [{"op": "replace", "path": "/lst/\u00b2", "value": 3}],
         "aspect.value.patch[0].path: '/lst/\u00b2' does not exist"),
        ("datasetProperties", {"lst": [[1], [2]]}, [{"op": "add", "path": "/lst/\u00b2", "value": 3}],
         "aspect.value.patch[0].path: '/lst/\u00b2' names no item of a list of 2"),
    ],
)
def test_a_patch_that_cannot_be_applied_raises_naming_the_field_and_value(aspect_name, current, patch, reason):
    with pytest.raises(PatchError) as raised:
        apply_patch(aspect_name, current, json.dumps(patch), NOW)
    assert str(raised.value).startswith(reason)


def test_generic_patches_carry_their_array_keys():
    document = parse_patch(sdk_patches(lambda b: b.add_tag(TagAssociationClass("urn:li:tag:a")))["globalTags"][0])
    assert document.array_keys == {"tags": ("attribution\u241fsource", "tag")}
    assert [op["op"] for op in document.operations] == ["add"]


def test_fold_applies_each_patch_to_the_versions_before_it():
    add_pii = sdk_patches(lambda b: b.add_tag(TagAssociationClass("urn:li:tag:pii")))["globalTags"][0]
    remove_gold = sdk_patches(lambda b: b.remove_tag("urn:li:tag:gold"))["globalTags"][0]
    broken = json.dumps([{"op": "replace", "path": "/tags/nope/x", "value": 1}])
    state = json.dumps({"tags": [{"tag": "urn:li:tag:gold"}]})
    versions = [
        {"order_key": "t1", "change_type": "PATCH", "json": add_pii, "created_time": 1},
        {"order_key": "t2", "change_type": "patch", "json": broken, "created_time": 2},
        {"order_key": "t3", "change_type": "PATCH", "json": remove_gold, "created_time": 3},
        {"order_key": "t4", "change_type": "DELETE", "json": None, "created_time": 4},
        {"order_key": "t5", "change_type": "PATCH", "json": add_pii, "created_time": 5},
        {"order_key": "t6", "change_type": "PATCH", "json": broken, "created_time": 6},
    ]
    folded = fold_versions("globalTags", state, versions)
    gold_pii = json.dumps({"tags": [{"tag": "urn:li:tag:gold"}, {"tag": "urn:li:tag:pii"}]})
    pii = json.dumps({"tags": [{"tag": "urn:li:tag:pii"}]})
    assert [(f["order_key"], f["prev_json"], f["new_json"], f["error"] is not None, f["is_last"]) for f in folded] == [
        ("t1", state, gold_pii, False, False),
        ("t2", gold_pii, None, True, False),
        ("t3", gold_pii, pii, False, False),
        ("t4", pii, None, False, False),
        ("t5", None, pii, False, True),
        ("t6", pii, None, True, False),
    ]
    assert folded[1]["error"] == "aspect.value.patch[0].path: '/tags/nope/x' does not exist"
    # An UPSERT in the chain is taken as it is.
    upsert = json.dumps({"tags": []})
    chain = fold_versions("globalTags", None, [{"order_key": "t1", "change_type": "UPSERT", "json": upsert, "created_time": 1},
                                               {"order_key": "t2", "change_type": "PATCH", "json": add_pii, "created_time": 2}])
    assert [f["new_json"] for f in chain] == [upsert, pii]
