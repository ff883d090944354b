"""Table creation and registration: declared properties on new and existing tables."""

from __future__ import annotations

import dataclasses

import pytest

from conf.tables import table_location, table_spec
from pipelines.catalog import create_table_sql, missing_properties, shows_property
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
    assert "TBLPROPERTIES" not in create_table_sql(settings, table_spec("silver.entity_change_events"))


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


@pytest.mark.parametrize(
    ("shown", "key", "value", "expected"),
    [
        ("[delta.enableDeletionVectors=true]", "delta.enableDeletionVectors", "true", True),
        ("[comment=a, b, delta.enableDeletionVectors=true]", "delta.enableDeletionVectors", "true", True),
        ("[delta.enableDeletionVectors=false]", "delta.enableDeletionVectors", "true", False),
        ("[my.delta.enableDeletionVectors=true]", "delta.enableDeletionVectors", "true", False),
        ("[comment=delta.enableDeletionVectors=true]", "delta.enableDeletionVectors", "true", False),
        ("[]", "delta.enableDeletionVectors", "true", False),
        # A declared value that holds a comma is found whole, not cut at the comma.
        ("[delta.dataSkippingStatsColumns=a,b, k=v]", "delta.dataSkippingStatsColumns", "a,b", True),
        ("[k=v, delta.dataSkippingStatsColumns=a,b]", "delta.dataSkippingStatsColumns", "a,b", True),
        ("[delta.dataSkippingStatsColumns=a]", "delta.dataSkippingStatsColumns", "a,b", False),
    ],
)
def test_a_property_is_found_whole_in_the_describe_text(shown, key, value, expected):
    assert shows_property(shown, key, value) is expected
