"""`lakehouse sql-server` as its users meet it: ready only with data in place, a line per sync, readers kept.

A server of its own (plain TCP, polling every half second) on a home holding half of the shared
fixture's entities; the tests publish the other half and watch what the running command prints.
"""

from __future__ import annotations

import queue
import shutil
import signal
import threading
import time
from collections.abc import Iterator

import psycopg
import psycopg.conninfo
import pytest
from deltalake import DeltaTable

from conf.tables import table_location
from pipelines.orchestration.jobs import run_job
from pipelines.bi.cluster import writer_conninfo
from pipelines.runtime.engine_servers import free_loopback_port
from tests.conftest import register_fresh_tables
from tests.pipelines.bi.conftest import half_published_home, reader_conninfo, sql_server_process
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow

START_TIMEOUT = 90.0


def _overrides(port: int) -> list[str]:
    return ["mlflow.enabled=false", f"bi.port={port}", "bi.sync_interval_seconds=0.5"]


class Output:
    """The lines a running command prints, read as they come."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line.rstrip("\n")) for line in stream], daemon=True).start()

    def wait_for(self, predicate, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"no such line within {timeout} s; printed: {self.seen}")


@pytest.fixture(scope="module")
def server(spark, tmp_path_factory) -> Iterator[tuple]:
    """A published home and its `lakehouse sql-server`, started while the test logs in as bi_reader.

    Yields (settings, port, process, output, logins): `logins` holds the audit row count each bi_reader
    login saw before the command said it was ready.
    """
    port = free_loopback_port()
    root, settings, inputs = half_published_home(spark, tmp_path_factory, "lakehouse-bi-life-", _overrides(port))
    process = sql_server_process(settings, _overrides(port))
    output = Output(process.stdout)
    logins: list[int] = []
    ready = threading.Event()

    def log_in_until_ready() -> None:
        while not ready.is_set() and process.poll() is None:
            try:
                with psycopg.connect(reader_conninfo(port), connect_timeout=1) as conn:
                    count = conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
                if not ready.is_set():
                    logins.append(count)
            except psycopg.Error:
                pass
            time.sleep(0.05)

    prober = threading.Thread(target=log_in_until_ready, daemon=True)
    prober.start()
    try:
        output.wait_for(lambda line: line.startswith("ready:"), START_TIMEOUT)
        ready.set()
        prober.join(timeout=10)
        yield settings, port, process, output, logins, inputs / "second.jsonl"
    finally:
        ready.set()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_bi_reader_logs_in_only_once_the_data_is_in_place_and_ready_is_printed(server):
    settings, port, process, output, logins, _ = server
    delta_rows = DeltaTable(str(table_location(settings, "gold.audit_events"))).count()
    assert delta_rows > 0
    assert all(count == delta_rows for count in logins), f"logins before ready saw {sorted(set(logins))} rows"
    with psycopg.connect(reader_conninfo(port)) as conn:
        assert conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0] == delta_rows
    ready = next(line for line in output.seen if line.startswith("ready:"))
    assert f"127.0.0.1:{port}" in ready and "bi_reader" in ready


def test_each_sync_with_new_versions_prints_one_line_with_tables_rows_seconds_and_lag(spark, server):
    settings, port, process, output, _, second = server
    register_fresh_tables(spark, settings)
    run_job(settings, paths=[second], spark=spark)
    line = output.wait_for(lambda line: " sync: " in line and "gold.audit_events append" in line, 30)
    assert " rows in " in line and " s, lag " in line, line
    added = int(line.split("gold.audit_events append ")[1].split(",")[0].split(")")[0].replace(",", ""))
    with psycopg.connect(reader_conninfo(port)) as conn:
        count = conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
    assert added > 0 and count == DeltaTable(str(table_location(settings, "gold.audit_events"))).count()
    assert process.poll() is None


def test_a_reader_holding_a_transaction_open_across_the_servers_swap_keeps_its_session(server):
    settings, port, process, output, _, _ = server
    reader = psycopg.connect(reader_conninfo(port))
    try:
        before = reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
        with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
            conn.execute("DELETE FROM lakehouse_sync.table_versions WHERE table_key = 'gold.audit_events'")
        line = output.wait_for(lambda line: " sync: " in line and "gold.audit_events" in line, 60)
        assert "gold.audit_events rewrite" in line, line
        assert process.poll() is None, "sql-server stopped"
        assert reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0] == before
    finally:
        reader.close()
    assert not [line for line in output.seen if "Traceback" in line or line.startswith("error:")]


def test_a_busy_port_is_one_line_naming_it(server, tmp_path):
    _, port, _, _, _, _ = server
    result = run_cli("--set", f"bi.port={port}", "sql-server", home=tmp_path / "other",
                     env={"LAKEHOUSE_BI_PASSWORD": "x"}, check=False)  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"error: --port: 127.0.0.1:{port} is in use by another process; choose another port (--port or bi.port)"
    )
    assert not (tmp_path / "other" / "bi" / "postgres").exists()


def test_the_servers_files_are_its_owners_and_the_cluster_folder_only_entered(server):
    settings, _, _, _, _, _ = server
    bi = settings.secret_path("bi")
    for name in ("admin.password", "server.json", "postgres.log"):
        assert (bi / name).stat().st_mode & 0o777 == 0o600, name
    assert (bi / "postgres").stat().st_mode & 0o777 == 0o700
    # The server's user (root starts it as bi.run_as) enters bi/ to reach its cluster; nobody lists or writes it.
    assert bi.stat().st_mode & 0o077 in (0o000, 0o001)
