"""Table writes on real Delta tables: columns matched by name, a clear error for missing ones, partial overwrites."""

from __future__ import annotations

import pytest

from conf.errors import InputError
from pipelines.runtime.io import append, read_table, replace_where, sql_string

PROGRESS_COLUMNS = "stage string, source_table string, batch_id string, source_version bigint, rows_in bigint"


def test_append_matches_columns_by_name_and_drops_extra_ones(spark, lakehouse):
    row_df = spark.createDataFrame(
        [(7, "b-io", "refine", "bronze.aspect_snapshots", None, 3, "run-io", "extra")],
        "rows_out bigint, batch_id string, stage string, source_table string, source_version bigint, "
        "rows_in bigint, run_id string, unrelated string",
    ).selectExpr("*", "current_timestamp() AS processed_at")
    append(row_df, lakehouse, "ops.stage_progress")
    rows = read_table(spark, lakehouse, "ops.stage_progress").filter("batch_id = 'b-io'").collect()
    assert [(r.stage, r.rows_in, r.rows_out, r.run_id) for r in rows] == [("refine", 3, 7, "run-io")]


def test_replace_where_replaces_the_matching_rows_and_keeps_the_others(spark, lakehouse):
    # The engine's saveAsTable would overwrite the whole table (test_engine_defects): writes go by location.
    def progress_df(batches: list[str], rows_out: int):
        return spark.createDataFrame(
            [("refine", "bronze.aspect_snapshots", batch, None, 1, rows_out, "run-rw") for batch in batches],
            PROGRESS_COLUMNS + ", rows_out bigint, run_id string",
        ).selectExpr("*", "current_timestamp() AS processed_at")

    append(progress_df(["b-rw-1", "b-rw-2", "b-rw-3"], 1), lakehouse, "ops.stage_progress")
    replace_where(progress_df(["b-rw-2"], 2), lakehouse, "ops.stage_progress", "batch_id = 'b-rw-2'")
    rows = read_table(spark, lakehouse, "ops.stage_progress").filter("run_id = 'run-rw'").collect()
    assert sorted((r.batch_id, r.rows_out) for r in rows) == [("b-rw-1", 1), ("b-rw-2", 2), ("b-rw-3", 1)]


@pytest.mark.parametrize("write", ["append", "replace_where"])
def test_a_write_missing_table_columns_names_them_and_writes_nothing(spark, lakehouse, write):
    before = read_table(spark, lakehouse, "ops.stage_progress").count()
    row_df = spark.createDataFrame([("refine", "bronze.aspect_snapshots", "b-missing", None, 1)], PROGRESS_COLUMNS)
    with pytest.raises(InputError, match=r"missing columns \['rows_out', 'run_id', 'processed_at'\] for table ops.stage_progress"):
        if write == "append":
            append(row_df, lakehouse, "ops.stage_progress")
        else:
            replace_where(row_df, lakehouse, "ops.stage_progress", "batch_id = 'b-missing'")
    assert read_table(spark, lakehouse, "ops.stage_progress").count() == before


@pytest.mark.parametrize("value", ["batch-1", "it's", "back\\slash", "\\'", "", "tab\there"])
def test_a_sql_string_literal_reads_back_as_the_value(spark, value):
    assert spark.sql(f"SELECT {sql_string(value)} AS v").first().v == value
