"""Engine sessions: the embedded engine, JVM Spark through Connect, registration across sessions."""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from conf.errors import ConfigError
from conf.settings import load_settings
from conf.tables import TABLES, table_location, table_name
from pipelines.bench.silver_remote import CLUSTER_ENVIRONMENT
from pipelines.runtime.engine import check_reachable, java_message, open_session, sail_environment
from pipelines.runtime.engine_servers import free_loopback_port, sail_connect_server
from pipelines.runtime.io import append, read_table
from tests.conftest import make_settings
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.runtime.test_engine_defects import (
    PAGED_ROWS_ENVIRONMENT,
    PRUNED_SCAN_KEYS,
    SKEWED_ROWS,
    pruned_scan_keys,
    shuffled_skewed_rows,
)


def test_local_session_starts_fast_and_stops_cleanly(tmp_path: Path):
    settings = make_settings(tmp_path)
    threads_before = {t.ident for t in threading.enumerate()}
    started = time.monotonic()
    with open_session(settings) as spark:
        elapsed = time.monotonic() - started
        port = int(spark.client._builder.endpoint.rsplit(":", 1)[1]) if hasattr(spark.client, "_builder") else None
        assert spark.sql("select 1 as one").collect()[0].one == 1
    # Startup (server + every table registered) is a product requirement; generous here, measured in bench.
    assert elapsed < 10
    time.sleep(0.5)
    leaked = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"
    if port:
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, "the embedded server still listens"


def test_every_declared_table_is_created_and_registered(tmp_path: Path):
    settings = make_settings(tmp_path)
    with open_session(settings) as spark:
        for key, spec in TABLES.items():
            df = spark.table(table_name(settings, key))
            assert df.columns == list(spec.column_names), key
            assert df.count() == 0
            assert (table_location(settings, key) / "_delta_log").is_dir(), key


def test_a_table_written_in_one_session_is_read_in_a_fresh_one(tmp_path: Path):
    settings = make_settings(tmp_path)
    with open_session(settings) as spark:
        rows_df = spark.createDataFrame(
            [("refine", "bronze.aspect_snapshots", "b-1", 3, 10, 7, "run-1")],
            "stage string, source_table string, batch_id string, source_version bigint, rows_in bigint, "
            "rows_out bigint, run_id string",
        ).withColumn("processed_at", F.current_timestamp())
        append(rows_df, settings, "ops.stage_progress")
    with open_session(settings) as fresh:
        rows = fresh.sql(f"select batch_id, rows_out from {table_name(settings, 'ops.stage_progress')}").collect()
        assert [(r.batch_id, r.rows_out) for r in rows] == [("b-1", 7)]
        assert read_table(fresh, settings, "ops.stage_progress").count() == 1


@pytest.mark.slow
def test_classic_spark_is_jvm_spark(classic_spark):
    assert classic_spark.conf.get("spark.master") == "local[2]"
    assert classic_spark.range(5).agg(F.sum("id")).collect()[0][0] == 10


def test_the_embedded_engine_runs_a_query_larger_than_its_memory_limit(tmp_path: Path):
    """With a 256 MiB limit, a sort of about 600 MB of strings completes (it spills) in a fresh process."""
    script = (
        "import os, sys\n"
        "from conf.settings import load_settings\n"
        "from pipelines.runtime.engine import open_session\n"
        "from pyspark.sql import functions as F\n"
        f"settings = load_settings('local', home={str(tmp_path)!r}, env={{}}, overrides=['engine.memory_limit_mb=256'])\n"
        "with open_session(settings, register_tables=False) as spark:\n"
        "    assert os.environ['SAIL_RUNTIME__MEMORY_POOL__FAIR__MAX_SIZE'] == str(256 * 2**20)\n"
        "    df = spark.range(3_000_000).select(F.sha2(F.col('id').cast('string'), 512).alias('s'), 'id')\n"
        "    row = df.orderBy('s').select(F.sum(F.length('s')).alias('n')).collect()[0]\n"
        "    first = df.orderBy('s').limit(1).collect()[0]\n"
        "print(row.n, first.s[:8])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[3]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    total, first = done.stdout.split()
    assert int(total) == 3_000_000 * 128
    assert first == min(hashlib.sha512(str(i).encode()).hexdigest() for i in range(3_000_000))[:8]


def test_a_connect_url_nothing_answers_at_is_a_settings_error_naming_it_without_its_token():
    port = free_loopback_port()
    with pytest.raises(ConfigError, match=rf"engine.connect_url: nothing answers at 127.0.0.1:{port} ") as raised:
        check_reachable(f"sc://127.0.0.1:{port}/;token=secret-value", timeout=1)
    assert "secret-value" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"engine.connect_url: 'http://h:1' is not a Spark Connect URL"):
        check_reachable("http://h:1")
    with pytest.raises(ConfigError, match=r"engine.connect_url: 'sc://h:port/' is not a Spark Connect URL") as raised:
        check_reachable("sc://h:port/;token=secret-value")
    assert "secret-value" not in str(raised.value)


def test_a_connect_url_with_a_server_behind_it_passes_the_probe(spark):
    # The session fixture's embedded server is a Spark Connect endpoint on loopback.
    check_reachable(f"sc://{spark.client._builder.endpoint}", timeout=5)


