"""Table maintenance behind one interface: history, vacuum and optimize.

Sail's SQL (embedded, or a remote Sail server) has no DESCRIBE HISTORY, VACUUM or OPTIMIZE, so tables at
paths are maintained by delta-rs on their files; catalog-managed tables (Databricks) through Delta SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql import SparkSession

from conf.errors import ConfigError, InputError
from conf.settings import Settings
from conf.tables import table_name, table_spec
from pipelines.runtime.home import home_of

# Delta primitive type names of the DDL types a column added to an existing table may have.
_DELTA_PRIMITIVES = {"STRING": "string", "BIGINT": "long", "INT": "integer", "BOOLEAN": "boolean", "DATE": "date"}

@dataclass(frozen=True)
class Commit:
    """One entry of a table's history."""

    version: int
    timestamp_ms: int | None
    operation: str
    parameters: dict[str, Any]


class TableMaintenance(Protocol):
    """What every maintenance backend offers, for tables named by registry key."""

    def history(self, table_key: str, limit: int | None = None) -> list[Commit]:
        """Return the table's commits, newest first."""

    def version(self, table_key: str) -> int:
        """Return the table's current Delta version."""

    def configuration(self, table_key: str) -> dict[str, str]:
        """Return the table's properties (its Delta configuration) as they are now."""

    def add_missing_columns(self, table_key: str) -> list[str]:
        """Add the declared columns an existing table lacks (nullable, at the end); return their names."""

    def vacuum(self, table_key: str, retention_hours: int | None = None, dry_run: bool = False) -> list[str]:
        """Delete data files no longer referenced and older than the retention; return their paths."""

    def optimize(
        self,
        table_key: str,
        zorder_by: tuple[str, ...] = (),
        row_group_rows: int | None = None,
        delta_encoded: tuple[str, ...] = (),
        small_file_mb: int | None = None,
    ) -> dict[str, Any]:
        """Compact small files (and Z-order by `zorder_by`, one column: sort by it); return the engine's metrics.

        `row_group_rows` caps the rows per Parquet row group of the files written (None: the engine's
        default) and `delta_encoded` names integer columns written with DELTA_BINARY_PACKED encoding (a
        sorted time column shrinks to its small deltas and decodes faster); engines that choose row
        groups by bytes and encodings themselves (Spark) keep their own. `small_file_mb` compacts only
        the files smaller than that many MiB, into files of about that size, and leaves larger files
        (and their deletion vectors) as they are (None: the engine's default sizes).
        """


