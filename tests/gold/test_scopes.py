"""The scope rule over silver change events: the audit search's condition on the aspect entity's columns."""

from __future__ import annotations

import pytest

from gold.scopes import UNSCOPED, change_event_condition, newest_domain_query, parse_scope, scope_within

FINANCE, SALES = "urn:li:domain:finance", "urn:li:domain:sales"


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


@pytest.mark.parametrize(
    ("inner", "outer", "within"),
    [
        (["domain=urn:li:domain:a"], ["domain=urn:li:domain:a", "domain=urn:li:domain:b"], True),
        (["domain=urn:li:domain:a", "domain=urn:li:domain:c"], ["domain=urn:li:domain:a"], False),
        ([], ["domain=urn:li:domain:a"], False),  # unscoped is within no restricted scope
        (["domain=urn:li:domain:a"], [], True),
        (["domain=urn:li:domain:a", "platform=hive"], ["domain=urn:li:domain:a"], True),
        (["platform=hive"], ["domain=urn:li:domain:a"], False),
        (["prefix=urn:li:dataset:(urn:li:dataPlatform:hive,db."], ["prefix=urn:li:dataset:"], True),
        (["prefix=urn:li:dataset:"], ["prefix=urn:li:dataset:(urn:li:dataPlatform:hive,"], False),
        (["entity-type=dataset"], ["prefix=urn:li:dataset:"], False),  # another kind: not judged within
        (["nothing"], ["domain=urn:li:domain:a"], True),
        (["domain=urn:li:domain:a"], ["nothing"], False),
    ],
)
def test_scope_within_judges_each_kind(inner, outer, within):
    assert scope_within(parse_scope(inner), parse_scope(outer)) is within


def test_an_entity_is_in_the_domain_of_its_newest_audit_row_and_a_tie_gives_no_domain_before_a_domain(spark):
    rows = [("moved", 1, FINANCE), ("moved", 2, SALES), ("tie_none", 5, FINANCE), ("tie_none", 5, None),
            ("tie_two", 3, SALES), ("tie_two", 3, FINANCE), (None, 9, FINANCE)]  # fmt: skip
    audit_df = spark.createDataFrame(rows, "entity_urn string, timestamp bigint, domain string")
    audit_df.createOrReplaceTempView("scope_test_audit_rows")
    newest = spark.sql(newest_domain_query("scope_test_audit_rows").sql(dialect="spark")).collect()
    assert sorted((r.entity_urn, r.domain) for r in newest) == [("moved", SALES), ("tie_none", None), ("tie_two", FINANCE)]
