"""Every command against a Spark Connect server in another process: Sail's cluster runner on loopback.

The server is `sail spark server` in `local-cluster` mode (a driver and workers exchanging data over the
network, as on Kubernetes), started with the environment `sail_environment` gives; the pipeline runs
with `--profile connect`. Its tables must equal those of the embedded engine on the same input.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from pyspark.sql import SparkSession

from conf.tables import TABLES, table_location
from pipelines.runtime.engine_servers import sail_connect_server
from tests.conftest import FIXTURES, make_settings
from tests.pipelines.batch.test_landing_producers import PRODUCERS
from tests.pipelines.batch.test_crash_resume import chain_shape, table_contents
from tests.pipelines.cli.test_cli import run_cli
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows

pytestmark = pytest.mark.slow

NO_MLFLOW = ("--set", "mlflow.enabled=false")
# Which run consumed a batch differs by design; the chain's digests cover the (per-run) batch ids.
RUN_SPECIFIC = {"ops.stage_progress", "ops.audit_chain"}


@pytest.fixture(scope="module")
def remote_url(tmp_path_factory) -> str:
    settings = make_settings(tmp_path_factory.mktemp("server-settings"))
    with sail_connect_server(settings, mode="local-cluster", workdir=str(tmp_path_factory.mktemp("server-cwd"))) as url:
        yield url


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    landing = tmp_path_factory.mktemp("remote-inputs")
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", landing / "history-small.mcl.jsonl")
    return landing


def remote(url: str) -> tuple[str, ...]:
    return ("--profile", "connect", "--set", f"engine.connect_url={url}", *NO_MLFLOW)


def stages(inputs: Path) -> tuple[tuple[str, ...], ...]:
    return ("land", "--no-progress", str(inputs)), ("refine",), ("publish-audit",), ("publish-openmetadata",)


@pytest.fixture(scope="module")
def embedded_home(inputs, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("embedded")
    for command in stages(inputs):
        run_cli(*NO_MLFLOW, *command, home=home)
    return home


@pytest.fixture(scope="module")
def remote_flow(remote_url, inputs, tmp_path_factory) -> tuple[Path, dict]:
    """land -> refine -> publish -> verify -> search, each its own command against the remote server."""
    home = tmp_path_factory.mktemp("remote")
    for command in (*stages(inputs), ("verify",)):
        run_cli(*remote(remote_url), *command, home=home)
    found = run_cli(*remote(remote_url), "search", "--start-time", "0", "--size", "5", home=home)
    return home, json.loads(found.stdout)


def test_the_remote_flow_fills_the_same_tables_as_the_embedded_run(spark, embedded_home, remote_flow):
    remote_home, _ = remote_flow
    expected = table_contents(spark, embedded_home)
    actual = table_contents(spark, remote_home)
    assert expected["silver.entity_change_events"], "the embedded run derived no events"
    for key in TABLES:
        if key not in RUN_SPECIFIC:
            assert actual[key] == expected[key], f"{key} differs between the remote and the embedded engine"
    assert chain_shape(spark, remote_home) == chain_shape(spark, embedded_home)


def test_the_remote_event_ids_and_counts_match(spark, embedded_home, remote_flow):
    remote_home, _ = remote_flow

    def event_ids(home: Path) -> list[str]:
        df = spark.read.format("delta").load(str(home / "silver" / "entity_change_events"))
        return sorted(r.event_id for r in df.select("event_id").collect())

    assert event_ids(remote_home) == event_ids(embedded_home)
    assert len(event_ids(remote_home)) == 401  # the fixture's 374 snapshots give 401 change events


def test_a_search_against_the_remote_engine_answers_like_the_embedded_one(embedded_home, remote_flow):
    _, found = remote_flow
    embedded = json.loads(run_cli(*NO_MLFLOW, "search", "--start-time", "0", "--size", "5", home=embedded_home).stdout)
    assert found["total"] == embedded["total"] > 0
    assert found["usageEvents"] == embedded["usageEvents"]


def test_a_refine_killed_against_the_remote_engine_resumes_to_the_same_tables(
    spark, remote_url, inputs, embedded_home, tmp_path
):
    run_cli(*remote(remote_url), "land", "--no-progress", str(inputs), home=tmp_path)
    # Between the events MERGE and the state MERGE: the events are committed, the batch is not consumed.
    crash = {"LAKEHOUSE_CRASH_AT": "refine.events_merged"}
    killed = run_cli(*remote(remote_url), "refine", home=tmp_path, env=crash, check=False)
    assert killed.returncode == -signal.SIGKILL, f"the crash point was never reached:\n{killed.stderr}"
    run_cli(*remote(remote_url), "refine", home=tmp_path)
    expected = table_contents(spark, embedded_home)
    actual = table_contents(spark, tmp_path)
    for key in TABLES:
        if key.startswith(("bronze.", "silver.")):
            assert actual[key] == expected[key], f"{key} differs after a kill mid-refine"


def test_the_connect_profile_pairs_versions_on_the_cluster_runner_as_the_embedded_engine_does(spark, remote_url):
    # Sail's cluster runner computes lag(...) IGNORE NULLS as a plain lag once a window spans its workers
    # (the native formulation leaves every predecessor of this batch out there). Later copies of a
    # version, sorted just before its first landed copy, are the nulls the lag must skip.
    from silver.sequencing import to_sequenced_batch
    from silver.state import to_empty_state

    records = [
        mcl(f"urn:li:dataset:(urn:li:dataPlatform:hive,db.t{key},PROD)", "globalTags",
            {"tags": [{"tag": f"urn:li:tag:{name}"}]}, version=version)
        for key in range(1500)
        for name, version in (("a", 1), ("b", 2), ("c", 2), ("d", 2))
    ]  # fmt: skip

    def pairs(session: SparkSession, native_lag: bool) -> list:
        batch_df = bronze_df(session, to_bronze_rows(records, "b1"))
        sequenced_df = to_sequenced_batch(batch_df, to_empty_state(batch_df), native_lag)
        return sorted((r.line_number, r.disposition, r.prev_json) for r in sequenced_df.collect())

    expected = pairs(spark, native_lag=True)
    # Each key's version 2 (first landed as "b", then twice again) has version 1 before it.
    assert sum(1 for _, _, prev in expected if prev is not None) == 1500
    cluster = SparkSession.builder.remote(remote_url).create()
    try:
        assert pairs(cluster, native_lag=False) == expected
    finally:
        cluster.stop()


def landed_snapshots(home: Path) -> list[tuple]:
    """(source kind, line, record hash) of every row of a home's bronze.aspect_snapshots."""
    from deltalake import DeltaTable

    location = table_location(make_settings(home), "bronze.aspect_snapshots")
    rows = DeltaTable(str(location)).to_pyarrow_table(columns=["source_kind", "line_number", "record_hash"]).to_pylist()
    return sorted((r["source_kind"], r["line_number"], r["record_hash"]) for r in rows)


def test_file_sink_and_mce_files_are_converted_on_the_cluster_as_by_the_embedded_engine(remote_url, tmp_path):
    # Their conversion to numbered lines runs in the engine's workers, which import the project's code.
    inputs = tmp_path / "producers"
    inputs.mkdir()
    for name in ("sqlite-run1.file-sink.json", "snapshots.mce.jsonl"):
        shutil.copy(PRODUCERS / name, inputs / name)
    run_cli(*NO_MLFLOW, "land", "--no-progress", str(inputs), home=tmp_path / "embedded")
    run_cli(*remote(remote_url), "land", "--no-progress", str(inputs), home=tmp_path / "remote")
    embedded = landed_snapshots(tmp_path / "embedded")
    assert landed_snapshots(tmp_path / "remote") == embedded
    assert {kind for kind, _, _ in embedded} == {"file-sink", "mce"} and len(embedded) > 6
