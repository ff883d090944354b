"""The gold SQL views: every file parses as Spark SQL, runs on real tables, and transpiles."""

from __future__ import annotations

import pytest
import sqlglot

from chispa import assert_df_equality

from conf.errors import ConfigError
from conf.tables import TABLES, schema_name, table_spec
from pipelines.runtime.io import append
from pipelines.runtime.views import ViewSpec, create_view_sql, load_views, qualify_select
from tests.conftest import make_settings, register_fresh_tables
from tests.silver.state_log_rows import logged_state
from tests.pipelines.cli.test_cli import run_cli

VIEWS = load_views()


def test_there_are_views_for_bi():
    assert {"change_timeline", "daily_change_counts", "recent_deletes", "actor_summary"} <= {v.name for v in VIEWS}


@pytest.mark.parametrize("view", VIEWS, ids=[v.name for v in VIEWS])
def test_each_view_parses_as_spark_sql_and_reads_only_declared_tables(view: ViewSpec):
    tree = sqlglot.parse_one(view.select_sql, read="spark")
    assert isinstance(tree, sqlglot.exp.Query)
    names = {f"{t.db}.{t.name}" for t in tree.find_all(sqlglot.exp.Table) if t.db}
    assert names and all(n in TABLES or n.startswith("gold.") for n in names)


@pytest.mark.parametrize("view", VIEWS, ids=[v.name for v in VIEWS])
def test_each_view_runs_in_a_session(spark, lakehouse, view: ViewSpec):
    rows = spark.sql(f"SELECT * FROM gold.{view.name}").collect()
    assert rows == []  # the tables are empty; running it proves names and columns resolve


def test_the_current_aspect_state_view_applies_the_log_to_the_state(spark, lakehouse, tmp_path):
    settings = make_settings(tmp_path / "home")
    register_fresh_tables(spark, settings)
    try:
        state_df, log_df, expected_df = logged_state(spark)
        append(state_df, settings, "silver.aspect_state")
        append(log_df, settings, "silver.aspect_state_log")
        current_df = spark.sql(f"SELECT * FROM {schema_name(settings, 'gold')}.current_aspect_state")
        assert current_df.columns == list(table_spec("silver.aspect_state").column_names)
        assert_df_equality(
            current_df.select(*expected_df.columns), expected_df, ignore_row_order=True, ignore_nullable=True
        )
    finally:
        register_fresh_tables(spark, lakehouse)  # the module's other tests read the (empty) module home


def test_views_follow_the_configured_catalog_and_schemas(tmp_path):
    settings = make_settings(tmp_path)
    from conf.settings import load_settings

    settings = load_settings(
        home=tmp_path, env={}, overrides=["catalog.name=main", "catalog.schemas.silver=audit_silver"]
    )
    sql = create_view_sql(settings, next(v for v in VIEWS if v.name == "change_timeline"))
    assert sql.startswith("CREATE OR REPLACE VIEW main.gold.change_timeline AS")
    assert "main.audit_silver.entity_change_events" in sql


def test_a_view_naming_an_undeclared_table_is_refused(tmp_path):
    bad = ViewSpec("bad", "SELECT * FROM silver.not_a_table", tmp_path / "bad.sql")
    with pytest.raises(ConfigError, match="'silver.not_a_table' is not a declared table"):
        qualify_select(make_settings(tmp_path), bad)


@pytest.mark.parametrize("dialect", ["databricks", "duckdb", "trino", "snowflake"])
def test_export_sql_transpiles_every_view(tmp_path, dialect):
    out = tmp_path / dialect
    run_cli("export-sql", "--dialect", dialect, "--out", str(out), home=tmp_path)
    written = {p.stem: p.read_text() for p in out.glob("*.sql")}
    assert set(written) == {v.name for v in VIEWS}
    for text in written.values():
        # Each definition parses back in its own dialect.
        assert sqlglot.parse_one(text.rstrip().rstrip(";"), read=dialect) is not None


def test_export_sql_on_stdout_is_exactly_the_files_text_whatever_the_terminal_width(tmp_path):
    out = tmp_path / "files"
    run_cli("export-sql", "--dialect", "duckdb", "--out", str(out), home=tmp_path)
    printed = run_cli("export-sql", "--dialect", "duckdb", home=tmp_path, env={"COLUMNS": "40"}).stdout
    assert printed == "".join((out / f"{v.name}.sql").read_text() for v in VIEWS)


def test_export_sql_rejects_an_unknown_dialect(tmp_path):
    result = run_cli("export-sql", "--dialect", "cobol", home=tmp_path, check=False)
    assert result.returncode == 1
    assert "--dialect: 'cobol'" in result.stderr
