"""The scope rule translated to an Arrow filter selects the rows Spark SQL selects with the rendered rule."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gold.scopes import change_event_condition, parse_scope
from pipelines.serving.scoped_reads import ChangeEventScope, arrow_filter

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
