"""The serving engines of the search API: in-process (delta-rs + DuckDB) or the Spark session."""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

import duckdb
from pyspark.sql import SparkSession
from sqlglot import exp

from conf.errors import ConfigError
from conf.settings import Settings
from conf.tables import table_location
from gold.search import SearchRequest
from pipelines.serving.search import run_search, search
from pipelines.serving.snapshots import Snapshot, TableSnapshots, gone

ENGINES = ("inprocess", "spark")


class SearchEngine(Protocol):
    """What the API needs from an engine."""

    name: str

    def search(self, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
        """Return the search response of a validated request."""

    def health(self) -> dict[str, Any]:
        """Return facts showing the engine answers (raises when it does not)."""


class InProcessEngine:
    """Searches gold.audit_events in-process: DuckDB over the Parquet files of a pinned Delta version.

    The snapshot (from the Delta log, via delta-rs, and the files' Parquet footers) names the version's
    files, each file's time range and its row groups' time ranges; a query reads only the files
    overlapping its time range, with DuckDB's own Parquet reader (the partition column from the
    `event_date=` path), which skips the row groups outside it. An unfiltered search's total and the
    slice holding its page come from the row groups' row counts and time ranges (see `run_search`).
    One DuckDB database serves every request, each on its own cursor; DuckDB caches the files' Parquet
    footers across requests.

    Args:
        settings: the lakehouse settings (table location, serve.version_check_seconds).
        threads: DuckDB worker threads per query (default: the machine's cores).
    """

    name = "inprocess"

    def __init__(self, settings: Settings, threads: int | None = None):
        location = str(table_location(settings, "gold.audit_events"))
        self.snapshots = TableSnapshots(location, settings.serve.version_check_seconds)
        threads = threads or os.cpu_count() or 1
        # Only what the wheel carries: no extension is installed or loaded at run time.
        self._db = duckdb.connect(
            config={"threads": threads, "autoinstall_known_extensions": False, "autoload_known_extensions": False}
        )
        # Parquet footers are read once per file, not once per query.
        self._db.execute("SET parquet_metadata_cache = true")

    def search(self, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
        """Return the response of `request`, read from the version its scroll id pins, else the latest.

        Raises:
            RequestError: for a request the contract rejects.
            VersionGoneError: when the pinned version has been vacuumed.
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        pinned = request.scroll is not None and request.scroll.table_version >= 0
        snapshot = self.snapshots.at(request.scroll.table_version) if pinned else self.snapshots.latest()
        resolved = request.with_window(now_ms)

        def source(start: int, end: int) -> exp.Expression | None:
            files = snapshot.files_between(start, end)
            return _parquet_source(files) if files else None

        with self._db.cursor() as cursor:
            try:
                return run_search(lambda sql: _rows(cursor, sql), source, "duckdb", resolved, now_ms, snapshot.version,
                                  snapshot)  # fmt: skip
            except (duckdb.IOException, duckdb.InvalidInputException, OSError):
                if not snapshot.files_exist():
                    raise gone(snapshot.version) from None
                raise

    def health(self) -> dict[str, Any]:
        """Return the audit table version the engine reads."""
        snapshot: Snapshot = self.snapshots.latest()
        return {"engine": self.name, "auditEventsVersion": snapshot.version}


def _parquet_source(files: list[str]) -> exp.Expression:
    """DuckDB's read_parquet over `files`, the partition column typed from the `event_date=` paths."""
    hive_types = exp.Struct(expressions=[exp.PropertyEQ(this=exp.Literal.string("event_date"),
                                                        expression=exp.Literal.string("DATE"))])  # fmt: skip
    return exp.Anonymous(
        this="read_parquet",
        expressions=[
            exp.Array(expressions=[exp.Literal.string(path) for path in files]),
            exp.PropertyEQ(this=exp.column("hive_partitioning"), expression=exp.true()),
            exp.PropertyEQ(this=exp.column("hive_types"), expression=hive_types),
        ],
    )


def _rows(cursor: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    return cursor.sql(sql).to_arrow_table().to_pylist()


class SparkEngine:
    """Searches with Spark SQL on an open session (gold tables in a catalog, e.g. on a cluster).

    Args:
        settings: the lakehouse settings.
        spark: the session every request uses.
    """

    name = "spark"

    def __init__(self, settings: Settings, spark: SparkSession):
        self._settings = settings
        self._spark = spark

    def search(self, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
        """Return the response of `request`, read from the table's latest version."""
        return search(self._spark, self._settings, request, now_ms)

    def health(self) -> dict[str, Any]:
        """Run a trivial query on the session."""
        self._spark.sql("SELECT 1").collect()
        return {"engine": self.name}


def open_engine(settings: Settings, spark: SparkSession | None = None) -> SearchEngine:
    """Return the engine `settings.serve.engine` names.

    Raises:
        ConfigError: when the Spark engine is asked for without a session.
    """
    if settings.serve.engine == "spark":
        if spark is None:
            raise ConfigError("serve.engine: 'spark' needs an open Spark session")
        return SparkEngine(settings, spark)
    return InProcessEngine(settings)
