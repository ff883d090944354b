"""The replica's life: prepare the database and the reader role, sync it, keep syncing, and report its lag."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.conninfo
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from psycopg import sql

from conf.errors import ConfigError, LakehouseError, SourceUnavailable
from conf.settings import Settings
from conf.tables import table_location
from pipelines.bi.access import apply_access, bi_roles
from pipelines.bi.cluster import DATABASE, LOG_FILE, STATE_FILE, writer_conninfo
from pipelines.bi.lockdown import restore_roles
from pipelines.bi.replica import READER_ROLE, check_reader_password, prepare_reader, prepare_schemas, replicated_tables
from pipelines.bi.sync import TableSync, replica_versions, sync_replica
from pipelines.runtime.progress import StageResult
from pipelines.runtime.storage import delta_storage_options, table_exists

SYNC_STAGE = "sync_bi_replica"
# What a sync may meet and be tried again after: the replica or the Delta log not answering, a lock held.
SYNC_ERRORS = (LakehouseError, psycopg.Error, DeltaError, OSError)
# How often the server loop puts back BI roles' own settings and passwords when it does not sync itself.
GUARD_INTERVAL_SECONDS = 2.0
FIRST_SYNC_RETRY_SECONDS = 5.0


def ensure_database(settings: Settings) -> None:
    """Create the database `lakehouse` on the managed server when it does not exist (bi.dsn: its own database)."""
    if settings.bi.dsn:
        return
    with psycopg.connect(psycopg.conninfo.make_conninfo(writer_conninfo(settings), dbname="postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


def prepare_replica(settings: Settings, password: str | None) -> list[TableSync]:
    """Create the database, schemas, tables and views, sync them, then create or update bi_reader.

    bi_reader is made (or its password set) after the first sync, so on a new replica it cannot log in
    before the data is in place.

    Raises:
        ConfigError: when bi_reader does not exist yet and no password is given (checked first).
    """
    ensure_database(settings)
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        check_reader_password(conn, password)
        prepare_schemas(conn, settings)
        with conn.transaction():
            apply_access(conn)
    results = sync_replica(settings)
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        prepare_reader(conn, password, settings.bi.idle_transaction_timeout_seconds)
        with conn.transaction():
            apply_access(conn)
    return results


def prepare_until_synced(settings: Settings, password: str | None, stop: threading.Event, process: subprocess.Popen | None,
                         on_error: Callable[[BaseException], None]) -> list[TableSync] | None:  # fmt: skip
    """prepare_replica, tried again every FIRST_SYNC_RETRY_SECONDS after a failure it may recover from.

    Returns:
        The first sync's results, or None when `stop` was set first.

    Raises:
        ConfigError: as prepare_replica (a missing password is not retried), or when the managed
            PostgreSQL server exits on its own.
    """
    while True:
        try:
            return prepare_replica(settings, password)
        except ConfigError:
            raise
        except SYNC_ERRORS as exc:
            if process is not None and process.poll() is not None:
                raise ConfigError(f"sql-server: PostgreSQL exited with {process.returncode} "
                                  f"(see {settings.secret_path(LOG_FILE)})") from None  # fmt: skip
            on_error(exc)
        if stop.wait(FIRST_SYNC_RETRY_SECONDS):
            return None


def sync_line(results: list[TableSync], seconds: float) -> str | None:
    """One log line about a sync that found new Delta versions: tables, rows, seconds, lag; None when it found none.

    The lag is how old the oldest commit it applied was when it became visible to BI users.
    """
    changed = [r for r in results if r.mode not in ("none", "missing", "deferred")]
    deferred = [r.table_key for r in results if r.mode == "deferred"]
    if not changed and not deferred:
        return None
    lags = [r.lag_seconds for r in changed if r.lag_seconds is not None]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tables = ", ".join(f"{r.table_key} {r.mode} {r.rows:,}" for r in changed)
    line = f"{stamp} sync: {len(changed)} tables ({tables}), {sum(r.rows for r in changed):,} rows in {seconds:.2f} s"
    line += f", lag {max(lags):.1f} s" if lags else ""
    if deferred:
        line += f"; deferred, a BI session holds its lock (tried again at the next sync): {', '.join(deferred)}"
    return line


def guard_roles(settings: Settings) -> list[str]:
    """Put back the session defaults and passwords BI roles changed themselves (see lockdown.restore_roles)."""
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        roles = [READER_ROLE] if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone() else []
        roles += [r.name for r in bi_roles(conn)]
        return restore_roles(conn, roles, settings.bi.idle_transaction_timeout_seconds)


def serve_forever(
    settings: Settings,
    stop: threading.Event,
    process: subprocess.Popen | None,
    on_error: Callable[[BaseException], None],
    on_line: Callable[[str], None],
) -> None:
    """Sync every `bi.sync_interval_seconds` until `stop` is set or the managed server exits.

    Each sync that found new versions is reported in one line (`sync_line`), and BI roles that changed
    their own settings or password are put back (every GUARD_INTERVAL_SECONDS without syncs). A failed
    sync is reported and tried again at the next interval: nothing is lost, the replica is only behind.

    Raises:
        ConfigError: when the managed PostgreSQL server exits on its own.
    """
    interval = settings.bi.sync_interval_seconds
    while not stop.wait(interval if interval > 0 else GUARD_INTERVAL_SECONDS):
        if process is not None and process.poll() is not None:
            raise ConfigError(f"sql-server: PostgreSQL exited with {process.returncode} (see {settings.secret_path(LOG_FILE)})")
        try:
            for restored in guard_roles(settings):
                on_line(f"put back {restored} (a BI role changed it itself)")
            if interval <= 0:
                continue
            started = time.monotonic()
            line = sync_line(sync_replica(settings), time.monotonic() - started)
            if line:
                on_line(line)
        except SYNC_ERRORS as exc:
            on_error(exc)


def replica_configured(settings: Settings) -> bool:
    """Whether this home has a replica to sync: bi.dsn, or a running `lakehouse sql-server`."""
    return bool(settings.bi.dsn) or settings.secret_path(STATE_FILE).exists()


def sync_after_publish(settings: Settings) -> StageResult:
    """Sync the replica after a publish (bi.sync_on_publish): the publish's new versions become visible to BI.

    A replica that is not running or fails is reported on stderr and left behind, never failing the
    publish: gold is written, and the next sync (the server's own loop, the next publish) catches up.
    """
    if not replica_configured(settings):
        return StageResult(SYNC_STAGE, metrics={"skipped": 1.0})
    started = time.monotonic()
    try:
        results = sync_replica(settings)
    except SYNC_ERRORS as exc:
        print(f"sql-server replica not synced: {exc}", file=sys.stderr)
        return StageResult(SYNC_STAGE, metrics={"failed": 1.0})
    rows = sum(r.rows for r in results)
    return StageResult(SYNC_STAGE, rows_out=rows, metrics={"seconds": round(time.monotonic() - started, 3)})


def replica_status(settings: Settings) -> dict[str, Any]:
    """Each replicated table's Delta version, the replica's version and the lag, for `lakehouse status`.

    lag_seconds: how long ago the oldest Delta commit the replica lacks was made (0 when in sync).
    """
    try:
        with psycopg.connect(writer_conninfo(settings)) as conn:
            versions = replica_versions(conn)
    except (SourceUnavailable, psycopg.Error) as exc:
        return {"available": False, "error": str(exc).strip(), "tables": []}
    now = time.time()
    tables = []
    for key in replicated_tables():
        location = table_location(settings, key)
        options = delta_storage_options(location)
        delta = DeltaTable(str(location), storage_options=options) if table_exists(location) else None
        delta_version = delta.version() if delta else None
        replica_version = versions.get(key)
        behind = 0 if delta_version is None else delta_version - (replica_version if replica_version is not None else -1)
        lag = 0.0
        if delta is not None and behind > 0:
            commits = {c["version"]: c["timestamp"] for c in delta.history(limit=behind) if "timestamp" in c}
            oldest = min(commits) if commits else None
            lag = round(now - commits[oldest] / 1000, 1) if oldest is not None else None
        tables.append({"table": key, "delta_version": delta_version, "replica_version": replica_version,
                       "versions_behind": max(behind, 0), "lag_seconds": lag})  # fmt: skip
    return {"available": True, "error": None, "tables": tables}