class DeltaRsMaintenance:
    """Maintenance through delta-rs on the table's storage location (the local profile)."""

    def __init__(self, settings: Settings):
        self._settings = settings

    def _table(self, table_key: str):
        from deltalake import DeltaTable

        home = home_of(self._settings)
        return DeltaTable(str(home.table_location(table_key)), storage_options=home.storage_options or None)

    def history(self, table_key: str, limit: int | None = None) -> list[Commit]:
        commits = self._table(table_key).history(limit)
        return [
            Commit(
                version=int(c["version"]),
                timestamp_ms=c.get("timestamp"),
                operation=str(c.get("operation", "")),
                parameters=_as_dict(c.get("operationParameters")),
            )
            for c in commits
        ]

    def version(self, table_key: str) -> int:
        # The newest commit file's number is the version (Delta protocol). Loading the table would
        # read its whole log and file list: 10-30 ms a table, and a run asks for every table twice.
        home = home_of(self._settings)
        log = home.table_location(table_key) / "_delta_log"
        with contextlib.suppress(FileNotFoundError):
            names = os.listdir(log) if isinstance(log, Path) else [f.location.name for f in home.list(log)]
            commits = [name[:-5] for name in names if name.endswith(".json")]
            numbered = [int(stem) for stem in commits if stem.isdigit()]
            if numbered:
                return max(numbered)
        return int(self._table(table_key).version())  # not a table: delta-rs's own error

    def configuration(self, table_key: str) -> dict[str, str]:
        # The newest metadata in the Delta log: the embedded engine has no SHOW TBLPROPERTIES.
        configuration = self._table(table_key).metadata().configuration
        return {str(k): str(v) for k, v in configuration.items() if v is not None}

    def add_missing_columns(self, table_key: str) -> list[str]:
        # The embedded engine has no ALTER TABLE ADD COLUMNS; delta-rs writes the same schema change.
        from deltalake.schema import Field, PrimitiveType

        table = self._table(table_key)
        present = {f.name for f in table.schema().fields}
        missing = _missing_columns(table_key, present)
        if missing:
            table.alter.add_columns([Field(n, PrimitiveType(_DELTA_PRIMITIVES[t]), nullable=True) for n, t in missing])
        return [n for n, _ in missing]

    def vacuum(self, table_key: str, retention_hours: int | None = None, dry_run: bool = False) -> list[str]:
        hours = _vacuum_hours(self._settings, retention_hours)
        return list(
            self._table(table_key).vacuum(retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False)
        )

    def optimize(
        self,
        table_key: str,
        zorder_by: tuple[str, ...] = (),
        row_group_rows: int | None = None,
        delta_encoded: tuple[str, ...] = (),
        small_file_mb: int | None = None,
    ) -> dict[str, Any]:
        from deltalake import ColumnProperties, WriterProperties

        _check_optimize(table_key, zorder_by, row_group_rows, delta_encoded, small_file_mb)
        table = self._table(table_key)
        properties = None
        if row_group_rows or delta_encoded:
            encoded = ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
            # Custom writer properties start from no compression: keep delta-rs's default codec.
            properties = WriterProperties(max_row_group_size=row_group_rows, compression="SNAPPY",
                                          column_properties={c: encoded for c in delta_encoded} or None)  # fmt: skip
        target_size = small_file_mb * 2**20 if small_file_mb else None
        if zorder_by:
            return dict(table.optimize.z_order(list(zorder_by), target_size=target_size, writer_properties=properties))
        return dict(table.optimize.compact(target_size=target_size, writer_properties=properties))


class SqlMaintenance:
    """Maintenance through Delta SQL on a Spark session (Databricks, Spark with delta-spark)."""

    def __init__(self, spark: SparkSession, settings: Settings):
        self._spark = spark
        self._settings = settings

    def history(self, table_key: str, limit: int | None = None) -> list[Commit]:
        sql = f"DESCRIBE HISTORY {table_name(self._settings, table_key)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._spark.sql(sql).collect()
        return [
            Commit(
                version=int(r["version"]),
                timestamp_ms=int(r["timestamp"].timestamp() * 1000) if r["timestamp"] else None,
                operation=str(r["operation"]),
                parameters=_as_dict(r["operationParameters"]),
            )
            for r in rows
        ]

    def version(self, table_key: str) -> int:
        return self.history(table_key, limit=1)[0].version

    def configuration(self, table_key: str) -> dict[str, str]:
        rows = self._spark.sql(f"SHOW TBLPROPERTIES {table_name(self._settings, table_key)}").collect()
        return {str(r[0]): str(r[1]) for r in rows}

    def add_missing_columns(self, table_key: str) -> list[str]:
        name = table_name(self._settings, table_key)
        present = set(self._spark.table(name).columns)
        missing = _missing_columns(table_key, present)
        if missing:
            self._spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({', '.join(f'{n} {t}' for n, t in missing)})")
        return [n for n, _ in missing]

    def vacuum(self, table_key: str, retention_hours: int | None = None, dry_run: bool = False) -> list[str]:
        hours = _vacuum_hours(self._settings, retention_hours)
        sql = f"VACUUM {table_name(self._settings, table_key)} RETAIN {hours} HOURS"
        # Only a DRY RUN lists the files; VACUUM itself returns the table's path. So list, then delete.
        # (Databricks lists at most 1,000 files in a DRY RUN: there the count is capped, not the delete.)
        files = [str(r[0]) for r in self._spark.sql(sql + " DRY RUN").collect()]
        if not dry_run and files:
            self._spark.sql(sql).collect()
        return files

    def optimize(
        self,
        table_key: str,
        zorder_by: tuple[str, ...] = (),
        row_group_rows: int | None = None,
        delta_encoded: tuple[str, ...] = (),
        small_file_mb: int | None = None,
    ) -> dict[str, Any]:
        _check_optimize(table_key, zorder_by, row_group_rows, delta_encoded, small_file_mb)
        sql = f"OPTIMIZE {table_name(self._settings, table_key)}"
        if zorder_by:
            sql += f" ZORDER BY ({', '.join(zorder_by)})"
        sizes = {}
        if small_file_mb:
            # Delta's OPTIMIZE takes its file sizes from the session: set them for this statement only.
            sizes = {key: str(small_file_mb * 2**20) for key in _DELTA_OPTIMIZE_FILE_SIZES}
        with _session_conf(self._spark, sizes):
            rows = self._spark.sql(sql).collect()
        if not rows:
            return {}
        # Delta's OPTIMIZE returns (path, metrics): the counts are in the metrics struct.
        row = rows[0].asDict(recursive=True)
        return row.get("metrics") or row


