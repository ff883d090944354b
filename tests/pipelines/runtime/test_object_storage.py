"""A home on object storage: an S3-protocol server (moto) on loopback, the pipeline run against `s3://`."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conf.errors import ConcurrencyError
from conf.locations import ObjectLocation, parse_location
from conf.settings import load_settings
from pipelines.bench.silver_remote import s3_server
from pipelines.bench.processes import mcl_lines, start_watch, stop, wait_for, watch_log_records
from pipelines.runtime.lease import Lease
from pipelines.runtime.lock import run_lock
from pipelines.runtime.storage import Storage
from tests.conftest import FIXTURES, make_settings, register_fresh_tables
from tests.pipelines.cli.test_cli import run_cli

BUCKET = "lakehouse"
INPUT = "history-small.mcl.jsonl"


@dataclasses.dataclass(frozen=True)
class S3Server:
    """A running S3-protocol server and what reaches it."""

    endpoint: str
    env: dict[str, str]

    @property
    def options(self) -> dict[str, str]:
        return dict(self.env)

    def settings(self, home: str, local_dir: Path):
        """Settings of a home on this server: the options given as storage.options, not the environment."""
        # Quoted: YAML reads a bare true as a boolean, and the options are strings.
        overrides = [f"storage.options.{k}='{v}'" for k, v in self.env.items()]
        return load_settings("local", home=home, env={}, overrides=[*overrides, f"storage.local_dir={local_dir}"])


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    """`moto_server` on a free loopback port with one bucket, for the whole module."""
    with s3_server(tmp_path_factory.mktemp("moto"), bucket=BUCKET) as endpoint:
        yield S3Server(endpoint.options["AWS_ENDPOINT_URL"], endpoint.options)


def _put(s3: S3Server, key: str, data: bytes) -> None:
    Storage(s3.options).write_bytes(ObjectLocation("s3", BUCKET, key), data)


def test_an_object_url_stays_a_url_and_joins_like_a_path(tmp_path):
    settings = load_settings("local", home="s3://lakehouse/team/home/", env={})
    assert str(settings.home) == "s3://lakehouse/team/home"
    assert str(settings.home / "_scratch" / "land") == "s3://lakehouse/team/home/_scratch/land"
    from conf.tables import table_location

    assert str(table_location(settings, "gold.audit_events")) == "s3://lakehouse/team/home/gold/audit_events"
    assert [str(p) for p in settings.landing_paths] == ["s3://lakehouse/team/home/landing"]
    # Secrets and the MLflow store stay on a local path, named by storage.local_dir.
    local = load_settings("local", home="s3://b/h", env={}, overrides=[f"storage.local_dir={tmp_path}"])
    assert local.tokens_path == tmp_path / "auth" / "tokens.json"
    assert local.mlflow_tracking_uri == f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert parse_location("relative/x", base=tmp_path) == tmp_path / "relative" / "x"


def test_a_home_with_an_unknown_scheme_is_refused_naming_it():
    from conf.errors import ConfigError

    with pytest.raises(ConfigError, match="home: .*'ftp'"):
        load_settings("local", home="ftp://server/home", env={})


def test_storage_options_come_from_the_environment_unless_settings_name_them(tmp_path):
    from pipelines.runtime.storage import storage_options

    settings = load_settings("local", home=tmp_path, env={}, overrides=["storage.options.AWS_REGION=eu-west-1"])
    environ = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "us-east-1", "HOME": "/root"}
    assert storage_options(settings, environ) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "eu-west-1"}


def test_objects_are_created_once_listed_read_and_replaced_only_if_unchanged(s3):
    storage = Storage(s3.options)
    folder = ObjectLocation("s3", BUCKET, "storage-test")
    lease = folder / "_locks" / "x.lock"
    assert storage.put_if_absent(lease, b"first")
    assert not storage.put_if_absent(lease, b"second")
    assert storage.read_bytes(lease) == b"first"
    stale = storage.stat(lease)
    assert storage.replace_if_unchanged(lease, b"third", stale.version)
    assert not storage.replace_if_unchanged(lease, b"fourth", stale.version)
    assert storage.read_bytes(lease) == b"third"
    with storage.open_write(folder / "a" / "lines.txt") as handle:
        handle.write(b"one\ntwo\n")
    with storage.open_read(folder / "a" / "lines.txt") as handle:
        assert handle.readline() == b"one\n"
        handle.seek(4)
        assert handle.read() == b"two\n"
    assert [f.location.key for f in storage.list_files(folder)] == [
        "storage-test/_locks/x.lock",
        "storage-test/a/lines.txt",
    ]
    assert storage.has_files(folder, ".txt") and not storage.has_files(folder, ".parquet")
    storage.remove_tree(folder)
    assert storage.list_files(folder) == [] and not storage.exists(folder)


@pytest.mark.slow
def test_two_runs_against_one_s3_home_the_second_is_refused_by_the_lease(s3, tmp_path):
    settings = s3.settings(f"s3://{BUCKET}/leased", tmp_path)
    with run_lock(settings, owner="first run") as lease_file:
        holder = json.loads(Storage(s3.options).read_bytes(lease_file))
        assert holder["owner"] == "first run" and holder["pid"] == os.getpid()
        with pytest.raises(ConcurrencyError, match="first run"):
            with run_lock(settings, owner="second run"):
                pass
        second = run_cli("--home", f"s3://{BUCKET}/leased", "--set", f"storage.local_dir={tmp_path}", "run", "--path",
                         str(FIXTURES / INPUT), "--no-progress", env=s3.env, check=False)  # fmt: skip
        assert second.returncode != 0
        assert "another run holds the lock s3://lakehouse/leased/_locks/pipeline.lock" in " ".join(second.stderr.split())
    # Released: the next run takes it.
    assert not Storage(s3.options).exists(lease_file)
    with run_lock(settings, owner="third run"):
        pass


def test_a_lease_not_renewed_within_the_stale_timeout_is_taken_over(s3, tmp_path):
    settings = s3.settings(f"s3://{BUCKET}/stale", tmp_path)
    storage = Storage(s3.options)
    location = parse_location(f"s3://{BUCKET}/stale/_locks/pipeline.lock")
    old = time.time() - settings.locks.stale_after_seconds - 5
    held = Lease(storage, location, {"pid": 1, "host": "another-host", "owner": "gone", "started_at": old})
    assert held.try_acquire(lambda token, stored: False) is None
    with run_lock(settings, owner="new run"):
        assert json.loads(storage.read_bytes(location))["owner"] == "new run"
    # The old holder finds its lease gone and leaves the file alone.
    assert not held.renew()


@pytest.fixture(scope="module")
def local_run(spark, tmp_path_factory):
    """The fixture history run on a local home, in this process: what the S3 home must hold too."""
    from pipelines.orchestration.jobs import run_job

    settings = make_settings(tmp_path_factory.mktemp("local-home"))
    settings = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False))
    register_fresh_tables(spark, settings)
    run_job(settings, paths=[FIXTURES / INPUT], spark=spark, deliver=False)
    return settings


def _s3_table(s3: S3Server, home: str, table: str):
    from deltalake import DeltaTable

    return DeltaTable(f"{home}/{table.replace('.', '/')}", storage_options=s3.options).to_pyarrow_table()


def _cli(s3: S3Server, home: str, local_dir: Path, *args: str, check: bool = True):
    return run_cli("--home", home, "--set", "mlflow.enabled=false", "--set", f"storage.local_dir={local_dir}", *args,
                   env=s3.env, check=check)  # fmt: skip


@pytest.mark.slow
def test_the_pipeline_on_an_s3_home_lands_refines_publishes_verifies_serves_and_watches(spark, s3, local_run, tmp_path):
    from gold.search_request import SearchRequest
    from pipelines.runtime.watch_status import watch_status
    from pipelines.runtime.io import read_table
    from pipelines.serving.engine import open_engine
    from pipelines.serving.scroll_key import local_signer

    home = f"s3://{BUCKET}/flow"
    settings = s3.settings(home, tmp_path)
    _put(s3, f"flow/landing/{INPUT}", (FIXTURES / INPUT).read_bytes())
    # The watcher's first micro-batch runs land -> refine -> publish on what the landing prefixes hold
    # (`run_job`, as `lakehouse run`); then it polls them for new objects. `incoming` holds none yet.
    log = tmp_path / "watch.log"
    watcher = start_watch(home, log, s3.env, f"storage.local_dir={tmp_path}", "watch.poll_interval_seconds=0.3",
                          "watch.max_wait_seconds=0.3", "ingest.landing_dirs=[landing, incoming]")  # fmt: skip
    try:
        wait_for(lambda: [b for b in watch_log_records(log, "micro_batch") if b["files"]], 180, "the first micro-batch")

        # The same event ids and counts as the local run of the same input.
        for table, key in (
            ("silver.entity_change_events", "event_id"),
            ("gold.audit_events", "event_id"),
            ("bronze.aspect_snapshots", "record_hash"),
        ):
            local = sorted(r[key] for r in read_table(spark, local_run, table).select(key).collect())
            remote = sorted(_s3_table(s3, home, table).column(key).to_pylist())
            assert remote == local and remote, table
        assert [r["source_file"] for r in _s3_table(s3, home, "bronze.landed_files").to_pylist()] == [
            f"{home}/landing/{INPUT}"
        ]
        # What the engine staged is found on the object store (and removed once the batch is done).
        assert not Storage(s3.options).has_files(parse_location(f"{home}/_scratch"), ".parquet")

        # The in-process serving engine reads the gold table's Delta log and files on the object store.
        first_page = SearchRequest.parse({"startTime": 0, "size": 3}, None, max_size=100, signer=local_signer(settings))
        found = open_engine(settings).search(first_page)
        assert found["total"] == len(remote_ids := _s3_table(s3, home, "gold.audit_events")) and found["count"] == 3
        assert remote_ids.num_rows == read_table(spark, local_run, "gold.audit_events").count()

        now_ms = int(time.time() * 1000)
        _put(s3, "flow/incoming/new/arrived.mcl.jsonl", "\n".join(mcl_lines("urn:li:corpuser:s3", 2, now_ms, "s3")).encode())
        batch = wait_for(
            lambda: [b for b in watch_log_records(log, "micro_batch") if b["file_names"] == ["arrived.mcl.jsonl"]],
            90,
            "the new object's micro-batch",
        )
        assert batch[0]["records"] == 2
        status = watch_status(settings)
        assert status["running"] and status["batches"] >= 2, status
    finally:
        assert stop(watcher) == 0, log.read_text()[-3000:]
    sources = {r["source_file"] for r in _s3_table(s3, home, "bronze.landed_files").to_pylist()}
    assert sources == {f"{home}/landing/{INPUT}", f"{home}/incoming/new/arrived.mcl.jsonl"}
    assert not Storage(s3.options).exists(parse_location(f"{home}/_locks/watch.lock"))

    verified = _cli(s3, home, tmp_path, "verify")
    assert verified.stdout.startswith("OK:"), verified.stdout


def test_landing_reads_a_gzip_object_and_numbers_its_lines(s3, tmp_path):
    import gzip

    import hashlib

    from pipelines.batch.landing.files import open_text, sha256_of

    text = "".join(f'{{"n": {i}}}\n' for i in range(1000))
    _put(s3, "gz/in.jsonl.gz", gzip.compress(text.encode()))
    _put(s3, "gz/in.jsonl", text.encode())
    from pipelines.runtime.home import home_of

    home_of(s3.settings(f"s3://{BUCKET}/gz", tmp_path))  # resolving a home registers its storage options
    gz = parse_location(f"s3://{BUCKET}/gz/in.jsonl.gz")
    plain = parse_location(f"s3://{BUCKET}/gz/in.jsonl")
    with open_text(gz) as handle:
        assert handle.readline() == '{"n": 0}\n'
        assert 1 + sum(1 for _ in handle) == 1000
    assert sha256_of(plain, block_size=4096) == hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.slow
def test_file_sink_and_mce_objects_land_on_an_s3_home_as_local_files_do(s3, tmp_path):
    from tests.pipelines.batch.test_landing_producers import PRODUCERS
    from tests.pipelines.runtime.test_remote_engine import landed_snapshots

    home = f"s3://{BUCKET}/converted"
    local_inputs = tmp_path / "producers"
    local_inputs.mkdir()
    for name in ("sqlite-run1.file-sink.json", "snapshots.mce.jsonl"):
        _put(s3, f"converted/landing/{name}", (PRODUCERS / name).read_bytes())
        (local_inputs / name).write_bytes((PRODUCERS / name).read_bytes())
    # The engine converts them, reading the objects and writing the numbered copies to the S3 scratch.
    _cli(s3, home, tmp_path, "land", "--no-progress", f"{home}/landing")
    run_cli("--set", "mlflow.enabled=false", "land", "--no-progress", str(local_inputs), home=tmp_path / "local")
    rows = _s3_table(s3, home, "bronze.aspect_snapshots").to_pylist()
    expected = landed_snapshots(tmp_path / "local")
    assert sorted((r["source_kind"], r["line_number"], r["record_hash"]) for r in rows) == expected
    assert {kind for kind, _, _ in expected} == {"file-sink", "mce"}
    assert not Storage(s3.options).has_files(parse_location(f"{home}/_scratch"))


def test_table_exists_answers_for_a_local_path_an_object_location_and_its_url(s3, tmp_path):
    from deltalake import write_deltalake
    import pyarrow as pa

    from pipelines.runtime.storage import table_exists

    rows = pa.table({"n": [1, 2]})
    local = tmp_path / "local_table"
    assert not table_exists(local)
    local.mkdir()
    assert not table_exists(local) and not table_exists(str(local))
    write_deltalake(str(local), rows)
    assert table_exists(local) and table_exists(str(local))
    remote = ObjectLocation("s3", BUCKET, "exists/table")
    Storage(s3.options).write_bytes(remote / "part.txt", b"not a table")
    from pipelines.runtime.storage import register_storage

    register_storage(Storage(s3.options), [remote])
    assert not table_exists(remote) and not table_exists(str(remote))
    write_deltalake(str(remote), rows, storage_options=s3.options)
    assert table_exists(remote) and table_exists(str(remote))
