"""The scope rule over silver change events: the audit search's condition on the aspect entity's columns."""

from __future__ import annotations

import pytest

from gold.scopes import UNSCOPED, change_event_condition, parse_scope

FINANCE = "urn:li:domain:finance"


@pytest.mark.parametrize(
    ("specs", "domain_entities", "expected"),
    [
        (["entity-type=dataset"], None, "aspect_entity_type IN ('dataset')"),
        (["prefix=urn:li:dataset:(x_"], None, "aspect_entity_urn LIKE 'urn:li:dataset:(x\\\\_%'"),
        (["platform=hive"], None,
         "(aspect_entity_urn LIKE '%urn:li:dataPlatform:hive,%' OR aspect_entity_urn LIKE 'urn:li:%:(hive,%')"),
        (["domain=" + FINANCE], None, f"domain IN ('{FINANCE}')"),
        (["domain=" + FINANCE, "entity-type=chart"], ["urn:li:chart:(looker,a)"],
         "aspect_entity_urn IN ('urn:li:chart:(looker,a)') AND aspect_entity_type IN ('chart')"),
        (["domain=" + FINANCE], [], "FALSE"),
        (["nothing"], ["urn:li:chart:(looker,a)"], "FALSE"),
    ],
)  # fmt: skip
def test_change_event_condition(specs, domain_entities, expected):
    assert change_event_condition(parse_scope(specs), domain_entities).sql(dialect="spark") == expected


def test_an_unscoped_principal_has_no_condition():
    assert change_event_condition(UNSCOPED, ["urn:li:chart:(looker,a)"]) is None
