"""Table maintenance through delta-rs on tables the embedded engine writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from conf.errors import ConfigError, InputError
from conf.tables import table_location, table_name, table_spec
from pipelines.runtime.io import append, merge, read_table
from pipelines.runtime.maintenance import DeltaRsMaintenance, maintenance_for
from tests.conftest import delta_log_actions, make_settings, register_fresh_tables

KEY = "ops.stage_progress"


def _progress_rows(spark, batch: str):
    return spark.createDataFrame(
        [("refine", "bronze.aspect_snapshots", batch, None, 1, 1, "r")],
        "stage string, source_table string, batch_id string, source_version bigint, rows_in bigint, "
        "rows_out bigint, run_id string",
    ).withColumn("processed_at", F.current_timestamp())


@pytest.fixture(scope="module")
def maintained(spark, tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("maintenance"))
    register_fresh_tables(spark, settings)
    for batch in ("b1", "b2", "b3"):
        append(_progress_rows(spark, batch), settings, KEY)
    return settings


def test_local_profile_uses_delta_rs(maintained):
    assert isinstance(maintenance_for(maintained), DeltaRsMaintenance)


def test_catalog_managed_tables_need_a_session(tmp_path: Path):
    from conf.settings import load_settings

    settings = load_settings("databricks", home=tmp_path, env={})
    with pytest.raises(ConfigError, match="needs a session"):
        maintenance_for(settings)


def test_tables_at_paths_use_delta_rs_whatever_the_engine(tmp_path: Path):
    from conf.settings import load_settings

    settings = load_settings("connect", home=tmp_path, env={}, overrides=["engine.connect_url=sc://127.0.0.1:1"])
    assert isinstance(maintenance_for(settings), DeltaRsMaintenance)


def test_history_lists_every_commit_newest_first(maintained):
    maintenance = maintenance_for(maintained)
    commits = maintenance.history(KEY)
    assert [c.version for c in commits] == [3, 2, 1, 0]
    assert maintenance.version(KEY) == 3
    assert all(c.timestamp_ms and c.timestamp_ms > 1_600_000_000_000 for c in commits)


def test_the_version_is_delta_rs_s_after_a_checkpoint_and_further_commits(spark, tmp_path):
    from deltalake import DeltaTable

    settings = make_settings(tmp_path / "home")
    register_fresh_tables(spark, settings)
    location = str(table_location(settings, KEY))
    for batch in ("b1", "b2"):
        append(_progress_rows(spark, batch), settings, KEY)
    DeltaTable(location).create_checkpoint()
    append(_progress_rows(spark, "b3"), settings, KEY)
    # The log holds a checkpoint, _last_checkpoint and the commits: only the commits count.
    assert maintenance_for(settings).version(KEY) == DeltaTable(location).version() == 3


def test_optimize_compacts_files_and_keeps_rows(spark, maintained):
    maintenance = maintenance_for(maintained)
    files_before = _data_files(table_location(maintained, KEY))
    metrics = maintenance.optimize(KEY)
    assert metrics["numFilesRemoved"] == len(files_before) >= 3
    assert metrics["numFilesAdded"] == 1
    assert sorted(r.batch_id for r in read_table(spark, maintained, KEY).collect()) == ["b1", "b2", "b3"]
    assert maintenance.history(KEY, limit=1)[0].operation == "OPTIMIZE"


def test_vacuum_removes_only_unreferenced_files(spark, maintained):
    maintenance = maintenance_for(maintained)
    location = table_location(maintained, KEY)
    before = _data_files(location)
    dry = maintenance.vacuum(KEY, retention_hours=0, dry_run=True)
    assert len(dry) >= 3 and _data_files(location) == before
    removed = maintenance.vacuum(KEY, retention_hours=0)
    assert sorted(removed) == sorted(dry)
    assert len(_data_files(location)) == len(before) - len(removed)
    assert read_table(spark, maintained, KEY).count() == 3


def test_vacuum_with_default_retention_keeps_recent_files(maintained):
    assert maintenance_for(maintained).vacuum(KEY, dry_run=True) == []


def test_bad_arguments_are_named(maintained):
    maintenance = maintenance_for(maintained)
    with pytest.raises(InputError, match="retention_hours: -1"):
        maintenance.vacuum(KEY, retention_hours=-1)
    with pytest.raises(InputError, match=r"zorder_by: \['nope'\]"):
        maintenance.optimize(KEY, zorder_by=("nope",))
    with pytest.raises(ConfigError, match="'ops.nope'"):
        maintenance.version("ops.nope")


def _data_files(location: Path) -> set[str]:
    return {str(p.relative_to(location)) for p in location.rglob("*.parquet")}


def test_optimize_applies_the_deletion_vectors_of_the_state_table(spark, tmp_path):
    settings = make_settings(tmp_path / "dv")
    register_fresh_tables(spark, settings)
    state = "silver.aspect_state"
    spec = table_spec(state)

    def rows(values):
        return spark.createDataFrame(
            [{**{c: None for c in spec.column_names}, "entity_urn": f"urn:{k}", "aspect_name": "a", "aspect_json": v}
             for k, v in values], spec.columns)

    append(rows([(k, "old") for k in range(10)]), settings, state)
    merge(spark, rows([(3, "new")]), lambda s: (
        f"MERGE INTO {table_name(settings, state)} AS t USING {s} AS s ON t.entity_urn = s.entity_urn "
        f"WHEN MATCHED THEN UPDATE SET t.aspect_json = s.aspect_json"), view_name="dv_update")
    location = table_location(settings, state)
    assert any(action.get("add", {}).get("deletionVector") for action in delta_log_actions(location))

    metrics = maintenance_for(settings).optimize(state)
    assert metrics["numFilesRemoved"] == 2 and metrics["numFilesAdded"] == 1
    kept = sorted((r.entity_urn, r.aspect_json) for r in read_table(spark, settings, state).collect())
    assert kept == sorted((f"urn:{k}", "new" if k == 3 else "old") for k in range(10))


def test_optimize_of_small_files_merges_them_and_leaves_the_larger_files_as_they_are(spark, tmp_path):
    settings = make_settings(tmp_path / "small-files")
    register_fresh_tables(spark, settings)
    # Random hex run ids compress poorly: one file of a few MiB.
    large_df = _progress_rows(spark, "large").crossJoin(spark.range(60_000)).withColumn(
        "run_id", F.sha2(F.col("id").cast("string"), 256)
    )
    append(large_df.coalesce(1), settings, KEY)
    location = table_location(settings, KEY)
    large_files = _data_files(location)
    assert len(large_files) == 1 and (location / next(iter(large_files))).stat().st_size > 2**20
    for batch in ("b1", "b2", "b3"):
        append(_progress_rows(spark, batch), settings, KEY)

    metrics = maintenance_for(settings).optimize(KEY, small_file_mb=1)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (3, 1)
    live = DeltaRsMaintenance(settings)._table(KEY).file_uris()
    assert any(uri.endswith(next(iter(large_files))) for uri in live) and len(live) == 2
    assert read_table(spark, settings, KEY).count() == 60_003
    with pytest.raises(InputError, match="small_file_mb: 0 must be at least 1"):
        maintenance_for(settings).optimize(KEY, small_file_mb=0)
