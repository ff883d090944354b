"""Watch mode as real processes: `lakehouse run --watch` beside `lakehouse serve` on a temporary home."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conf.tables import TABLES
from pipelines.orchestration.watch import Watcher
from pipelines.orchestration.watch_files import is_complete_file
from pipelines.orchestration.watch_process import StopSignal, retry_transient
from pipelines.orchestration.watch_compaction import COMPACTED_TABLES
from pipelines.bench.processes import (
    drop_file,
    free_port,
    http_json,
    mcl_lines,
    search_actor,
    start_serve,
    start_watch,
    stop,
    wait_for,
    watch_log_records,
)
from pipelines.runtime.io import read_table
from pipelines.serving.tokens import create_token
from tests.conftest import FIXTURES, make_settings
from tests.pipelines.batch.test_crash_resume import table_contents
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.orchestration.watchers import in_process_watcher


def _status(home: Path) -> dict:
    return json.loads(run_cli("status", "--json", home=home).stdout)


def test_complete_files_are_finished_names_inside_a_landing_folder(tmp_path):
    root = tmp_path / "landing"
    assert is_complete_file(root / "a.mcl.jsonl", (root,))
    assert is_complete_file(root / "sub" / "b.json", (root,))
    assert not is_complete_file(root / "a.mcl.jsonl.tmp", (root,))
    assert not is_complete_file(root / ".a.mcl.jsonl", (root,))
    assert not is_complete_file(root / "_scratch" / "a.json", (root,))
    assert not is_complete_file(tmp_path / "elsewhere.json", (root,))


def test_an_engine_error_is_retried_and_a_project_error_is_not():
    from conf.errors import InputError

    calls, retries = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("engine went away")
        return "done"

    assert retry_transient(flaky, 5, 0.01, lambda n, exc: retries.append((n, str(exc)))) == "done"
    assert retries == [(1, "engine went away"), (2, "engine went away")]

    def bad_input():
        calls.append(1)
        raise InputError("paths: nope")

    calls.clear()
    with pytest.raises(InputError):
        retry_transient(bad_input, 5, 0.01, lambda n, exc: None)
    assert len(calls) == 1

    def always_down():
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        retry_transient(always_down, 2, 0.01, lambda n, exc: None)


@pytest.mark.slow
def test_a_file_that_arrived_during_a_micro_batch_is_due_by_its_arrival_time(tmp_path):
    # The loop reads arrivals only between micro-batches: a file seen 3 s ago, while one ran, has waited
    # out the 2 s max_wait already and goes into the next micro-batch at once.
    settings = make_settings(tmp_path / "home")
    watcher = Watcher(settings, StopSignal())
    landing = settings.landing_paths[0]
    landing.mkdir(parents=True)
    arrived = landing / "during.mcl.jsonl"
    arrived.write_text("{}\n")
    seen_at = time.time() - 3.0
    watcher.arrivals.put((arrived, seen_at))
    watcher._drain(timeout=0.01)
    assert watcher.pending == {arrived: seen_at}
    assert watcher._due()


def test_watch_and_serve_files_become_searchable_and_sigterm_exits_0(tmp_path):
    home = tmp_path / "home"
    landing = home / "landing"
    settings = make_settings(home)
    token, _ = create_token(settings, "urn:li:corpuser:admin", ["audit-read"])
    watch_log, serve_log = tmp_path / "watch.log", tmp_path / "serve.log"
    # MLflow on: each micro-batch is recorded as a run, from a background thread.
    # A round of compaction after every micro-batch (50 by default).
    watcher = start_watch(home, watch_log, None, "mlflow.enabled=true", "watch.compact_every_batches=1")
    port = free_port()
    server = None
    try:
        wait_for(lambda: watch_log_records(watch_log, "started"), 120, "the watcher to start")
        server = start_serve(home, port, serve_log)
        now_ms = int(time.time() * 1000)
        drop_file(landing, "first.mcl.jsonl", mcl_lines("urn:li:corpuser:first", 3, now_ms, "first"))
        drop_file(landing, "broken.mcl.jsonl", ["this is not json", "{\"neither\": 1}"])
        drop_file(landing, "second.mcl.jsonl", mcl_lines("urn:li:corpuser:second", 2, now_ms, "second"))
        # Half-written files stay out until renamed.
        (landing / "third.mcl.jsonl.tmp").write_text("\n".join(mcl_lines("urn:li:corpuser:third", 1, now_ms, "t")))

        first = wait_for(lambda: search_actor(port, token, "urn:li:corpuser:first"), 60, "the first file's rows")
        second = wait_for(lambda: search_actor(port, token, "urn:li:corpuser:second"), 60, "the second file's rows")
        assert {e["entityUrn"] for e in first} == {
            "urn:li:dataset:(urn:li:dataPlatform:hive,watch.first_0,PROD)",
            "urn:li:dataset:(urn:li:dataPlatform:hive,watch.first_1,PROD)",
            "urn:li:dataset:(urn:li:dataPlatform:hive,watch.first_2,PROD)",
        }
        assert {e["entityUrn"] for e in second} == {
            "urn:li:dataset:(urn:li:dataPlatform:hive,watch.second_0,PROD)",
            "urn:li:dataset:(urn:li:dataPlatform:hive,watch.second_1,PROD)",
        }
        assert search_actor(port, token, "urn:li:corpuser:third") == []

        # The malformed file is moved aside and the watcher goes on.
        assert not (landing / "broken.mcl.jsonl").exists()
        assert [p.name.split("-", 1)[1] for p in (home / "quarantine" / "watch").iterdir()] == ["broken.mcl.jsonl"]
        assert watch_log_records(watch_log, "quarantined")[0]["file"] == str(landing / "broken.mcl.jsonl")
        # The log line follows the commit that made the rows searchable.
        def file_batches():
            batches = [b for b in watch_log_records(watch_log, "micro_batch") if b["files"]]
            return batches if sum(b["files"] for b in batches) == 2 else None

        batches = wait_for(file_batches, 30, "the micro-batch log lines")
        assert sum(b["records"] for b in batches) == 5
        # A micro-batch publishes earlier ones' ChangeEvents at most every watch.openmetadata_every_seconds.
        assert all({"land", "refine", "publish"} <= set(b["seconds"]) for b in batches)
        assert all(set(b["seconds"]) <= {"land", "refine", "publish", "publish_openmetadata"} for b in batches)
        # Their ChangeEvents are published by a later micro-batch, here the one the watcher runs once no
        # file came for watch.max_wait_seconds.
        file_batch_ids = {b for batch in batches for b in batch["batch_ids"]}
        wait_for(
            lambda: {b for r in watch_log_records(watch_log, "micro_batch") for b in r["openmetadata_batch_ids"]}
            >= file_batch_ids,
            30,
            "the ChangeEvents of the file batches",
        )

        # Each table a micro-batch writes is compacted in turn; the rows stay, and a later file lands on them.
        def compacted_tables():
            tables = {r["table"] for r in watch_log_records(watch_log, "compacted")}
            return tables if tables >= set(COMPACTED_TABLES) else None

        wait_for(compacted_tables, 120, "every table compacted")
        assert watch_log_records(watch_log, "compaction_failed") == []
        after = search_actor(port, token, "urn:li:corpuser:first")
        assert {e["entityUrn"] for e in after} == {e["entityUrn"] for e in first}
        drop_file(landing, "fourth.mcl.jsonl", mcl_lines("urn:li:corpuser:fourth", 2, now_ms, "fourth"))
        fourth = wait_for(lambda: search_actor(port, token, "urn:li:corpuser:fourth"), 60, "a file's rows after compaction")
        assert len(fourth) == 2

        # Anomaly scoring runs at start and every interval; without a registered model it says so and goes on.
        skipped = watch_log_records(watch_log, "anomaly_scoring_skipped")
        assert len(skipped) == 1 and "lakehouse-actor-anomalies" in skipped[0]["reason"]

        # A file's rows are searchable once published, before its micro-batch ends and the status is
        # written; the status's last batch is then that one, or a later one that only published ChangeEvents.
        def status_after_the_newest_file_batch():
            status = _status(home)
            newest = [r for r in watch_log_records(watch_log, "micro_batch") if r["files"]][-1]
            last = status["last_batch"] or {}
            return status if last.get("finished_at", 0) >= newest["finished_at"] else None

        status = wait_for(status_after_the_newest_file_batch, 30, "the status of the newest file's micro-batch")
        assert status["running"] is True and status["pid"] == watcher.pid
        assert status["last_batch"]["finished_at"] in {r["finished_at"] for r in watch_log_records(watch_log, "micro_batch")}
        assert status["freshness_lag_seconds"] is not None
        assert http_json(f"http://127.0.0.1:{port}/health") == {"status": "ok"}  # the watcher only with a token
        health = http_json(f"http://127.0.0.1:{port}/health", token=token)
        assert health["watch"]["running"] is True and health["watch"]["pid"] == watcher.pid

        # A second watcher on the same home is refused, naming the first.
        second_watcher = run_cli("--set", "mlflow.enabled=false", "run", "--watch", home=home, check=False, timeout=120)
        assert second_watcher.returncode != 0
        assert f"a watcher already runs on home {home}: pid {watcher.pid}" in second_watcher.stderr + second_watcher.stdout
        assert "Traceback" not in second_watcher.stderr

        started = time.monotonic()
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(30) == 0
        assert time.monotonic() - started < 30
        assert _status(home)["running"] is False
        assert http_json(f"http://127.0.0.1:{port}/health", token=token)["watch"]["running"] is False
        # Every micro-batch that did something was recorded in MLflow before the watcher exited.
        runs = [json.loads(line) for line in run_cli("runs", "--json", "--limit", "50", home=home).stdout.splitlines()]
        tracked = [r for r in runs if r["name"] == "watch-batch"]
        assert len(tracked) == len(watch_log_records(watch_log, "micro_batch")) >= 1
        assert all(r["status"] == "FINISHED" and "publish.duration_s" in r["metrics"] for r in tracked)
        # The server stops on SIGTERM too, gracefully and with exit code 0.
        assert stop(server) == 0
        server = None
    finally:
        stop(watcher)
        if server is not None:
            stop(server)


@pytest.mark.slow
def test_change_events_are_published_beside_a_micro_batch_at_most_every_interval_and_when_told(spark, tmp_path):
    settings, watcher, session = in_process_watcher(spark, tmp_path / "home", watch={"openmetadata_every_seconds": 3600.0})
    now_ms = int(time.time() * 1000)
    landing = settings.landing_paths[0]
    for name in ("one", "two", "three"):
        drop_file(landing, f"{name}.mcl.jsonl", mcl_lines(f"urn:li:corpuser:{name}", 2, now_ms, name))
    files = [landing / f"{name}.mcl.jsonl" for name in ("one", "two", "three")]

    def change_event_rows() -> int:
        return read_table(spark, settings, "gold.openmetadata_change_events").count()

    watcher._micro_batch(session, [files[0]], openmetadata_now=False)
    first = watcher.last_batch
    # Nothing was refined before it: no publish of ChangeEvents beside it.
    assert set(first["seconds"]) == {"land", "refine", "publish"} and change_event_rows() == 0
    watcher._micro_batch(session, [files[1]], openmetadata_now=False)
    second = watcher.last_batch
    # The first batch's wait: none was published before, so the interval has passed.
    assert second["openmetadata_batch_ids"] == first["batch_ids"]
    published = change_event_rows()
    assert published > 0
    watcher._micro_batch(session, [files[2]], openmetadata_now=False)
    third = watcher.last_batch
    # Within the hour since the last publish: the second batch's ChangeEvents wait.
    assert set(third["seconds"]) == {"land", "refine", "publish"} and change_event_rows() == published
    assert watcher.openmetadata_behind
    watcher._micro_batch(session, [], openmetadata_now=True)
    assert sorted(watcher.last_batch["openmetadata_batch_ids"]) == sorted(second["batch_ids"] + third["batch_ids"])
    assert change_event_rows() == 3 * published
    assert not watcher.openmetadata_behind


@pytest.mark.slow
def test_a_watcher_killed_mid_batch_resumes_to_the_same_tables_as_a_clean_run(spark, tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", inputs / "history-small.mcl.jsonl")
    landing_setting = f"ingest.landing_dirs=[{inputs}]"
    clean_home, watched_home = tmp_path / "clean", tmp_path / "watched"
    run_cli("--set", "mlflow.enabled=false", "--set", landing_setting, "run", "--no-progress", home=clean_home)

    log = tmp_path / "watch.log"
    killed = start_watch(watched_home, log, {"LAKEHOUSE_CRASH_AT": "refine.events_merged"}, landing_setting)
    assert killed.wait(180) == -signal.SIGKILL, log.read_text()
    restarted = start_watch(watched_home, log, None, landing_setting)
    try:
        # The restart resumes the killed micro-batch (refine and publish of the landed batch).
        wait_for(lambda: [b for b in watch_log_records(log, "micro_batch") if b["events"]], 120, "the resumed batch")
        assert stop(restarted) == 0
    finally:
        stop(restarted)
    expected = table_contents(spark, clean_home)
    actual = table_contents(spark, watched_home)
    assert expected["silver.entity_change_events"], "the clean run derived no events"
    for key in TABLES:
        # ops tables record which run consumed a batch and digests over run-specific batch ids: they differ by design.
        if not key.startswith("ops."):
            assert actual[key] == expected[key], f"{key} differs after a kill mid-batch"


def test_the_bundle_runs_the_watcher_as_one_continuous_polling_task():
    import yaml

    from tests.conftest import REPO

    job = yaml.safe_load((REPO / "resources" / "lakehouse_watch.job.yml").read_text())["resources"]["jobs"]["lakehouse_watch"]
    assert job["max_concurrent_runs"] == 1 and "continuous" in job and "schedule" not in job
    [task] = job["tasks"]
    parameters = task["python_wheel_task"]["parameters"]
    assert parameters[-2:] == ["run", "--watch"]
    assert "watch.polling=true" in parameters