def maintenance_for(settings: Settings, spark: SparkSession | None = None) -> TableMaintenance:
    """Pick the maintenance backend for where the tables live.

    Tables at paths (every profile but catalog-managed tables) are maintained by delta-rs on their
    location, whatever engine writes them: a remote Spark Connect server need not know Delta's
    maintenance SQL (Sail has none). Catalog-managed tables are reached through the catalog's SQL.

    Args:
        settings: the lakehouse settings.
        spark: a session; needed for catalog-managed tables.

    Raises:
        ConfigError: when the tables are catalog-managed and no session is given.
    """
    if not settings.catalog.managed_tables:
        return DeltaRsMaintenance(settings)
    if spark is None:
        raise ConfigError("catalog.managed_tables: maintenance of catalog-managed tables runs through SQL and needs a session")
    return SqlMaintenance(spark, settings)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {"value": value}
        return loaded if isinstance(loaded, dict) else {"value": loaded}
    return dict(value)


def _vacuum_hours(settings: Settings, retention_hours: int | None) -> int:
    """The hours VACUUM keeps: the argument, else the settings' `retention.vacuum_hours`.

    Raises:
        InputError: for hours that are not a whole number >= 0.
    """
    hours = settings.retention.vacuum_hours if retention_hours is None else retention_hours
    if isinstance(hours, bool) or not isinstance(hours, int) or hours < 0:
        raise InputError(f"retention_hours: {hours!r} must be a whole number of hours >= 0")
    return hours


def _missing_columns(table_key: str, present: set[str]) -> list[tuple[str, str]]:
    """The declared (name, type) columns of a table that its stored schema lacks."""
    return [(n, t) for n, t in table_spec(table_key).column_types if n not in present]


def _check_optimize(
    table_key: str,
    zorder_by: tuple[str, ...],
    row_group_rows: int | None,
    delta_encoded: tuple[str, ...],
    small_file_mb: int | None,
) -> None:
    """Check OPTIMIZE's arguments before any backend runs it.

    Raises:
        InputError: naming the argument and its value.
    """
    _check_columns(table_key, zorder_by)
    _check_columns(table_key, delta_encoded, "delta_encoded")
    _check_row_group_rows(row_group_rows)
    _check_small_file_mb(small_file_mb)


# Delta's OPTIMIZE compacts the files below minFileSize into files of about maxFileSize.
_DELTA_OPTIMIZE_FILE_SIZES = ("spark.databricks.delta.optimize.minFileSize", "spark.databricks.delta.optimize.maxFileSize")


@contextlib.contextmanager
def _session_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set session configuration values for the block, then put back what was there."""
    before = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _check_small_file_mb(small_file_mb: int | None) -> None:
    if small_file_mb is not None and small_file_mb < 1:
        raise InputError(f"small_file_mb: {small_file_mb!r} must be at least 1 (or None for the engine's sizes)")


def _check_row_group_rows(rows: int | None) -> None:
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise InputError(f"row_group_rows: {rows!r} must be a whole number of rows >= 1 (or None)")


def _check_columns(table_key: str, columns: tuple[str, ...], argument: str = "zorder_by") -> None:
    unknown = [c for c in columns if c not in table_spec(table_key).column_names]
    if unknown:
        raise InputError(f"{argument}: {unknown} are not columns of {table_key}")
