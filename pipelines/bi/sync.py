"""Keep the PostgreSQL replica in sync with gold, by Delta version.

For each replicated table the replica records the Delta version it holds. A sync reads the table's
commits since then from its Delta log (local or on object storage, through the storage layer) and copies
as little as the commits allow:

- commits that only added data files (appends, insert-only MERGEs): the rows of those files, appended;
- commits that also removed files of a partitioned table (MERGE updates, replaceWhere): the partitions
  they touched are deleted and copied again from the table as of the new version;
- anything else (the first copy, a schema change, a removed file of an unpartitioned table, a log that
  was cleaned up): a full copy into a new table built beside the replica's (schema `lakehouse_stage`,
  which no BI role can reach), then switched in (see `swap_table`).

A BI session that keeps a transaction open holds its tables' locks until it ends (psycopg's default, many
tools'): no statement of a sync waits for such a lock longer than `bi.lock_timeout_ms`, and a table whose
lock stays held is left at its version for the next sync (`deferred`), never failing the others.

File rewrites that change no data (OPTIMIZE, compaction: dataChange false) copy nothing. Rows go in by
COPY, never by row-by-row INSERTs: a full copy by binary COPY from Arrow (ADBC's PostgreSQL driver, in
C++: PostgreSQL parses no text), over parallel streams; the changes of an append or a partition rewrite by
CSV COPY (Arrow's C++ writer, streamed through psycopg 3) inside the transaction that also records the
version.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import psycopg
from deltalake import DeltaTable
from psycopg import Connection, sql

from conf.locations import Location
from conf.settings import Settings
from conf.tables import table_location, table_spec
from pipelines.bi.access import AUDIT_TABLE, apply_access, refresh_entity_domains
from pipelines.bi.cluster import writer_conninfo
from pipelines.bi.identities import sync_identities
from pipelines.bi.phases import Phases
from pipelines.bi.replica import (
    STATE_TABLE,
    SYNC_LOCK_KEY,
    SYNC_SCHEMA,
    STAGE_SCHEMA,
    create_indexes_sql,
    create_table_sql,
    create_views,
    prepare_schemas,
    replica_column_names,
    replica_table,
    replicated_tables,
)
from pipelines.bi.rows import copy_parallel, copy_rows, execute_parallel, file_rows, scan_rows
from pipelines.runtime.storage import delta_storage_options, storage_for, table_exists

NO_VERSION = -1
# A switch is tried this many times, each waiting at most bi.lock_timeout_ms, with these pauses between.
SWITCH_ATTEMPTS = 3
SWITCH_PAUSE_SECONDS = 0.5
# COPY streams of a full copy: PostgreSQL parses each in its own backend (one core each).
COPY_STREAMS = 2


@dataclass(frozen=True)
class TablePlan:
    """How one table is brought from the replica's version to the Delta table's.

    Attributes:
        mode: none, append, partitions or swap.
        added_files: (absolute path, partition values) of the data files to append.
        partitions: partition values (of the table's one partition column) to copy again.
        oldest_commit_ms: when the oldest of the commits read was made (epoch ms; None: none read).
    """

    mode: str
    added_files: tuple[tuple[str, dict[str, str | None]], ...] = ()
    partitions: frozenset[str | None] = field(default_factory=frozenset)
    oldest_commit_ms: int | None = None


@dataclass
class TableSync:
    """What a sync did to one table.

    Attributes:
        mode: none, append, partitions, swap (a new table switched in), rewrite (a new table's rows put in
            place of the old ones: BI sessions held the old table), deferred (its lock stayed held: left
            for the next sync) or missing (no Delta table yet).
        lag_seconds: how old the oldest commit the sync applied was when the sync ended (None: not known).
        phases: seconds per phase: open (the Delta log: the version; the file list for a scan), plan
            (reading the new commits), read (the new rows from Parquet or the scan), copy (COPY, the
            indexes updated with it), delete (a partition rewrite's old rows), domains (the newest domain
            of the entities with new audit rows, once a BI role exists), index (a swap's index builds and
            VACUUM), swap (a swap's rename), commit.
    """

    table_key: str
    from_version: int | None
    to_version: int | None
    mode: str
    rows: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    lag_seconds: float | None = None


def plan_changes(location: Location, spec_partitions: tuple[str, ...], from_version: int, to_version: int) -> TablePlan:
    """Read the Delta commits (from_version, to_version] and decide how to apply them.

    The commits are read through the storage layer, so a table on object storage is planned as a local one.

    Args:
        location: the table's folder (local or object storage).
        spec_partitions: the table's partition columns.
        from_version: the version the replica holds (NO_VERSION: none).
        to_version: the table's current version.
    """
    if from_version == to_version:
        return TablePlan("none")
    if from_version == NO_VERSION or from_version > to_version or len(spec_partitions) > 1:
        return TablePlan("swap")
    storage = storage_for(location)
    added: dict[str, dict[str, str | None]] = {}
    partitions: set[str | None] = set()
    commit_times: list[int] = []
    for version in range(from_version + 1, to_version + 1):
        try:
            commit = storage.read_bytes(location / "_delta_log" / f"{version:020d}.json")
        except FileNotFoundError:
            return TablePlan("swap")
        for line in commit.decode().splitlines():
            action = json.loads(line)
            if "commitInfo" in action and isinstance(action["commitInfo"].get("timestamp"), int):
                commit_times.append(action["commitInfo"]["timestamp"])
            if "metaData" in action or "protocol" in action:
                return TablePlan("swap")
            if "add" in action and action["add"].get("dataChange", True):
                add = action["add"]
                if add.get("deletionVector"):
                    partitions.add(_partition_value(add, spec_partitions))
                added[add["path"]] = add.get("partitionValues") or {}
            elif "remove" in action and action["remove"].get("dataChange", True):
                remove = action["remove"]
                added.pop(remove["path"], None)
                partitions.add(_partition_value(remove, spec_partitions))
    if partitions and not spec_partitions:
        return TablePlan("swap")
    files = tuple(
        (str(location / unquote(path)), values)
        for path, values in added.items()
        if not spec_partitions or values.get(spec_partitions[0]) not in partitions
    )
    oldest = min(commit_times, default=None)
    if partitions:
        return TablePlan("partitions", files, frozenset(partitions), oldest)
    return TablePlan("append", files, oldest_commit_ms=oldest) if files else TablePlan("none")


def _partition_value(action: dict, spec_partitions: tuple[str, ...]) -> str | None:
    values = action.get("partitionValues") or {}
    return values.get(spec_partitions[0]) if spec_partitions else None


def _noting_entities(chunks: Iterator[pa.Table], entities: set[str]) -> Iterator[pa.Table]:
    """Yield the chunks, adding the entity urns they carry (if any) to `entities`."""
    for chunk in chunks:
        if "entity_urn" in chunk.column_names:
            entities.update(chunk.column("entity_urn").unique().to_pylist())
        yield chunk


def _partition_predicate(column: str, values: frozenset[str | None]) -> tuple[str, sql.Composed]:
    """The Delta scan predicate and the PostgreSQL condition selecting these partitions."""
    concrete = sorted(v for v in values if v is not None)
    delta_parts = [f"{column} IN ({', '.join(repr(v) for v in concrete)})"] if concrete else []
    pg_parts = [sql.SQL("{} = ANY({})").format(sql.Identifier(column), sql.Literal(concrete))] if concrete else []
    if None in values:
        delta_parts.append(f"{column} IS NULL")
        pg_parts.append(sql.SQL("{} IS NULL").format(sql.Identifier(column)))
    return " OR ".join(delta_parts), sql.SQL(" OR ").join(pg_parts)


def _record_version(conn: Connection, table_key: str, version: int, mode: str, rows_added: int, rows_removed: int = 0,
                    rows_total: int | None = None) -> None:  # fmt: skip
    """Record the Delta version the replica table now holds and its row count (counted as it changes, not scanned).

    Args:
        rows_total: the row count after a full copy; else the recorded count changes by added - removed.
    """
    state = sql.Identifier(SYNC_SCHEMA, STATE_TABLE)
    conn.execute(
        sql.SQL(
            "INSERT INTO {} AS s (table_key, delta_version, rows, mode, synced_at) VALUES (%s, %s, %s, %s, now()) "
            "ON CONFLICT (table_key) DO UPDATE SET delta_version = EXCLUDED.delta_version, "
            "rows = COALESCE(%s, s.rows + %s), mode = EXCLUDED.mode, synced_at = EXCLUDED.synced_at"
        ).format(state),
        (table_key, version, rows_added - rows_removed if rows_total is None else rows_total, mode, rows_total,
         rows_added - rows_removed),
    )  # fmt: skip


def replica_versions(conn: Connection) -> dict[str, int]:
    """The Delta version each replicated table holds (tables never synced are absent)."""
    rows = conn.execute(sql.SQL("SELECT table_key, delta_version FROM {}").format(sql.Identifier(SYNC_SCHEMA, STATE_TABLE)))
    return dict(rows.fetchall())


def swap_table(conn: Connection, conninfo: str, settings: Settings, table_key: str, table: DeltaTable, phases: Phases) -> tuple[int, str]:
    """Copy the whole table beside the replica's (indexed, vacuumed), then put it in place; return (rows, mode).

    The switch (the old table dropped, the new one moved into its schema, the views recreated, grants and
    policies applied) is one transaction holding the tables' locks for milliseconds. Each attempt waits
    at most `bi.lock_timeout_ms` for BI sessions' locks, so new queries queue behind it no longer than
    that. When sessions keep the old table locked through every attempt (a transaction left open), its
    rows are replaced in place instead (mode `rewrite`): DELETE and INSERT take no lock a reader holds,
    and each reader keeps its session and its snapshot.

    Raises:
        psycopg.errors.LockNotAvailable: when the table's columns differ from the new ones (only a switch
            applies that) and readers held it through every attempt: it is left for the next sync.
    """
    staged = replica_table(table_key, STAGE_SCHEMA)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staged))
    conn.execute(create_table_sql(table_key, STAGE_SCHEMA))
    spec = table_spec(table_key)
    with phases.phase("copy"):
        chunks = phases.timed("read", scan_rows(table, table_key, json_type=pa.json_()))
        rows = copy_parallel(conninfo, (STAGE_SCHEMA, spec.name), chunks, COPY_STREAMS)
    with phases.phase("index"):
        execute_parallel(conninfo, create_indexes_sql(table_key, STAGE_SCHEMA), COPY_STREAMS)
        # VACUUM marks the new pages all-visible (counts from an index alone need it) and sets their hint
        # bits now, instead of in BI users' first queries; ANALYZE gives the planner its statistics.
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(staged))
    held: psycopg.errors.LockNotAvailable | None = None
    for attempt in range(SWITCH_ATTEMPTS):
        if attempt:
            time.sleep(SWITCH_PAUSE_SECONDS * attempt)
        try:
            with phases.phase("swap"), conn.transaction():
                conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{settings.bi.lock_timeout_ms}ms")))
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(replica_table(table_key)))
                conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(staged, sql.Identifier(spec.layer)))
                create_views(conn, settings)
                apply_access(conn, [table_key])
                if table_key == AUDIT_TABLE:
                    refresh_entity_domains(conn, None)
                _record_version(conn, table_key, table.version(), "swap", rows, rows_total=rows)
            return rows, "swap"
        except psycopg.errors.LockNotAvailable as exc:
            held = exc
    if replica_columns(conn, table_key) != list(replica_column_names(table_key)):
        raise held
    columns = sql.SQL(", ").join(sql.Identifier(n) for n in table_spec(table_key).column_names)
    with phases.phase("rewrite"), conn.transaction():
        conn.execute(sql.SQL("DELETE FROM {}").format(replica_table(table_key)))
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(replica_table(table_key), columns, columns, staged))
        if table_key == AUDIT_TABLE:
            refresh_entity_domains(conn, None)
        _record_version(conn, table_key, table.version(), "rewrite", rows, rows_total=rows)
    conn.execute(sql.SQL("DROP TABLE {}").format(staged))
    return rows, "rewrite"


def replica_columns(conn: Connection, table_key: str) -> list[str]:
    """The columns the replica table has now, in order (none: no such table)."""
    spec = table_spec(table_key)
    return [r[0] for r in conn.execute(
        "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (spec.layer, spec.name),
    )]  # fmt: skip


def sync_table(conn: Connection, conninfo: str, settings: Settings, table_key: str, from_version: int | None) -> TableSync:
    """Bring one replica table to its Delta table's current version (see the module docstring).

    The table's version is read without its file list (`without_files`: the log since the last
    checkpoint, not every file's add action); the files are listed only for a scan (a swap, a partition
    rewrite). The time of each phase is kept in the result's `phases`.
    """
    phases = Phases()
    location = table_location(settings, table_key)
    options = delta_storage_options(location)
    with phases.phase("open"):
        if not table_exists(location):
            return TableSync(table_key, from_version, None, "missing", phases=phases.rounded())
        version = DeltaTable(str(location), storage_options=options, without_files=True).version()
    spec = table_spec(table_key)
    with phases.phase("plan"):
        plan = plan_changes(location, spec.partitioned_by, NO_VERSION if from_version is None else from_version, version)
    if plan.mode == "none":
        if from_version != version:
            with phases.phase("commit"), conn.transaction():
                _record_version(conn, table_key, version, "none", 0)
        return TableSync(table_key, from_version, version, "none", seconds=phases.total(), phases=phases.rounded())
    if plan.mode != "append":
        with phases.phase("open"):
            table = DeltaTable(str(location), version=version, storage_options=options)
    mode = plan.mode
    if plan.mode == "swap":
        rows, mode = swap_table(conn, conninfo, settings, table_key, table, phases)
    else:
        rows = removed = 0
        target = replica_table(table_key)
        with conn.transaction():
            if plan.mode == "partitions":
                scan_filter, condition = _partition_predicate(spec.partitioned_by[0], plan.partitions)
                with phases.phase("delete"):
                    removed = conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(target, condition)).rowcount
                with phases.phase("copy"):
                    rows += copy_rows(conn, target, table_key, phases.timed("read", scan_rows(table, table_key, scan_filter)))
            entities: set[str] = set()
            with phases.phase("copy"):
                new_rows = _noting_entities(file_rows(plan.added_files, table_key), entities)
                rows += copy_rows(conn, target, table_key, phases.timed("read", new_rows))
            if table_key == AUDIT_TABLE:
                with phases.phase("domains"):
                    refresh_entity_domains(conn, None if plan.mode == "partitions" else entities)
            _record_version(conn, table_key, version, plan.mode, rows, removed)
            committing = time.perf_counter()
        phases.add("commit", time.perf_counter() - committing)
    lag = None if plan.oldest_commit_ms is None else round(max(time.time() - plan.oldest_commit_ms / 1000, 0.0), 1)
    return TableSync(table_key, from_version, version, mode, rows, phases.total(), phases.rounded(), lag)


def sync_replica(settings: Settings, conninfo: str | None = None) -> list[TableSync]:
    """Bring every replicated table up to its Delta version, one sync at a time per replica.

    Args:
        settings: the lakehouse settings (table locations, bi section).
        conninfo: the writer's connection; default `bi.dsn` or the running sql-server of the home.

    Raises:
        SourceUnavailable: when no replica is configured or running.
    """
    conninfo = conninfo or writer_conninfo(settings)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (SYNC_LOCK_KEY,))
        try:
            # No statement of the sync waits longer than this for a BI session's lock (swaps set their own).
            conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{settings.bi.lock_timeout_ms}ms")))
            if prepare_schemas(conn, settings):
                with conn.transaction():
                    apply_access(conn)
            versions = replica_versions(conn)
            results = []
            for key in replicated_tables():
                try:
                    results.append(sync_table(conn, conninfo, settings, key, versions.get(key)))
                except psycopg.errors.LockNotAvailable:
                    results.append(TableSync(key, versions.get(key), None, "deferred"))
            try:
                sync_identities(conn, settings, versions)
            except psycopg.errors.LockNotAvailable:
                pass  # a BI session holds it: the next sync copies it
            return results
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (SYNC_LOCK_KEY,))
