"""The replica's layout and sync plans without a server: type mapping, view rewrites, Delta commit plans."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pyarrow as pa
import pytest
import sqlglot
from deltalake import DeltaTable, write_deltalake

from conf.errors import ConfigError
from conf.settings import load_settings
from pipelines.bi.replica import (
    create_table_sql,
    postgres_type,
    replicated_tables,
    view_select_sql,
    with_json_paths_on_json,
    with_timestamp_millis_as_to_timestamp,
)
from pipelines.bi.rows import copy_ready
from pipelines.bi.sync import NO_VERSION, plan_changes
from pipelines.runtime.views import load_views


@pytest.mark.parametrize(
    ("spark_type", "expected"),
    [
        ("STRING", "text"),
        ("BIGINT", "bigint"),
        ("INT", "integer"),
        ("DOUBLE", "double precision"),
        ("BOOLEAN", "boolean"),
        ("DATE", "date"),
        ("TIMESTAMP", "timestamptz"),
        ("DECIMAL(10,1)", "numeric(10,1)"),
        ("MAP<STRING, STRING>", "jsonb"),
        ("STRUCT<a: INT>", "jsonb"),
        ("ARRAY<STRING>", "jsonb"),
    ],
)
def test_spark_types_map_to_postgres_types(spark_type, expected):
    assert postgres_type(spark_type) == expected


def test_an_unmapped_type_is_refused_by_name():
    with pytest.raises(ConfigError, match="'INTERVAL'"):
        postgres_type("INTERVAL")


def test_the_replica_holds_gold_and_the_silver_tables_the_views_read():
    assert replicated_tables() == (
        "gold.audit_events", "gold.actor_activity_daily", "gold.openmetadata_change_events", "gold.actor_anomalies",
        "gold.lineage_edges", "silver.aspect_state", "silver.aspect_state_log", "silver.entity_change_events",
    )  # fmt: skip


def test_replica_tables_are_unlogged_with_mapped_columns():
    ddl = create_table_sql("silver.entity_change_events").as_string(None)
    assert ddl.startswith('CREATE UNLOGGED TABLE "silver"."entity_change_events" (')
    assert '"parameters" jsonb' in ddl and '"event_date" date' in ddl


def _rewritten(rule, spark_sql: str) -> str:
    return rule(sqlglot.parse_one(spark_sql, read="spark")).sql(dialect="postgres")


def test_timestamp_millis_becomes_to_timestamp_of_seconds():
    assert _rewritten(with_timestamp_millis_as_to_timestamp, "SELECT timestamp_millis(a.t) AS w FROM x AS a") == (
        "SELECT TO_TIMESTAMP(CAST((a.t) AS DOUBLE PRECISION) / 1000.0) AS w FROM x AS a"
    )


def test_get_json_object_reads_its_text_as_json():
    assert _rewritten(with_json_paths_on_json, "SELECT get_json_object(f, '$[0].feature') FROM x") == (
        "SELECT JSON_EXTRACT_PATH_TEXT(CAST(f AS JSON), '0', 'feature') FROM x"
    )


@pytest.mark.parametrize("view", load_views(), ids=[v.name for v in load_views()])
def test_each_view_transpiles_to_postgres_on_the_replica_schemas(tmp_path, view):
    settings = load_settings(home=tmp_path, env={}, overrides=["catalog.name=main", "catalog.schemas.gold=audit"])
    select = view_select_sql(settings, view)
    sqlglot.parse_one(select, read="postgres")
    assert "main." not in select and "audit." not in select
    assert "timestamp_millis" not in select.lower() and "date_sub" not in select.lower()


def _rows(days: list[str], value: int) -> pa.Table:
    return pa.table({
        "day": pa.array([date.fromisoformat(d) for d in days], pa.date32()),
        "value": pa.array([value] * len(days), pa.int64()),
        "at": pa.array([datetime(2026, 1, 1, tzinfo=timezone.utc)] * len(days), pa.timestamp("us", "UTC")),
    })  # fmt: skip


def test_appends_plan_only_the_new_versions_files(tmp_path):
    write_deltalake(tmp_path, _rows(["2026-01-01"], 1), partition_by=["day"])
    write_deltalake(tmp_path, _rows(["2026-01-02", "2026-01-03"], 2), partition_by=["day"], mode="append")
    plan = plan_changes(tmp_path, ("day",), 0, 1)
    assert plan.mode == "append"
    assert sorted(values["day"] for _, values in plan.added_files) == ["2026-01-02", "2026-01-03"]
    assert all(path.startswith(str(tmp_path)) for path, _ in plan.added_files)


def test_a_rewritten_partition_plans_that_partition_and_the_other_new_files(tmp_path):
    write_deltalake(tmp_path, _rows(["2026-01-01", "2026-01-02"], 1), partition_by=["day"])
    write_deltalake(tmp_path, _rows(["2026-01-02"], 5), partition_by=["day"], mode="overwrite", predicate="day = '2026-01-02'")
    write_deltalake(tmp_path, _rows(["2026-01-04"], 6), partition_by=["day"], mode="append")
    plan = plan_changes(tmp_path, ("day",), 0, 2)
    assert plan.mode == "partitions" and plan.partitions == {"2026-01-02"}
    assert [values["day"] for _, values in plan.added_files] == ["2026-01-04"]


def test_a_compaction_plans_nothing(tmp_path):
    write_deltalake(tmp_path, _rows(["2026-01-01"], 1), partition_by=["day"])
    write_deltalake(tmp_path, _rows(["2026-01-01"], 2), partition_by=["day"], mode="append")
    DeltaTable(tmp_path).optimize.compact()
    assert plan_changes(tmp_path, ("day",), 1, 2).mode == "none"


def test_changes_that_cannot_be_applied_in_place_plan_a_swap(tmp_path):
    write_deltalake(tmp_path / "flat", _rows(["2026-01-01", "2026-01-02"], 1))
    DeltaTable(tmp_path / "flat").delete("value = 1")
    assert plan_changes(tmp_path / "flat", (), 0, 1).mode == "swap"  # a removed file of an unpartitioned table
    assert plan_changes(tmp_path / "flat", (), NO_VERSION, 1).mode == "swap"  # never copied
    (tmp_path / "flat" / "_delta_log" / f"{1:020d}.json").rename(tmp_path / "gone.json")
    assert plan_changes(tmp_path / "flat", (), 0, 1).mode == "swap"  # the log was cleaned up


def test_rows_are_arranged_as_the_replica_columns_with_maps_as_json():
    batch = pa.table({
        "event_id": ["e1"],
        "parameters": pa.array([[("b", "2"), ("a", "1")]], pa.map_(pa.string(), pa.string())),
    })  # fmt: skip
    ready = copy_ready(batch, "silver.entity_change_events", {"event_date": "2026-01-01"})
    assert ready.column_names[:7] == ["event_id", "entity_urn", "entity_type", "category", "operation", "modifier", "parameters"]
    row = ready.to_pylist()[0]
    assert row["parameters"] == '{"a": "1", "b": "2"}'
    assert row["event_date"] == "2026-01-01" and row["entity_urn"] is None
