"""Scoped reads of change events: the Arrow filter selects what Spark SQL selects, domains by the newest audit row."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
import pytest

from conf.tables import schema_name, table_location, table_name, table_spec
from gold.scopes import change_event_condition, parse_scope
from pipelines.runtime.catalog import create_table_sql
from pipelines.runtime.io import append
from pipelines.serving.scoped_reads import ChangeEventScope, EntityDomains, arrow_filter
from tests.conftest import delta_log_actions, make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import rows_df

ROWS = [
    ("urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)", "dataset"),
    ("urn:li:dataset:(urn:li:dataPlatform:hive,db_x.users,PROD)", "dataset"),
    ("urn:li:dataset:(urn:li:dataPlatform:hive,dbax.users,PROD)", "dataset"),
    ("urn:li:dashboard:(looker,sales)", "dashboard"),
    ("urn:li:chart:(looker,100%)", "chart"),
    (None, None),
]
SCOPES = [
    ["platform=hive"],
    ["platform=looker", "entity-type=dataset"],
    ["platform=looker", "platform=hive", "entity-type=chart", "entity-type=dataset"],
    ["prefix=urn:li:dataset:(urn:li:dataPlatform:hive,db_x."],
    ["prefix=urn:li:chart:(looker,100%"],
    ["domain=urn:li:domain:finance"],
    ["nothing"],
]


@pytest.mark.parametrize("specs", SCOPES)
def test_the_arrow_filter_selects_what_spark_sql_selects(spark, specs):
    # The domain kind resolved to the entities of the domain, as the server does.
    condition = change_event_condition(parse_scope(specs), [ROWS[0][0]])
    table = pa.table({"aspect_entity_urn": [r[0] for r in ROWS], "aspect_entity_type": [r[1] for r in ROWS]})
    arrow_rows = table.filter(arrow_filter(condition))["aspect_entity_urn"].to_pylist()
    rows_df = spark.createDataFrame(ROWS, "aspect_entity_urn string, aspect_entity_type string")
    spark_rows = [r.aspect_entity_urn for r in rows_df.filter(condition.sql(dialect="spark")).collect()]
    assert sorted(arrow_rows, key=str) == sorted(spark_rows, key=str)


def test_visible_entities_keeps_the_order_given():
    scope = ChangeEventScope(change_event_condition(parse_scope(["entity-type=dashboard"])))
    assert scope.visible_entities([ROWS[3][0], ROWS[0][0], ROWS[3][0]], ["dashboard", "dataset", "dashboard"]) == [True, False, True]
    assert ChangeEventScope(None).visible_entities(["a"], [None]) == [True]


FINANCE, SALES = "urn:li:domain:finance", "urn:li:domain:sales"
MOVED, UNASSIGNED, FINANCE_ONLY = (f"urn:li:dataset:(urn:li:dataPlatform:hive,db.{n},PROD)" for n in ("moved", "unassigned", "fin"))


def _audit_row(entity_urn: str, timestamp: int, domain: str | None) -> dict:
    row = dict.fromkeys(table_spec("gold.audit_events").column_names)
    return {**row, "event_id": f"{entity_urn}@{timestamp}", "event_type": "UpdateAspectEvent", "timestamp": timestamp,
            "entity_urn": entity_urn, "entity_type": "dataset", "origin": "change", "domain": domain,
            "event_date": dt.date(2026, 1, 1)}  # fmt: skip


def test_an_entity_belongs_to_the_domain_of_its_newest_audit_row(spark, lakehouse):
    domains = EntityDomains(lakehouse)
    assert domains.entities_of([FINANCE]) == []  # no audit row yet: nothing in any domain
    rows = [_audit_row(MOVED, 1, FINANCE), _audit_row(MOVED, 2, SALES), _audit_row(UNASSIGNED, 1, FINANCE),
            _audit_row(UNASSIGNED, 3, None), _audit_row(FINANCE_ONLY, 5, FINANCE)]  # fmt: skip
    append(rows_df(spark, "gold.audit_events", rows), lakehouse, "gold.audit_events")
    assert domains.entities_of([FINANCE]) == [FINANCE_ONLY]
    assert domains.entities_of([SALES, FINANCE]) == sorted([MOVED, FINANCE_ONLY])
    # A newer publish moves the entity back: the next read sees the new table version, not the cached one.
    append(rows_df(spark, "gold.audit_events", [_audit_row(MOVED, 9, FINANCE)]), lakehouse, "gold.audit_events")
    assert domains.entities_of([FINANCE]) == sorted([MOVED, FINANCE_ONLY])
    assert domains.entities_of([SALES]) == []


def test_domains_are_read_through_the_deletion_vectors_of_the_audit_table(spark, tmp_path):
    # A platform that enables deletion vectors on new tables (as Databricks does) deletes rows by marking
    # them: delta-rs's plain Arrow reader refuses such a table (test_engine_defects), its query engine honours it.
    settings = make_settings(tmp_path / "home")
    name, location = table_name(settings, "gold.audit_events"), table_location(settings, "gold.audit_events")
    with_deletion_vectors = dataclasses.replace(table_spec("gold.audit_events"), properties=(("delta.enableDeletionVectors", "true"),))
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema_name(settings, 'gold')}")
    spark.sql(create_table_sql(settings, with_deletion_vectors))
    rows = [_audit_row(MOVED, 1, FINANCE), _audit_row(MOVED, 2, SALES), _audit_row(FINANCE_ONLY, 5, FINANCE)]
    append(rows_df(spark, "gold.audit_events", rows), settings, "gold.audit_events")
    spark.sql(f"DELETE FROM {name} WHERE event_id = '{MOVED}@2'")
    assert any(a.get("add", {}).get("deletionVector") for a in delta_log_actions(location)), "no deletion vector written"
    register_fresh_tables(spark, settings)
    assert spark.table(name).count() == 2
    # The deleted row named sales: without it, the entity's newest row is the finance one.
    domains = EntityDomains(settings)
    assert domains.entities_of([FINANCE]) == sorted([MOVED, FINANCE_ONLY])
    assert domains.entities_of([SALES]) == []
