"""`backfill` from a real PostgreSQL and a real MariaDB holding DataHub's tables, written as DataHub writes them."""

from __future__ import annotations

import json
import signal

import pytest

from conf.errors import SourceUnavailable
from conf.settings import load_settings
from pipelines.batch.backfill import committed_mark, run_backfill
from pipelines.orchestration.jobs import run_job
from pipelines.runtime.io import read_table
from tests.conftest import FIXTURES, register_fresh_tables
from tests.pipelines.batch.backfill.conftest import ENGINES, clear, upsert_history, write_history, write_version
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow

EVENT_COLUMNS = ("entity_urn", "category", "operation", "modifier", "parameters", "actor", "event_time", "version",
                 "aspect_name", "old_value", "new_value")  # fmt: skip


def backfill_settings(home, database, monkeypatch, **extra):
    """Settings that read `database` as its read-only user, the password in the environment."""
    monkeypatch.setenv("LAKEHOUSE_BACKFILL_PASSWORD", database.reader_password)
    overrides = ["mlflow.enabled=false", *database.settings_overrides(), *[f"{k}={v}" for k, v in extra.items()]]
    return load_settings("local", home=home, env={}, overrides=overrides)


def events(spark, settings) -> list[str]:
    rows = read_table(spark, settings, "silver.entity_change_events").select(*EVENT_COLUMNS).collect()
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in rows)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The shared fixture's history without the entities it deletes (DataHub's rows keep no deleted aspect)."""
    lines = upsert_history(FIXTURES / "history-small.mcl.jsonl")
    path = tmp_path_factory.mktemp("mcl") / "history.mcl.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return lines, path


@pytest.fixture(scope="module")
def from_files(spark, history, tmp_path_factory):
    """The change events of the history landed as MCL files."""
    lines, path = history
    settings = load_settings("local", home=tmp_path_factory.mktemp("from-files"), env={},
                             overrides=["mlflow.enabled=false"])  # fmt: skip
    register_fresh_tables(spark, settings)
    run_job(settings, ("land", "refine"), paths=[path], spark=spark)
    return events(spark, settings)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_history_in_datahubs_tables_gives_the_events_of_its_mcl_files(spark, databases, history, from_files,
                                                                         engine, tmp_path, monkeypatch):  # fmt: skip
    database = databases[engine]
    clear(database)
    write_history(database, history[0])
    settings = backfill_settings(tmp_path, database, monkeypatch, **{"ingest.backfill.window_rows": 100})
    register_fresh_tables(spark, settings)
    report = run_backfill(spark, settings)
    assert report.versions_read == len(history[0])
    assert len(report.windows) > 1, "the history should span several windows"
    assert report.totals["records_quarantined"] == 0
    run_job(settings, ("refine",), spark=spark)
    assert from_files, "the MCL files gave no events"
    assert events(spark, settings) == from_files
    sources = {r.source_file for r in read_table(spark, settings, "bronze.aspect_snapshots").select("source_file").collect()}
    assert all(s.startswith(f"{database.engine}://127.0.0.1:{database.port}/datahub/metadata_aspect_v2#createdon=")
               for s in sources)  # fmt: skip
    # Run again: nothing after the mark, nothing landed twice.
    again = run_backfill(spark, settings)
    assert again.windows == [] and again.resumed_after_us == committed_mark(spark, settings)


@pytest.mark.parametrize("engine", ENGINES)
def test_versions_written_while_the_backfill_runs_are_not_read_by_it(spark, databases, engine, tmp_path, monkeypatch):
    database = databases[engine]
    clear(database)
    urns = [f"urn:li:dataset:(urn:li:dataPlatform:hive,db.t{i},PROD)" for i in range(6)]
    with database.admin_connection() as conn:
        for i, urn in enumerate(urns):
            write_version(conn, engine, urn, "status", '{"removed": false}', None, 1700000000000 + i, "urn:li:corpuser:a")
    settings = backfill_settings(tmp_path, database, monkeypatch, **{"ingest.backfill.window_rows": 2})
    register_fresh_tables(spark, settings)

    def datahub_writes_meanwhile(report, rows) -> None:
        # After the first window: each entity gets a new version 0, its old one moving to version 1.
        if rows == 2:
            with database.admin_connection() as conn:
                for urn in urns:
                    write_version(conn, engine, urn, "status", '{"removed": true}', None, 1800000000000,
                                  "urn:li:corpuser:late")  # fmt: skip

    report = run_backfill(spark, settings, on_window=datahub_writes_meanwhile)
    assert len(report.windows) == 3 and report.totals["records_landed"] == 6
    landed = read_table(spark, settings, "bronze.aspect_snapshots").select("entity_urn", "created_actor").collect()
    assert sorted(tuple(r) for r in landed) == [(urn, "urn:li:corpuser:a") for urn in urns]
    # The next backfill starts after the mark: the later writes, once each.
    again = run_backfill(spark, settings)
    assert again.totals["records_landed"] == 6
    late = read_table(spark, settings, "bronze.aspect_snapshots").filter("created_actor = 'urn:li:corpuser:late'")
    assert late.count() == 6


@pytest.mark.parametrize("engine", ENGINES)
def test_a_row_that_is_not_an_aspect_is_quarantined_naming_urn_aspect_and_version(spark, databases, engine, tmp_path,
                                                                                   monkeypatch):
    database = databases[engine]
    clear(database)
    urn = "urn:li:dataset:(urn:li:dataPlatform:hive,db.broken,PROD)"
    with database.admin_connection() as conn:
        write_version(conn, engine, urn, "status", '{"removed": false}', None, 1700000000000, "urn:li:corpuser:a")
        write_version(conn, engine, urn, "status", '{"removed": tru', None, 1700000001000, "urn:li:corpuser:b")
    settings = backfill_settings(tmp_path, database, monkeypatch)
    register_fresh_tables(spark, settings)
    report = run_backfill(spark, settings)
    assert report.totals == {"records_read": 2, "records_landed": 1, "records_quarantined": 1, "duplicates_skipped": 0}
    (row,) = read_table(spark, settings, "bronze.quarantine").collect()
    assert "aspect.value" in row.reason and "is not valid JSON" in row.reason
    raw = json.loads(row.raw_text)
    assert (raw["entityUrn"], raw["aspectName"], raw["headers"]["version"]) == (urn, "status", "0")
    assert raw["created"] == {"time": 1700000001000, "actor": "urn:li:corpuser:b"}


def test_a_soft_delete_and_its_reinstatement_in_the_table_give_their_lifecycle_events(spark, databases, tmp_path,
                                                                                      monkeypatch):  # fmt: skip
    database = databases["mariadb"]
    clear(database)
    urn = "urn:li:dataset:(urn:li:dataPlatform:hive,db.retired,PROD)"
    writes = [('{"removed": false}', 1700000000000, "urn:li:corpuser:creator"),
              ('{"removed": true}', 1700000100000, "urn:li:corpuser:remover"),
              ('{"removed": false}', 1700000200000, "urn:li:corpuser:restorer")]  # fmt: skip
    with database.admin_connection() as conn:
        for metadata, time_ms, actor in writes:
            write_version(conn, "mariadb", urn, "status", metadata, None, time_ms, actor)
    settings = backfill_settings(tmp_path, database, monkeypatch)
    register_fresh_tables(spark, settings)
    run_backfill(spark, settings)
    run_job(settings, ("refine",), spark=spark)
    lifecycle = (
        read_table(spark, settings, "silver.entity_change_events")
        .filter("category = 'LIFECYCLE'")
        .select("operation", "actor", "event_time")
        .orderBy("event_time")
        .collect()
    )
    assert [tuple(r) for r in lifecycle] == [("SOFT_DELETE", "urn:li:corpuser:remover", 1700000100000),
                                             ("REINSTATE", "urn:li:corpuser:restorer", 1700000200000)]  # fmt: skip


def backfill_args(database) -> list[str]:
    return ["--set", "mlflow.enabled=false", "--set", "ingest.backfill.window_rows=60",
            *[a for o in database.settings_overrides() for a in ("--set", o)], "backfill"]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(spark, databases, history, tmp_path_factory):
    """The tables of one uninterrupted `lakehouse backfill` of the history from PostgreSQL (several windows)."""
    from tests.pipelines.batch.test_crash_resume import table_contents

    database = databases["postgres"]
    clear(database)
    write_history(database, history[0])
    home = tmp_path_factory.mktemp("uninterrupted")
    run_cli(*backfill_args(database), home=home, env={"LAKEHOUSE_BACKFILL_PASSWORD": database.reader_password})
    return table_contents(spark, home)


@pytest.mark.parametrize("point", ["backfill.window_committed", "land.after_data"])
def test_a_backfill_killed_at_a_point_resumes_to_the_same_tables(spark, databases, uninterrupted, point, tmp_path):
    from tests.pipelines.batch.test_crash_resume import table_contents

    database = databases["postgres"]  # still holding the history `uninterrupted` wrote
    env = {"LAKEHOUSE_BACKFILL_PASSWORD": database.reader_password}
    killed = run_cli(*backfill_args(database), home=tmp_path, env={**env, "LAKEHOUSE_CRASH_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL, f"{point} was never reached:\n{killed.stdout}\n{killed.stderr}"
    resumed = run_cli(*backfill_args(database), home=tmp_path, env=env)
    assert "resumed after createdon" in resumed.stdout or point == "land.after_data"
    actual = table_contents(spark, tmp_path)
    assert uninterrupted["bronze.aspect_snapshots"], "the uninterrupted backfill landed nothing"
    for key in uninterrupted:
        if key in ("ops.stage_progress", "ops.audit_chain"):
            continue
        assert actual[key] == uninterrupted[key], f"{key} differs after a crash at {point}"


def test_no_password_is_a_clear_error_without_a_traceback(databases, tmp_path):
    database = databases["mariadb"]
    args = [*[a for o in database.settings_overrides() for a in ("--set", o)], "backfill"]
    result = run_cli(*args, home=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert "LAKEHOUSE_BACKFILL_PASSWORD" in result.stderr and "Traceback" not in result.stderr


# PostgreSQL alone: connectorx's pool retries a refused MariaDB login for 30 s before it reports it.
@pytest.mark.parametrize("engine", ["postgres"])
def test_a_wrong_password_is_a_source_unavailable_that_does_not_show_it(spark, databases, engine, tmp_path,
                                                                         monkeypatch):  # fmt: skip
    database = databases[engine]
    settings = backfill_settings(tmp_path, database, monkeypatch)
    monkeypatch.setenv("LAKEHOUSE_BACKFILL_PASSWORD", "not-the-password")
    register_fresh_tables(spark, settings)
    with pytest.raises(SourceUnavailable) as raised:
        run_backfill(spark, settings)
    assert f"{engine} at 127.0.0.1:{database.port}" in str(raised.value)
    assert "not-the-password" not in str(raised.value)
