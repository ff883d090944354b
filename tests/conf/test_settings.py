"""Settings: profiles, overlays, environment and all-at-once validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf.errors import ConfigError
from conf.settings import Settings, available_profiles, load_settings
from conf.tables import TABLES, table_location, table_name


def test_profiles_are_local_connect_classic_and_databricks():
    assert set(available_profiles()) == {"local", "connect", "classic", "databricks"}


def test_local_profile_defaults(tmp_path: Path):
    settings = load_settings(home=tmp_path, env={})
    assert settings.profile == "local"
    assert settings.engine.kind == "local"
    assert settings.home == tmp_path.resolve()
    assert settings.events.owner_category == "OWNER"
    assert settings.ingest.default_actor == "urn:li:corpuser:datahub"
    assert settings.engine.spark_conf["spark.sql.session.timeZone"] == "UTC"


def test_settings_are_frozen(tmp_path: Path):
    settings = load_settings(home=tmp_path, env={})
    with pytest.raises(AttributeError):
        settings.profile = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.engine.spark_conf["x"] = "y"  # type: ignore[index]


def test_home_comes_from_argument_then_yaml_then_environment(tmp_path: Path):
    env = {"LAKEHOUSE_HOME": str(tmp_path / "from-env")}
    assert load_settings(env=env).home == (tmp_path / "from-env").resolve()
    assert load_settings(home=tmp_path / "arg", env=env).home == (tmp_path / "arg").resolve()
    user = tmp_path / "user.yaml"
    user.write_text(f"home: {tmp_path / 'from-yaml'}\n")
    assert load_settings(config_file=user, env=env).home == (tmp_path / "from-yaml").resolve()


def test_profile_from_environment_and_connect_url_from_spark_remote(tmp_path: Path):
    settings = load_settings(home=tmp_path, env={"LAKEHOUSE_PROFILE": "connect", "SPARK_REMOTE": "sc://cluster:15002"})
    assert settings.profile == "connect"
    assert settings.engine.kind == "connect"
    assert settings.engine.connect_url == "sc://cluster:15002"


def test_classic_profile_sets_delta_extensions(tmp_path: Path):
    settings = load_settings("classic", home=tmp_path, env={})
    assert settings.engine.spark_conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert settings.engine.master == "local[2]"


def test_connect_profile_without_url_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="engine.connect_url"):
        load_settings("connect", home=tmp_path, env={})


def test_unknown_profile_names_the_available_ones(tmp_path: Path):
    with pytest.raises(ConfigError, match="'nope'.*classic, connect, databricks, local"):
        load_settings("nope", home=tmp_path, env={})


def test_every_problem_is_reported_at_once(tmp_path: Path):
    user = tmp_path / "bad.yaml"
    user.write_text(
        "engine:\n  kind: quantum\n"
        "retention:\n  vacuum_hours: -5\n"
        "ingest:\n  default_actor: bob\n  max_record_bytes: lots\n"
        "events:\n  owner_category: OWNERS\n"
        "api:\n  port: 70000\n"
        "table_locations:\n  silver.nope: /x\n"
        "colour: blue\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(config_file=user, home=tmp_path, env={})
    problems = caught.value.problems
    text = str(caught.value)
    # Unknown keys and type errors do not hide the value checks of the fields that did parse.
    assert "colour: unknown setting (value 'blue')" in problems
    assert "ingest.max_record_bytes: expected a whole number, got 'lots'" in problems
    for expected in (
        "engine.kind: 'quantum'",
        "retention.vacuum_hours: -5",
        "ingest.default_actor: 'bob'",
        "events.owner_category: 'OWNERS'",
        "api.port: 70000",
        "table_locations.silver.nope",
    ):
        assert expected in text
    assert len(problems) == 8


def test_a_removed_setting_is_named_as_removed_with_the_reason(tmp_path: Path):
    user = tmp_path / "old.yaml"
    user.write_text("retention:\n  vacuum_hours: 24\n  quarantine_days: 90\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_file=user, home=tmp_path, env={})
    assert caught.value.problems == [
        (
            "retention.quarantine_days: this setting was removed (nothing read it: quarantined records are kept "
            "for good); delete it"
        )
    ]


def test_set_syntax_type_and_value_problems_are_reported_together(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        load_settings(
            home=tmp_path,
            env={},
            overrides=["api.port=abc", "engine.kind=foo", "novalue", "events.owner_category=X", "colour=blue"],
        )
    problems = caught.value.problems
    assert "api.port: expected a whole number, got 'abc'" in problems
    assert "--set: 'novalue' is not of the form dotted.key=value" in problems
    assert "colour: unknown setting (value 'blue')" in problems
    assert any(p.startswith("engine.kind: 'foo' is not one of") for p in problems)
    assert any(p.startswith("events.owner_category: 'X' is not one of") for p in problems)
    # A field with a type error gets no second, misleading value problem.
    assert not any(p.startswith("api.port: 8080") for p in problems)
    assert len(problems) == 5


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("engine=5", "engine: expected a mapping (a settings section), got 5"),
        ("engine=[a]", "engine: expected a mapping (a settings section), got ['a']"),
        ("engine=null", "engine: expected a mapping (a settings section), got None"),
        ("mlflow=3", "mlflow: expected a mapping (a settings section), got 3"),
        ("catalog.schemas=silver", "catalog.schemas: expected a mapping (a settings section), got 'silver'"),
        ("table_locations=x", "table_locations: expected a mapping, got 'x'"),
    ],
)
def test_a_section_that_is_not_a_mapping_is_named(tmp_path: Path, override: str, expected: str):
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=[override, "api.port=0"])
    assert expected in caught.value.problems
    assert any(p.startswith("api.port: 0 ") for p in caught.value.problems)


def test_a_null_section_in_a_file_does_not_fall_back_to_the_defaults(tmp_path: Path):
    user = tmp_path / "null.yaml"
    user.write_text("engine: null\n")
    with pytest.raises(ConfigError) as caught:
        load_settings("classic", config_file=user, home=tmp_path, env={})
    assert caught.value.problems == ["engine: expected a mapping (a settings section), got None"]


def test_mlflow_experiment_must_be_named(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["mlflow.experiment=''"])
    assert caught.value.problems == ["mlflow.experiment: '' must name an experiment"]
    with pytest.raises(ConfigError, match="mlflow.experiment: expected a string, got None"):
        load_settings(home=tmp_path, env={}, overrides=["mlflow.experiment="])


def test_databricks_mlflow_experiment_is_an_absolute_workspace_path(tmp_path: Path):
    assert load_settings("databricks", home=tmp_path, env={}).mlflow.experiment == "/Shared/lakehouse"
    custom = load_settings("databricks", home=tmp_path, env={}, overrides=["mlflow.experiment=/Users/me/audit"])
    assert custom.mlflow.experiment == "/Users/me/audit"
    with pytest.raises(ConfigError) as caught:
        load_settings("databricks", home=tmp_path, env={}, overrides=["mlflow.experiment=lakehouse"])
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith("mlflow.experiment: 'lakehouse' is not an absolute workspace path")
    with pytest.raises(ConfigError, match="mlflow.experiment: 'lakehouse' is not an absolute"):
        load_settings(home=tmp_path, env={}, overrides=["mlflow.tracking_uri=databricks"])
    # Elsewhere a plain name is fine.
    assert load_settings(home=tmp_path, env={}).mlflow.experiment == "lakehouse"


def test_config_file_that_is_a_folder_is_named(tmp_path: Path):
    folder = tmp_path / "conf.d"
    folder.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_settings(config_file=folder, home=tmp_path, env={}, overrides=["api.port=0"])
    assert f"{folder}: is a folder, not a config file" in caught.value.problems
    assert len(caught.value.problems) == 2


@pytest.mark.parametrize("variable", ["SPARK_REMOTE", "LAKEHOUSE_CONNECT_URL"])
def test_connect_url_from_the_environment_applies_only_to_the_connect_engine(tmp_path: Path, variable: str):
    for profile in ("local", "classic", "databricks"):
        assert load_settings(profile, home=tmp_path, env={variable: "local"}).engine.connect_url is None
    connect = load_settings("connect", home=tmp_path, env={variable: "sc://h:15002"})
    assert connect.engine.connect_url == "sc://h:15002"
    via_set = load_settings(home=tmp_path, env={variable: "sc://h:1"}, overrides=["engine.kind=connect"])
    assert via_set.engine.connect_url == "sc://h:1"
    with pytest.raises(ConfigError, match="engine.connect_url: 'local' does not start with sc://"):
        load_settings("connect", home=tmp_path, env={variable: "local"})


def test_managed_tables_need_an_engine_with_a_persistent_catalog(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["catalog.managed_tables=true"])
    (problem,) = caught.value.problems
    assert problem.startswith("catalog.managed_tables: True cannot be used with engine.kind local")
    assert "keeps no managed tables across sessions" in problem and "no warehouse dir" in problem
    with pytest.raises(ConfigError, match="engine.kind local"):
        load_settings("databricks", home=tmp_path, env={}, overrides=["engine.kind=local"])
    classic = load_settings("classic", home=tmp_path, env={}, overrides=["catalog.managed_tables=true"])
    assert classic.catalog.managed_tables is True


def test_set_reaches_mapping_keys_that_contain_dots(tmp_path: Path):
    settings = load_settings(
        home=tmp_path,
        env={},
        overrides=[
            "engine.spark_conf.spark.sql.shuffle.partitions=8",
            "engine.spark_conf.spark.sql.ansi.enabled='true'",
            "table_locations.silver.aspect_state=/tmp/x",
        ],
    )
    assert settings.engine.spark_conf["spark.sql.shuffle.partitions"] == "8"
    assert settings.engine.spark_conf["spark.sql.ansi.enabled"] == "true"
    assert settings.engine.spark_conf["spark.sql.session.timeZone"] == "UTC"  # merged, not replaced
    assert dict(settings.table_locations) == {"silver.aspect_state": "/tmp/x"}
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["table_locations.silver.nope=/x"])
    (problem,) = caught.value.problems
    assert problem.startswith("table_locations.silver.nope: unknown table")


def test_yaml_that_is_not_a_mapping(tmp_path: Path):
    user = tmp_path / "list.yaml"
    user.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_settings(config_file=user, home=tmp_path, env={})


def test_missing_config_file_is_named(tmp_path: Path):
    with pytest.raises(ConfigError, match="missing.yaml: config file does not exist"):
        load_settings(config_file=tmp_path / "missing.yaml", home=tmp_path, env={})


def test_ownership_category_is_allowed(tmp_path: Path):
    user = tmp_path / "owner.yaml"
    user.write_text("events:\n  owner_category: OWNERSHIP\n")
    assert load_settings(config_file=user, home=tmp_path, env={}).events.owner_category == "OWNERSHIP"


def test_table_names_follow_catalog_and_schema_settings(tmp_path: Path):
    user = tmp_path / "uc.yaml"
    user.write_text(
        "catalog:\n  name: main\n  schemas:\n    silver: audit_silver\n"
        "table_locations:\n  silver.aspect_state: /data/state\n  gold.audit_events: gold_tables/audit\n"
    )
    settings: Settings = load_settings(config_file=user, home=tmp_path, env={})
    assert table_name(settings, "silver.entity_change_events") == "main.audit_silver.entity_change_events"
    assert table_name(settings, "bronze.quarantine") == "main.bronze.quarantine"
    assert table_location(settings, "silver.aspect_state") == Path("/data/state")
    assert table_location(settings, "gold.audit_events") == tmp_path.resolve() / "gold_tables" / "audit"
    assert table_location(settings, "bronze.quarantine") == tmp_path.resolve() / "bronze" / "quarantine"


def test_every_table_declares_its_partition_columns():
    for spec in TABLES.values():
        assert set(spec.partitioned_by) <= set(spec.column_names), spec.key
        assert len(set(spec.column_names)) == len(spec.column_names), spec.key


def test_overrides_apply_last_and_are_validated(tmp_path: Path):
    settings = load_settings(
        home=tmp_path, env={}, overrides=["catalog.name=main", "retention.vacuum_hours=24", "events.owner_category=OWNERSHIP"]
    )
    assert settings.catalog.name == "main"
    assert settings.retention.vacuum_hours == 24
    assert settings.events.owner_category == "OWNERSHIP"
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["novalue", "api.port=abc"])
    assert "--set: 'novalue' is not of the form dotted.key=value" in caught.value.problems


def test_databricks_profile_keeps_the_cluster_session(tmp_path: Path):
    settings = load_settings("databricks", home=tmp_path, env={}, overrides=["catalog.name=main"])
    assert settings.engine.kind == "classic"
    assert settings.engine.master is None
    assert settings.engine.stop_on_exit is False
    assert settings.catalog.managed_tables is True
    assert settings.mlflow_tracking_uri == "databricks"


def test_parquet_filter_pushdown_is_on_unless_turned_off_and_takes_only_a_boolean(tmp_path: Path):
    assert load_settings(home=tmp_path, env={}).engine.parquet_filter_pushdown is True
    off = load_settings(home=tmp_path, env={}, overrides=["engine.parquet_filter_pushdown=false"])
    assert off.engine.parquet_filter_pushdown is False
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["engine.parquet_filter_pushdown=sometimes"])
    assert "engine.parquet_filter_pushdown: expected true or false, got 'sometimes'" in str(caught.value)


def test_engine_memory_limit_defaults_to_the_local_profile_and_is_validated(tmp_path: Path):
    assert load_settings(home=tmp_path, env={}).engine.memory_limit_mb == 5120
    assert load_settings("connect", home=tmp_path, env={"SPARK_REMOTE": "sc://h:1"}).engine.memory_limit_mb is None
    unlimited = load_settings(home=tmp_path, env={}, overrides=["engine.memory_limit_mb=null"])
    assert unlimited.engine.memory_limit_mb is None
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["engine.memory_limit_mb=100"])
    assert "engine.memory_limit_mb: 100 is below 256" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["engine.memory_limit_mb=lots"])
    assert "engine.memory_limit_mb: expected a whole number, got 'lots'" in str(caught.value)


def test_watch_compaction_interval_is_a_count_of_micro_batches(tmp_path: Path):
    assert load_settings(home=tmp_path, env={}).watch.compact_every_batches == 50
    never = load_settings(home=tmp_path, env={}, overrides=["watch.compact_every_batches=0"])
    assert never.watch.compact_every_batches == 0
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["watch.compact_every_batches=-1"])
    assert "watch.compact_every_batches: -1 must be 0 or more" in caught.value.problems
    assert load_settings(home=tmp_path, env={}).watch.compact_files_below_mb == 32
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["watch.compact_files_below_mb=-5"])
    assert "watch.compact_files_below_mb: -5 must be 0 or more" in caught.value.problems


def test_the_state_log_size_is_a_count_of_rows_and_0_merges_every_batch(tmp_path: Path):
    assert load_settings(home=tmp_path, env={}).refine.state_log_max_rows == 10000
    assert load_settings(home=tmp_path, env={}, overrides=["refine.state_log_max_rows=0"]).refine.state_log_max_rows == 0
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path, env={}, overrides=["refine.state_log_max_rows=-1"])
    assert "refine.state_log_max_rows: -1 must be 0 or more" in caught.value.problems


def test_counts_below_their_least_are_named_with_their_values_all_at_once(tmp_path: Path):
    overrides = ["audit_chain.max_examples=0", "ingest.backfill.window_rows=0", "ingest.kafka.max_records=0",
                 "subscriptions.error_excerpt_chars=0", "anomalies.baseline_days=0", "bi.lock_timeout_ms=0",
                 "serve.version_check_seconds=-1"]  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_settings("local", home=tmp_path, env={}, overrides=overrides)
    assert set(caught.value.problems) == {
        "audit_chain.max_examples: 0 must be at least 1",
        "ingest.backfill.window_rows: 0 must be at least 1",
        "ingest.kafka.max_records: 0 must be at least 1",
        "subscriptions.error_excerpt_chars: 0 must be at least 1",
        "anomalies.baseline_days: 0 must be at least 1",
        "bi.lock_timeout_ms: 0 must be at least 1",
        "serve.version_check_seconds: -1.0 must be at least 0",
    }
