"""The table registry: one declaration per table, one function for names."""

from __future__ import annotations

import pytest

from conf.errors import ConfigError
from conf.tables import TABLES, table_spec


def test_registry_declares_every_layer_table():
    assert {
        "bronze.landed_files",
        "bronze.aspect_snapshots",
        "bronze.usage_events",
        "bronze.quarantine",
        "silver.aspect_state",
        "silver.skipped_snapshots",
        "silver.entity_change_events",
        "gold.audit_events",
        "gold.actor_activity_daily",
        "gold.openmetadata_change_events",
        "ops.stage_progress",
    } <= set(TABLES)


def test_column_names_split_nested_types():
    spec = table_spec("silver.entity_change_events")
    assert "parameters" in spec.column_names
    assert spec.column_names[0] == "event_id"
    assert "STRING>" not in " ".join(spec.column_names)


def test_unknown_table_is_named():
    with pytest.raises(ConfigError, match="'silver.nope'"):
        table_spec("silver.nope")


def test_every_table_key_constant_names_a_declared_table():
    import conf.tables

    keys = {name: value for name, value in vars(conf.tables).items()
            if name.isupper() and isinstance(value, str) and value.count(".") == 1}  # fmt: skip
    assert len(keys) >= 21
    assert {name: value for name, value in keys.items() if value not in TABLES} == {}
    assert {name: value.split(".")[1].upper() for name, value in keys.items()} == {name: name for name in keys}
