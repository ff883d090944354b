"""Table creation and registration: declared properties on new and existing tables."""

from __future__ import annotations

import dataclasses

from conf.tables import TABLES, schema_name, table_location, table_name, table_spec
from pipelines.runtime.catalog import create_table_sql, missing_properties
from pipelines.runtime.maintenance import maintenance_for
from tests.conftest import delta_log_actions, make_settings, register_fresh_tables

STATE = "silver.aspect_state"
DELETION_VECTORS = ("delta.enableDeletionVectors", "true")


def _log_configuration(settings) -> dict[str, str]:
    """The table configuration of the newest metaData action in the state table's Delta log."""
    configuration: dict[str, str] = {}
    for action in delta_log_actions(table_location(settings, STATE)):
        configuration = action.get("metaData", {}).get("configuration", configuration)
    return configuration


def test_declared_properties_are_in_the_create_statement(tmp_path):
    settings = make_settings(tmp_path)
    managed = dataclasses.replace(settings, catalog=dataclasses.replace(settings.catalog, managed_tables=True))
    for statement in (create_table_sql(settings, table_spec(STATE)), create_table_sql(managed, table_spec(STATE))):
        assert "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')" in statement
    assert "TBLPROPERTIES" not in create_table_sql(settings, table_spec("silver.skipped_snapshots"))


def test_a_new_table_is_created_with_its_properties(spark, tmp_path):
    settings = make_settings(tmp_path / "new")
    register_fresh_tables(spark, settings)
    assert _log_configuration(settings).get(DELETION_VECTORS[0]) == "true"
    assert missing_properties(spark, settings, table_spec(STATE)) == ()


def test_an_existing_table_without_the_properties_is_brought_up_to_them(spark, tmp_path):
    settings = make_settings(tmp_path / "old")
    location = table_location(settings, STATE)
    spark.sql(f"CREATE TABLE older_state ({table_spec(STATE).columns}) USING delta LOCATION '{location}'")
    spark.sql("DROP TABLE older_state")
    commits = sorted((location / "_delta_log").glob("*.json"))
    assert commits and DELETION_VECTORS[0] not in _log_configuration(settings)

    register_fresh_tables(spark, settings)
    # The table kept its log and gained a commit that sets the properties.
    assert sorted((location / "_delta_log").glob("*.json"))[: len(commits)] == commits
    assert len(sorted((location / "_delta_log").glob("*.json"))) == len(commits) + 1
    assert _log_configuration(settings).get(DELETION_VECTORS[0]) == "true"
    assert missing_properties(spark, settings, table_spec(STATE)) == ()
    # Set once: the next registration finds it and commits nothing.
    register_fresh_tables(spark, settings)
    assert len(sorted((location / "_delta_log").glob("*.json"))) == len(commits) + 1


def _commit_counts(settings) -> dict[str, int]:
    """The number of JSON commits in the Delta log of every declared table."""
    return {key: len(list((table_location(settings, key) / "_delta_log").glob("*.json"))) for key in TABLES}


def test_registering_existing_tables_again_commits_nothing(spark, tmp_path):
    # Each session registers the tables afresh (the embedded catalog lives in memory); a table that
    # already has its declared properties must not get another ALTER TABLE commit for them.
    settings = make_settings(tmp_path / "again")
    register_fresh_tables(spark, settings)
    first = _commit_counts(settings)
    assert any(TABLES[key].properties for key in first) and all(first.values())

    register_fresh_tables(spark, settings)
    register_fresh_tables(spark, settings)
    assert _commit_counts(settings) == first
    assert missing_properties(spark, settings, table_spec(STATE)) == ()


def test_another_value_of_a_declared_property_counts_as_missing(spark, tmp_path):
    settings = make_settings(tmp_path / "other")
    location = table_location(settings, STATE)
    spark.sql(
        f"CREATE TABLE older_state_other ({table_spec(STATE).columns}) USING delta LOCATION '{location}' "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')"
    )
    spark.sql("DROP TABLE older_state_other")
    assert _log_configuration(settings).get(DELETION_VECTORS[0]) == "false"

    register_fresh_tables(spark, settings)
    assert _log_configuration(settings).get(DELETION_VECTORS[0]) == "true"


def test_catalog_managed_tables_read_their_properties_with_show_tblproperties(classic_spark, tmp_path):
    # JVM Spark here has no Delta; SHOW TBLPROPERTIES reports a parquet table's properties the same way.
    base = make_settings(tmp_path / "spark")
    settings = dataclasses.replace(
        base,
        engine=dataclasses.replace(base.engine, kind="classic"),
        catalog=dataclasses.replace(base.catalog, managed_tables=True),
    )
    spec = table_spec(STATE)
    name = table_name(settings, STATE)
    # Explicit locations keep the JVM server's warehouse out of the working directory.
    classic_spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema_name(settings, spec.layer)} LOCATION '{tmp_path / 'db'}'")
    classic_spark.sql(f"DROP TABLE IF EXISTS {name}")
    try:
        classic_spark.sql(
            f"CREATE TABLE {name} (entity_urn STRING) USING parquet LOCATION '{tmp_path / 't'}' "
            "TBLPROPERTIES ('k' = 'a,b')"
        )
        assert missing_properties(classic_spark, settings, spec) == (DELETION_VECTORS,)
        classic_spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        assert maintenance_for(settings, classic_spark).configuration(spec.key)["k"] == "a,b"
        assert missing_properties(classic_spark, settings, spec) == ()
    finally:
        classic_spark.sql(f"DROP TABLE IF EXISTS {name}")
