"""`lakehouse sql-server` with real clients: psycopg, SQLAlchemy's inspector, psql, the PostgreSQL JDBC driver.

The package's server (conftest.py): half of the shared DataHub fixture's entities published and copied;
the other half is published here as a new batch with bi.sync_on_publish set, and the replica must show it at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import psycopg
import psycopg.conninfo
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from conf.settings import Settings
from conf.tables import table_location, table_spec
from pipelines.orchestration.jobs import run_job
from pipelines.bi.replica import replica_column_names, replicated_tables
from pipelines.runtime.views import load_views
from tests.conftest import register_fresh_tables
from tests.pipelines.bi.conftest import JDBC_JAR, PASSWORD, overrides, reader_conninfo
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow


def _normalized(value):
    if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {k: v for k, v in value}  # an Arrow map
    if isinstance(value, float | Decimal):
        return float(value)
    return value


def _delta_rows(settings: Settings, table_key: str) -> list[tuple]:
    table = DeltaTable(str(table_location(settings, table_key)))
    columns = list(table_spec(table_key).column_names)
    rows = pa.RecordBatchReader.from_stream(table.scan(columns=columns)).read_all().to_pylist()
    return sorted((tuple(_normalized(r[c]) for c in columns) for r in rows), key=repr)


def _replica_rows(port: int, table_key: str) -> list[tuple]:
    spec = table_spec(table_key)
    names = ", ".join(f'"{c}"' for c in spec.column_names)
    with psycopg.connect(reader_conninfo(port)) as conn:
        rows = conn.execute(f"SELECT {names} FROM {spec.layer}.{spec.name}").fetchall()
    return sorted((tuple(_normalized(v) for v in row) for row in rows), key=repr)


def _assert_replica_equals_delta(settings: Settings, port: int) -> None:
    with psycopg.connect(reader_conninfo(port)) as conn:
        recorded = dict(conn.execute("SELECT table_key, rows FROM lakehouse_sync.table_versions").fetchall())
    for key in replicated_tables():
        delta, replica_rows = _delta_rows(settings, key), _replica_rows(port, key)
        assert replica_rows == delta, f"{key}: replica {len(replica_rows)} rows, Delta {len(delta)}"
        assert recorded[key] == len(delta), f"{key}: the sync state counts {recorded[key]} rows"


def test_psycopg_reads_equal_delta_rs_reads_of_every_replicated_table(replica):
    settings, port, _ = replica
    assert _delta_rows(settings, "gold.audit_events"), "the fixture published audit events"
    _assert_replica_equals_delta(settings, port)


def test_maps_are_jsonb_and_timestamps_timestamptz(replica):
    _, port, _ = replica
    with psycopg.connect(reader_conninfo(port)) as conn:
        types = dict(conn.execute(
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema IN ('gold', 'silver')"
        ).fetchall())  # fmt: skip
        parameters = conn.execute(
            "SELECT parameters FROM silver.entity_change_events WHERE parameters IS NOT NULL LIMIT 1"
        ).fetchone()[0]
    assert types["entity_change_events.parameters"] == "jsonb"
    assert isinstance(parameters, dict) and parameters
    assert types["aspect_state.updated_at"] == "timestamp with time zone"
    assert types["audit_events.event_date"] == "date"
    assert types["openmetadata_change_events.current_version"] == "numeric"


def test_epoch_millisecond_columns_have_a_timestamptz_beside_them(replica):
    from datetime import datetime, timezone

    _, port, _ = replica
    pairs = {
        "gold.audit_events": [("timestamp", "event_time")],
        "gold.openmetadata_change_events": [("timestamp", "event_time")],
        "gold.actor_activity_daily": [("first_event_time", "first_event_at"), ("last_event_time", "last_event_at")],
        "gold.actor_anomalies": [("window_start", "window_start_at"), ("window_end", "window_end_at")],
        "silver.entity_change_events": [("event_time", "event_at")],
    }
    with psycopg.connect(reader_conninfo(port)) as conn:
        for table, columns in pairs.items():
            for millis, stamp in columns:
                rows = conn.execute(f'SELECT "{millis}", "{stamp}" FROM {table}').fetchall()
                for ms, at in rows:
                    assert at == (None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)), (table, ms, at)
                assert rows or table == "gold.actor_anomalies", table
        kinds = dict(conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'gold' AND table_name = 'audit_events'"
        ).fetchall())  # fmt: skip
    assert kinds["event_time"] == "timestamp with time zone" and kinds["timestamp"] == "bigint"


def test_every_gold_view_runs_and_counts_what_the_spark_view_counts(spark, replica):
    settings, port, _ = replica
    register_fresh_tables(spark, settings)
    with psycopg.connect(reader_conninfo(port)) as conn:
        for view in load_views():
            replica_count = conn.execute(f"SELECT count(*) FROM gold.{view.name}").fetchone()[0]
            assert replica_count == spark.sql(f"SELECT * FROM gold.{view.name}").count(), view.name


def test_the_lineage_graph_as_of_a_time_reads_as_in_spark(spark, replica, tmp_path):
    from tests.silver.bronze_rows import mcl

    settings, port, _ = replica
    a, b = (f"urn:li:dataset:(urn:li:dataPlatform:hive,bi_lineage.{n},PROD)" for n in ("a", "b"))
    chart, day = "urn:li:chart:(looker,bi_lineage)", 1_709_251_200_000  # 2024-03-01
    lineage = tmp_path / "lineage.jsonl"
    lineage.write_text("".join(json.dumps(r) + "\n" for r in [
        mcl(b, "upstreamLineage", {"upstreams": [{"dataset": a}]}, version=1, time=day + 1_000),
        mcl(chart, "chartInfo", {"title": "t", "inputs": [{"string": b}]}, version=1, time=day + 1_000),
        mcl(b, "upstreamLineage", {"upstreams": []}, version=2, time=day + 5_000),
    ]))  # fmt: skip
    register_fresh_tables(spark, settings)
    run_job(settings, paths=[lineage], spark=spark)  # publish syncs the replica before it returns
    columns = "upstream_urn, downstream_urn, edge_kind, added_by, valid_from_time, valid_to_time, is_current"
    as_of = "WHERE valid_from <= {t} AND (valid_to IS NULL OR valid_to > {t})"
    in_spark = sorted(tuple(r) for r in spark.sql(f"SELECT {columns} FROM gold.lineage_graph").collect())
    spark_as_of = sorted(tuple(r) for r in spark.sql(
        "SELECT upstream_urn, downstream_urn FROM gold.lineage_graph " + as_of.format(t=f"timestamp_millis({day + 3_000})")
    ).collect())  # fmt: skip
    assert spark_as_of == [(a, b), (b, chart)]
    with psycopg.connect(reader_conninfo(port)) as conn:
        assert sorted(conn.execute(f"SELECT {columns} FROM gold.lineage_graph").fetchall()) == in_spark
        replica_as_of = conn.execute(
            "SELECT upstream_urn, downstream_urn FROM gold.lineage_graph " + as_of.format(t="to_timestamp(%s / 1000.0)"),
            (day + 3_000, day + 3_000),
        ).fetchall()
    assert sorted(replica_as_of) == spark_as_of


def test_sqlalchemy_inspector_lists_schemas_tables_views_and_columns(replica):
    import sqlalchemy

    _, port, _ = replica
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://bi_reader:{PASSWORD}@127.0.0.1:{port}/lakehouse")
    try:
        inspector = sqlalchemy.inspect(engine)
        assert {"gold", "silver"} <= set(inspector.get_schema_names())
        assert set(inspector.get_table_names(schema="gold")) == {
            "audit_events", "actor_activity_daily", "openmetadata_change_events", "actor_anomalies", "lineage_edges"
        }  # fmt: skip
        assert set(inspector.get_view_names(schema="gold")) == {v.name for v in load_views()}
        columns = [c["name"] for c in inspector.get_columns("audit_events", schema="gold")]
        assert columns == list(replica_column_names("gold.audit_events"))
        view_columns = {c["name"] for c in inspector.get_columns("actor_summary", schema="gold")}
        assert {"actor_urn", "events_total", "active_days"} <= view_columns
    finally:
        engine.dispose()


def test_psql_lists_the_gold_views(replica):
    _, port, _ = replica
    result = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "bi_reader", "-d", "lakehouse", "-c", r"\dv gold.*"],
        env={**os.environ, "PGPASSWORD": PASSWORD}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for view in load_views():
        assert f" gold   | {view.name} " in result.stdout


def test_the_jdbc_driver_lists_tables_and_columns_and_runs_a_prepared_statement(replica, tmp_path):
    _, port, _ = replica
    shutil.copy(Path(__file__).with_name("JdbcProbe.java"), tmp_path / "JdbcProbe.java")
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "JdbcProbe.java")], check=True, timeout=120)
    with psycopg.connect(reader_conninfo(port)) as conn:
        actor, expected = conn.execute(
            "SELECT actor_urn, count(*) FROM gold.audit_events GROUP BY actor_urn ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()  # fmt: skip
    probe = subprocess.run(
        ["java", "-cp", f"{JDBC_JAR}:{tmp_path}", "JdbcProbe", f"jdbc:postgresql://127.0.0.1:{port}/lakehouse",
         "bi_reader", PASSWORD, "gold", "audit_events", actor],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert "table audit_events TABLE" in lines
    assert {f"table {v.name} VIEW" for v in load_views()} <= set(lines)
    assert [line.split()[1] for line in lines if line.startswith("column ")] == list(replica_column_names("gold.audit_events"))
    assert "column timestamp int8" in lines and "column event_date date" in lines and "column event_time timestamptz" in lines
    assert lines[-1] == f"count {expected}" and expected > 0


def test_a_wrong_password_is_refused(replica):
    _, port, _ = replica
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(reader_conninfo(port, password="not-the-password")).close()


def test_with_a_certificate_logins_use_tls_and_plain_ones_are_refused(replica):
    _, port, _ = replica
    with psycopg.connect(reader_conninfo(port)) as conn:
        assert conn.pgconn.ssl_in_use
    with pytest.raises(psycopg.OperationalError, match="no pg_hba.conf entry|no encryption"):
        psycopg.connect(reader_conninfo(port) + " sslmode=disable").close()


def test_postgresql_runs_without_the_callers_secrets_in_its_environment(replica):
    settings, _, _ = replica
    pid = json.loads(settings.secret_path("bi/server.json").read_text())["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert any(v.startswith(b"PATH=") for v in environ)
    assert not [v for v in environ if v.startswith(b"LAKEHOUSE_") or PASSWORD.encode() in v]


def test_the_server_log_is_private_and_holds_no_statement_nor_its_values(replica):
    import time

    settings, port, _ = replica
    with psycopg.connect(reader_conninfo(port), autocommit=True) as conn:
        with pytest.raises(psycopg.Error):
            conn.execute("ALTER ROLE lakehouse_admin PASSWORD 'never-logged-secret-1'")
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT 'never-logged-secret-2'::int")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(reader_conninfo(port, password="never-logged-secret-3")).close()
    log = settings.secret_path("bi/postgres.log")
    time.sleep(0.5)
    text = log.read_text()
    assert "password authentication failed" in text  # the server's own events are still logged
    assert "never-logged-secret" not in text
    assert log.stat().st_mode & 0o777 == 0o600


def test_bi_reader_cannot_write(replica):
    _, port, _ = replica
    with psycopg.connect(reader_conninfo(port)) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO gold.audit_events (event_id) VALUES ('forged')")
    with psycopg.connect(reader_conninfo(port)) as conn:
        # Even a transaction it sets to read-write may not touch the tables: SELECT is all it was granted.
        conn.execute("SET TRANSACTION READ WRITE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM gold.audit_events")


def test_a_new_batch_is_in_the_replica_when_publish_returns(spark, replica):
    settings, port, second = replica
    before = len(_replica_rows(port, "gold.audit_events"))
    register_fresh_tables(spark, settings)
    summary = run_job(settings, paths=[second], spark=spark)
    publish = next(s for s in summary.stages if s.stage == "publish")
    assert publish.metrics.get("sync_bi_replica.rows_out", 0) > 0
    after = _replica_rows(port, "gold.audit_events")
    assert len(after) > before
    _assert_replica_equals_delta(settings, port)
    with psycopg.connect(reader_conninfo(port)) as conn:
        modes = dict(conn.execute("SELECT table_key, mode FROM lakehouse_sync.table_versions").fetchall())
    # Copied incrementally: appended rows, or the days publish recomputed; never the whole table again.
    assert modes["gold.audit_events"] == "append"
    assert modes["gold.actor_activity_daily"] in ("partitions", "append")


def test_status_shows_the_replica_versions_and_lag(replica):
    settings, port, _ = replica
    cli_overrides = [a for o in overrides(port) for a in ("--set", o)]
    status = json.loads(run_cli(*cli_overrides, "status", "--json", home=settings.home).stdout)["sql_server"]
    assert status["available"] is True
    tables = {t["table"]: t for t in status["tables"]}
    assert set(tables) == set(replicated_tables())
    audit = tables["gold.audit_events"]
    assert audit["replica_version"] == DeltaTable(str(table_location(settings, "gold.audit_events"))).version()
    assert audit["versions_behind"] == 0 and audit["lag_seconds"] == 0


def test_a_rewritten_day_is_copied_again_and_a_compaction_copies_nothing(replica):
    from deltalake import write_deltalake

    from pipelines.bi.sync import sync_replica

    settings, port, _ = replica
    location = str(table_location(settings, "gold.actor_activity_daily"))
    day = min(r["activity_date"] for r in DeltaTable(location).to_pyarrow_table(columns=["activity_date"]).to_pylist())
    rows = DeltaTable(location).to_pyarrow_table(filters=[("activity_date", "=", day)])
    rows = rows.set_column(rows.schema.get_field_index("events_total"), "events_total",
                           pa.compute.add(rows.column("events_total"), 1000))  # fmt: skip
    write_deltalake(location, rows, mode="overwrite", predicate=f"activity_date = '{day.isoformat()}'")
    synced = {r.table_key: r for r in sync_replica(settings)}
    assert synced["gold.actor_activity_daily"].mode == "partitions"
    assert synced["gold.actor_activity_daily"].rows == rows.num_rows
    assert synced["gold.audit_events"].mode == "none"
    DeltaTable(location).optimize.compact()
    assert {r.table_key: r.mode for r in sync_replica(settings)}["gold.actor_activity_daily"] == "none"
    _assert_replica_equals_delta(settings, port)


def test_the_anomalies_view_reads_timestamps_and_json_features_as_spark_does(spark, replica):
    from datetime import datetime, timezone

    from deltalake import write_deltalake

    from pipelines.bi.sync import sync_replica

    settings, port, _ = replica
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start_ms = int(now.timestamp() * 1000) - 3_600_000
    features = '[{"feature": "events", "value": 42.5, "baseline": 3.0, "deviation": 9.1}]'
    row = {"actor": "urn:li:corpuser:odd", "granularity": "hour", "window_start": start_ms, "window_end": start_ms + 3_600_000,
           "score": 2.5, "kind": "burst", "peer_scored": False, "top_features": features, "model_name": "m",
           "model_version": "1", "scored_at": now, "window_date": now.date()}  # fmt: skip
    location = table_location(settings, "gold.actor_anomalies")
    write_deltalake(str(location), pa.Table.from_pylist([row], schema=pa.schema(DeltaTable(str(location)).schema().to_arrow())), mode="append")
    sync_replica(settings)
    register_fresh_tables(spark, settings)
    expected = [tuple(r) for r in spark.sql("SELECT * FROM gold.actor_anomalies_recent").collect()]
    with psycopg.connect(reader_conninfo(port)) as conn:
        got = conn.execute("SELECT * FROM gold.actor_anomalies_recent").fetchall()
    assert len(got) == len(expected) == 1
    assert got[0][1:3] == ("urn:li:corpuser:odd", "hour")
    assert got[0][3] == datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc)
    assert got[0][8:11] == ("events", 42.5, 3.0) == tuple(expected[0][8:11])


def test_a_replica_table_with_other_columns_than_declared_is_copied_again(replica):
    from pipelines.bi.cluster import writer_conninfo
    from pipelines.bi.sync import sync_replica

    settings, port, _ = replica
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        # As a replica made before the column was declared would be.
        conn.execute("ALTER TABLE gold.openmetadata_change_events DROP COLUMN entity")
    synced = {r.table_key: r for r in sync_replica(settings)}
    assert synced["gold.openmetadata_change_events"].mode == "swap"
    assert synced["gold.audit_events"].mode == "none"
    _assert_replica_equals_delta(settings, port)


def test_an_existing_postgresql_given_by_dsn_is_prepared_and_synced(replica):
    import dataclasses

    from pipelines.bi.cluster import writer_conninfo
    from pipelines.bi.server import prepare_replica

    settings, port, _ = replica
    admin = writer_conninfo(settings)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS managed_elsewhere")
        conn.execute("CREATE DATABASE managed_elsewhere")
    dsn = psycopg.conninfo.make_conninfo(admin, dbname="managed_elsewhere")
    elsewhere = dataclasses.replace(settings, bi=dataclasses.replace(settings.bi, dsn=dsn))
    synced = prepare_replica(elsewhere, password=None)  # bi_reader exists on that server: its password stays
    assert {r.mode for r in synced} == {"swap"}
    reader = psycopg.conninfo.make_conninfo(reader_conninfo(port), dbname="managed_elsewhere")
    with psycopg.connect(reader) as conn:
        count = conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
        views = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.views WHERE table_schema = 'gold'")}
    assert count == len(_delta_rows(settings, "gold.audit_events"))
    assert views == {v.name for v in load_views()}
