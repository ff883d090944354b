"""The serving engines of the search API: in-process (an in-memory index over delta-rs) or the Spark session."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from conf.errors import ConfigError
from conf.settings import Settings
from conf.tables import AUDIT_EVENTS
from gold.search import RESULT_COLUMNS, page_upper_bound, to_match_condition, to_page, to_response
from gold.search_request import SearchRequest
from pipelines.runtime.home import home_of
from pipelines.runtime.storage import Storage, file_exists, parse_location, register_storage
from pipelines.serving.index import build_file_index
from pipelines.serving.index_store import IndexStore
from pipelines.serving.matches import Matches, find_matches
from pipelines.serving.rows import RowGroupCache, read_rows
from pipelines.serving.search import search
from pipelines.serving.snapshots import Snapshot, TableSnapshots, gone, open_snapshot

if TYPE_CHECKING:  # the in-process serving path imports no engine (docs/api.md#serving-processes)
    from pyspark.sql import SparkSession

ENGINES = ("inprocess", "spark")
# The columns a page can show (raw_event only when the request includes it).
PAGE_COLUMNS = (*RESULT_COLUMNS, "raw_event")
# Extra candidates read for a scrolled page: rows at the scroll key's own time may precede the key.
SCROLL_TIES = 16


class SearchEngine(Protocol):
    """What the API needs from an engine."""

    name: str

    def search(self, request: SearchRequest, now_ms: int | None = None) -> dict[str, Any]:
        """Return the search response of a validated request."""

    def health(self) -> dict[str, Any]:
        """Return facts showing the engine answers (raises when it does not)."""


class InProcessEngine:
    """Searches gold.audit_events in-process: an in-memory index of a pinned Delta version, then its page rows.

    The snapshot (from the Delta log, via delta-rs) holds an index per data file: timestamps sorted and
    the filter columns as integer codes (`pipelines.serving.index`). A search evaluates the request's
    match condition, the same sqlglot tree Spark runs as SQL, over the index of each file its window
    meets (`pipelines.serving.condition`): that gives the exact total and the newest matching rows. Only
    those rows are read from the Parquet files (`pipelines.serving.rows`) and put in page order after
    the scroll key (`gold.search.to_page`, the order the SQL page query renders).

    Args:
        settings: the lakehouse settings (table location, serve.version_check_seconds, serve.row_cache_mb,
            serve.index_dir: where the indexes are kept as files every worker maps, none: in memory;
            serve.row_files: whether page rows are kept there as row files too).
    """

    name = "inprocess"

    def __init__(self, settings: Settings):
        # Resolving the home registers its storage options for the files the engine reads.
        location = str(home_of(settings).table_locations[AUDIT_EVENTS])
        self.rows = RowGroupCache(settings.serve.row_cache_mb * 1024 * 1024, PAGE_COLUMNS)
        self._store = IndexStore(settings.serve.index_dir, row_columns_of(settings)) if settings.serve.index_dir else None
        build = build_file_index if self._store is None else self._store.index_of
        self.snapshots = TableSnapshots(location, settings.serve.version_check_seconds, retired=self._retire, build=build)

    def _retire(self, paths: set[str]) -> None:
        """Drop what the engine keeps of files no open version reads: their row groups and index files."""
        self.rows.forget(paths)
        if self._store is not None:
            self._store.forget(paths)

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
        matches = find_matches(snapshot, to_match_condition(resolved, now_ms), resolved.start_time,
                               resolved.end_time, page_upper_bound(resolved, now_ms))  # fmt: skip
        columns = PAGE_COLUMNS if resolved.include_raw else RESULT_COLUMNS
        try:
            rows = self._page(matches, resolved, columns, snapshot)
        except OSError:
            if not snapshot.files_exist():
                raise gone(snapshot.version) from None
            raise
        return to_response(rows, matches.total, resolved, snapshot.version)

    def _page(
        self, matches: Matches, request: SearchRequest, columns: tuple[str, ...], snapshot: Snapshot
    ) -> list[Mapping[str, Any]]:
        """Read the newest candidate rows and order them into the page, widening until the page is sure.

        Raises:
            VersionGoneError: when a later page's files are gone, even if their rows are still cached: a
                scroll answers from its version's files or not at all.
        """
        limit = request.size + (SCROLL_TIES if request.scroll is not None else 0)
        while True:
            candidates = matches.newest(limit)
            if not candidates.positions:
                return []
            if request.scroll is not None and not all(file_exists(index.path) for index, _ in candidates.positions):
                raise gone(snapshot.version)
            rows = [row for index, positions in candidates.positions for row in read_rows(self.rows, index, positions, columns)]
            page = to_page(rows, request)
            # Every matching row at or after the oldest candidate's time is a candidate, so a full page
            # from them is the page.
            if len(page) >= request.size or candidates.complete:
                return page
            limit *= 4

    def health(self) -> dict[str, Any]:
        """Return the audit table version the engine reads."""
        snapshot: Snapshot = self.snapshots.latest()
        return {"engine": self.name, "auditEventsVersion": snapshot.version}


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


def build_index_files(settings: Settings) -> bool:
    """Build the index files of gold.audit_events' latest version into serve.index_dir, in a process of its own.

    Building an index leaves freed memory on the builder's heap (about as much again as the index); built
    by a spawned process that then exits, none of it stays with the server, and the workers only map the
    files. Spawned, not forked: the Delta reader's runtime does not survive a fork.

    Returns:
        Whether the files were built (if not, each worker builds what it misses, as without this step).
    """
    if settings.serve.engine != "inprocess" or not settings.serve.index_dir:
        return False
    home = home_of(settings)
    arguments = (str(home.table_locations[AUDIT_EVENTS]), settings.serve.index_dir, row_columns_of(settings),
                 home.storage_options)  # fmt: skip
    builder = multiprocessing.get_context("spawn").Process(target=_index_latest, args=arguments, name="lakehouse-index")
    builder.start()
    builder.join()
    return builder.exitcode == 0


def _index_latest(location: str, index_dir: str, row_columns: tuple[str, ...], options: dict[str, str]) -> None:
    """(The spawned builder) index every data file of the latest version of the table at `location`."""
    register_storage(Storage(options), [parse_location(location)])
    open_snapshot(location, build=IndexStore(index_dir, row_columns).index_of)


def row_columns_of(settings: Settings) -> tuple[str, ...]:
    """The columns an IndexStore keeps as row files: the page columns, or none when serve.row_files is off."""
    return PAGE_COLUMNS if settings.serve.row_files else ()


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


def encode_json(response: Any) -> bytes:
    """Return a search response as JSON bytes (compact, UTF-8), ready to send.

    Encoded by orjson, several times faster than the standard library on pages of raw events; a raw
    event holding an integer beyond 64 bits, which orjson refuses, is encoded by the standard library.
    """
    try:
        return orjson.dumps(response)
    except orjson.JSONEncodeError:
        return json.dumps(response, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