def test_the_cli_reports_an_unreachable_connect_endpoint_at_once(tmp_path: Path):
    port = free_loopback_port()
    started = time.monotonic()
    done = run_cli("--profile", "connect", "tables", home=tmp_path, env={"LAKEHOUSE_CONNECT_URL": f"sc://127.0.0.1:{port}"},
                   check=False)
    # The Connect client alone would retry for minutes; the probe answers within its 10 s.
    assert time.monotonic() - started < 60
    assert done.returncode == 2, done.stderr
    assert f"engine.connect_url: nothing answers at 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_java_message_is_the_jvm_exceptions_own_line():
    py4j_text = (
        "An error occurred while calling o34.sql.\n"
        ": org.apache.spark.SparkException: Cannot find catalog plugin class for catalog 'spark_catalog'.\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.catalogPluginClassNotFoundForCatalogError(X.scala:1)"
    )
    assert java_message(Exception(py4j_text)) == (
        "org.apache.spark.SparkException: Cannot find catalog plugin class for catalog 'spark_catalog'.")
    connect_text = "[TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found.\n\nJVM stacktrace:\norg.apache..."
    assert java_message(Exception(connect_text)) == "[TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found."


@pytest.mark.slow
def test_the_classic_profile_without_the_delta_jars_says_so_in_one_message(tmp_path: Path):
    # pyspark's own jars hold no Delta (the machines cannot download delta-spark's), as on a cluster
    # whose spark-submit forgot --packages.
    done = run_cli("--profile", "classic", "tables", home=tmp_path, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "engine: JVM Spark cannot open its session catalog:" in done.stderr
    assert "DeltaCatalog" in done.stderr and "needs the delta-spark jars" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def hashed_rows(spark, tmp_path_factory) -> str:
    """A Parquet view of 100k (id, s = sha2(id)) rows in id order, so no statistics can rule a hash out."""
    folder = tmp_path_factory.mktemp("hashed") / "rows"
    spark.range(100_000).select("id", F.sha2(F.col("id").cast("string"), 256).alias("s")).write.parquet(str(folder))
    spark.read.parquet(str(folder)).createOrReplaceTempView("hashed_rows")
    return "hashed_rows"


def test_the_embedded_engine_filters_parquet_rows_while_decoding(spark, hashed_rows: str):
    """engine.parquet_filter_pushdown (on by default): the scan itself drops the rows the filter rules out."""
    # No row group's or page's statistics can rule the value out, only the rows can.
    plan = spark.sql(f"EXPLAIN ANALYZE SELECT id FROM {hashed_rows} WHERE s = sha2('7', 256)").collect()[0][0]
    pruned = re.search(r"pushdown_rows_pruned=([\d.]+) ?(K?)", plan)
    assert pruned, plan[-2000:]
    assert float(pruned.group(1)) * (1000 if pruned.group(2) else 1) > 90_000


def test_pushed_down_filters_do_not_use_the_parquet_predicate_cache(spark, hashed_rows: str):
    """The reader's predicate cache fails some scans of pruned pages (arrow-rs #10733): it stays off."""
    # The filter's column is also in the output: what the cache would keep between the two.
    plan = spark.sql(f"EXPLAIN ANALYZE SELECT id, s FROM {hashed_rows} WHERE s >= sha2('7', 256)").collect()[0][0]
    pruned = re.search(r"pushdown_rows_pruned=([\d.]+)", plan)
    cached = re.search(r"predicate_cache_records=([\d.]+)", plan)
    assert pruned and float(pruned.group(1)) > 0, plan[-2000:]
    assert cached and float(cached.group(1)) == 0, plan[-2000:]


def test_the_cluster_runner_is_started_with_batches_its_workers_accept_unless_a_size_is_set(tmp_path):
    settings = make_settings(tmp_path / "home")
    assert "SAIL_EXECUTION__BATCH_SIZE" not in sail_environment(settings)
    for mode in ("local-cluster", "kubernetes-cluster"):
        assert sail_environment(settings, mode)["SAIL_EXECUTION__BATCH_SIZE"] == "512"
    chosen = load_settings("local", home=tmp_path / "chosen", env={}, overrides=["engine.batch_rows=1024"])
    assert sail_environment(chosen)["SAIL_EXECUTION__BATCH_SIZE"] == sail_environment(chosen, "local-cluster")["SAIL_EXECUTION__BATCH_SIZE"] == "1024"
    with pytest.raises(ConfigError, match=r"engine.batch_rows: 10 must be at least 64"):
        load_settings("local", home=tmp_path / "tiny", env={}, overrides=["engine.batch_rows=10"])


@pytest.mark.slow
def test_the_cluster_runner_started_as_the_project_starts_it_shuffles_rows_of_unequal_size(tmp_path):
    """The job Sail's own batch size fails (test_engine_defects) passes in the cluster runner's batches.

    The server gets the environment the benches start their cluster runner with (uncompressed shuffles).
    """
    settings = make_settings(tmp_path / "home")
    with sail_connect_server(settings, mode="local-cluster", workdir=str(tmp_path), environment=CLUSTER_ENVIRONMENT) as url:
        assert shuffled_skewed_rows(url, tmp_path) == SKEWED_ROWS


@pytest.mark.slow
def test_a_pushed_down_scan_of_pruned_pages_is_read_right_by_the_engine_as_the_project_starts_it(tmp_path):
    """The scan the reader's predicate cache fails (test_engine_defects) passes with the sessions' environment."""
    settings = make_settings(tmp_path / "home")
    with sail_connect_server(settings, mode="local", workdir=str(tmp_path), environment=PAGED_ROWS_ENVIRONMENT) as url:
        assert pruned_scan_keys(url, tmp_path / "paged") == PRUNED_SCAN_KEYS
