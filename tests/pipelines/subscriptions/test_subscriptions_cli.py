"""`lakehouse subscriptions ...` and delivery after `lakehouse run`, as real subprocesses against a loopback receiver."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from pipelines.bench.processes import drop_file, free_port, mcl_lines, start_watch, stop, wait_for, watch_log_records
from pipelines.runtime.faults import CRASH_ENV
from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.subscriptions.receiver import start_receiver

MCL = FIXTURES / "history-small.mcl.jsonl"
SECRET = "a-secret-nobody-may-print"
RUN = ("--set", "mlflow.enabled=false", "run", "--no-progress", "--path", str(MCL))
# The receivers listen on loopback: a target subscriptions may use only when allow-listed.
LOOPBACK = "subscriptions.allowed_networks=[127.0.0.0/8]"


def _cli(*args, **kwargs):
    """`lakehouse` with loopback targets allowed."""
    return run_cli("--set", LOOPBACK, *args, **kwargs)


@pytest.fixture
def receiver():
    serving = start_receiver()
    yield next(serving)
    serving.close()


def _lines(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _silver_event_ids(home) -> list[str]:
    result = _cli("sql", "SELECT event_id FROM silver.entity_change_events", "--json", home=home)
    return [row["event_id"] for row in _lines(result)]


@pytest.fixture(scope="module")
def refined_home(tmp_path_factory):
    """A home where `lakehouse run` refined and published the shared DataHub fixture history."""
    home = tmp_path_factory.mktemp("subscriptions-cli")
    _cli(*RUN, home=home)
    return home


def test_add_list_status_remove_and_the_secret_is_never_printed(tmp_path, receiver):
    home = tmp_path / "home"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET + "\n")
    added = _cli(
        "subscriptions", "add", "tags", "--url", receiver.url, "--category", "TAG", "--operation", "ADD",
        "--secret-file", str(secret_file), home=home,
    )  # fmt: skip
    assert "added subscription tags" in added.stdout
    listed = _lines(_cli("subscriptions", "list", "--json", home=home))
    assert [(r["name"], r["categories"], r["operations"], r["signed"]) for r in listed] == [("tags", ["TAG"], ["ADD"], True)]
    status = _lines(_cli("subscriptions", "status", "--json", home=home))
    assert [(r["name"], r["state"], r["delivered"], r["pending"], r["failed"]) for r in status] == [("tags", "ok", 0, 0, 0)]
    key = home / "auth" / "subscriptions.key"
    assert key.stat().st_mode & 0o777 == 0o600
    removed = _cli("subscriptions", "remove", "tags", home=home)
    assert "removed subscription tags" in removed.stdout
    for result in (added, removed):
        assert SECRET not in result.stdout + result.stderr
    assert not any(SECRET.encode() in path.read_bytes() for path in home.rglob("*") if path.is_file())


def test_bad_options_exit_with_a_message_naming_them(tmp_path):
    result = _cli("subscriptions", "add", "x", "--url", "file:///etc/passwd", home=tmp_path, check=False)
    assert result.returncode != 0 and "--url: 'file:///etc/passwd' is not an http or https URL" in result.stderr
    result = _cli("subscriptions", "add", "x", "--url", "http://h/", "--format", "xml", home=tmp_path, check=False)
    assert result.returncode != 0 and "--format: 'xml' is not one of ece, openmetadata, slack" in result.stderr
    result = _cli("subscriptions", "remove", "nobody", home=tmp_path, check=False)
    assert result.returncode != 0 and "no subscription named 'nobody'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_run_delivers_what_it_published(tmp_path, receiver):
    home = tmp_path / "home"
    _cli("subscriptions", "add", "all", "--url", receiver.url, home=home)
    _cli(*RUN, home=home)
    delivered = [e["id"] for post in receiver.acknowledged() for e in post.json()["events"]]
    assert delivered and sorted(delivered) == sorted(_silver_event_ids(home))


def test_a_delivery_killed_mid_batch_resends_from_its_cursor(refined_home, receiver):
    expected = sorted(_silver_event_ids(refined_home))
    _cli(
        "subscriptions", "add", "resumed", "--url", receiver.url, "--since", "1970-01-02", home=refined_home
    )  # fmt: skip
    small_posts = ["--set", "subscriptions.max_events_per_post=3"]
    # Killed once the receiver acknowledged a POST and before the cursor recorded it ...
    killed = _cli(
        *small_posts, "subscriptions", "deliver", home=refined_home,
        env={CRASH_ENV: "subscriptions.acknowledged"}, check=False,
    )  # fmt: skip
    assert killed.returncode == -9
    first_post = [e["id"] for e in receiver.acknowledged()[0].json()["events"]]
    assert len(first_post) == 3
    # ... then mid-way through the following POSTs.
    killed = _cli(
        *small_posts, "subscriptions", "deliver", home=refined_home,
        env={CRASH_ENV: "subscriptions.committed@400"}, check=False,
    )  # fmt: skip
    assert killed.returncode == -9
    _cli(*small_posts, "subscriptions", "deliver", home=refined_home)
    received = Counter(e["id"] for post in receiver.acknowledged() for e in post.json()["events"])
    assert sorted(received) == expected  # every event arrived ...
    assert all(received[event_id] >= 2 for event_id in first_post)  # ... the unrecorded POST twice, same ids
    status = _lines(_cli("subscriptions", "status", "resumed", "--json", home=refined_home))
    assert (status[0]["pending"], status[0]["delivered"]) == (0, len(expected))  # acknowledged and recorded once each
    again = _cli(*small_posts, "subscriptions", "deliver", "--json", home=refined_home)
    assert _lines(again)[0]["posts"] == 0


@pytest.mark.slow
def test_watch_mode_delivers_each_micro_batch_and_a_dead_receiver_holds_up_nothing(tmp_path, receiver):
    home = tmp_path / "home"
    _cli("subscriptions", "add", "live", "--url", receiver.url, home=home)
    # Nobody listens there: every POST fails to connect and is retried with backoff.
    _cli("subscriptions", "add", "dead", "--url", f"http://127.0.0.1:{free_port()}/gone", home=home)
    log = tmp_path / "watch.log"
    watcher = start_watch(home, log, None, LOOPBACK)
    try:
        wait_for(lambda: watch_log_records(log, "started"), 120, "the watcher to start")
        now_ms = int(time.time() * 1000)
        for name, count in (("first", 3), ("second", 2)):
            drop_file(home / "landing", f"{name}.mcl.jsonl", mcl_lines(f"urn:li:corpuser:{name}", count, now_ms, name))
            expected = {f"urn:li:dataset:(urn:li:dataPlatform:hive,watch.{name}_{i},PROD)" for i in range(count)}
            # Delivered within seconds although the dead subscription is still retrying its first batch.
            wait_for(lambda expected=expected: expected <= _entities(receiver), 60, f"the {name} file's events")
        assert _entities(receiver) == {
            f"urn:li:dataset:(urn:li:dataPlatform:hive,watch.{name}_{i},PROD)"
            for name, count in (("first", 3), ("second", 2)) for i in range(count)
        }
        assert {r["subscription"] for r in watch_log_records(log, "delivered")} >= {"live"}
    finally:
        assert stop(watcher) == 0
    status = {r["name"]: r for r in _lines(_cli("subscriptions", "status", "--json", home=home))}
    assert status["live"]["pending"] == 0 and status["live"]["delivered"] == len(_ids(receiver))
    assert status["dead"]["state"] == "failing" and status["dead"]["pending"] == len(_ids(receiver))
    assert "ConnectionRefusedError" in status["dead"]["last_error"]


def _entities(receiver) -> set[str]:
    return {e["event"]["entityUrn"] for post in receiver.acknowledged() for e in post.json()["events"]}


def _ids(receiver) -> set[str]:
    return {e["id"] for post in receiver.acknowledged() for e in post.json()["events"]}
