"""Open snapshots of a gold Delta table for the serving engine: the latest one, and pinned older ones."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable

from conf.errors import ConfigError, RequestError
from conf.locations import is_object_url
from conf.values import check_at_least
from pipelines.runtime.storage import delta_storage_options, file_exists, table_exists
from pipelines.serving.index import FileIndex, build_file_index

# Pinned versions kept open besides the latest: scrolls that started a few publishes ago.
DEFAULT_KEEP_VERSIONS = 8
# Reader features whose files cannot be read as plain Parquet (rows deleted in side files, renamed columns).
UNSUPPORTED_READER_FEATURES = ("deletionVectors", "columnMapping")
# The version of a table that does not exist yet.
NO_TABLE = -1
# Threads that build the indexes of a version's new files.
INDEX_THREADS = os.cpu_count() or 1


class VersionGoneError(RequestError):
    """A scroll id names a table version whose files are gone (removed by VACUUM): served as HTTP 410."""

    status = 410


@dataclass(frozen=True)
class DataFile:
    """One data file of a table version, with the time range the Delta log's statistics give for it.

    Attributes:
        path: the file's absolute local path.
        min_timestamp, max_timestamp: the least and greatest `timestamp` in the file (None: no statistics).
        index: the file's searchable columns in memory (None: not built, e.g. in tests of file pruning).
    """

    path: str
    min_timestamp: int | None
    max_timestamp: int | None
    index: FileIndex | None = None

    def overlaps(self, start_ms: int, end_ms: int) -> bool:
        """Return whether the file may hold rows with start_ms <= timestamp < end_ms."""
        below = self.max_timestamp is not None and self.max_timestamp < start_ms
        above = self.min_timestamp is not None and self.min_timestamp >= end_ms
        return not (below or above)


@dataclass(frozen=True)
class Snapshot:
    """One table version opened for reading: exactly that version's data files.

    Attributes:
        version: the Delta table version.
        files: the version's data files, with their time ranges for pruning and their indexes.
    """

    version: int
    files: tuple[DataFile, ...]

    def files_between(self, start_ms: int, end_ms: int) -> list[DataFile]:
        """Return the files that may hold rows in [start_ms, end_ms)."""
        return [f for f in self.files if f.overlaps(start_ms, end_ms)]

    def files_exist(self) -> bool:
        """Return whether every data file of the version is still on disk (VACUUM removes them)."""
        return all(file_exists(f.path) for f in self.files)


def open_snapshot(
    location: str,
    version: int | None = None,
    partition_column: str = "event_date",
    indexes: dict[str, FileIndex] | None = None,
    build: Callable[[str, Mapping[str, object]], FileIndex] = build_file_index,
) -> Snapshot:
    """Open one version of the Delta table at `location` (None: the latest) from its log, indexing its files.

    A table not created yet opens as an empty snapshot of version -1 (searches find nothing until the
    pipeline creates it).

    Args:
        location: the table's local storage location.
        version: the version to open.
        partition_column: the table's partition column, which every file path must name (`col=value/`).
        indexes: file indexes already built, by file path (data files never change, so each is built
            once); the ones built now are added to it.
        build: returns the index of a data file given its path and partition values.

    Raises:
        ConfigError: when the table's files cannot be read as plain Parquet with the partition value in
            the path.
    """
    options = delta_storage_options(location)
    if version is None and not table_exists(location):
        return Snapshot(version=NO_TABLE, files=())
    table = DeltaTable(location, version=version, storage_options=options)
    features = [f for f in (table.protocol().reader_features or []) if f in UNSUPPORTED_READER_FEATURES]
    if features:
        raise ConfigError(f"serve.engine: inprocess cannot read {location} (reader features {features}); use spark")
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    paths = [unquote(p) for p in actions["path"]]
    partitions = actions.get(f"partition.{partition_column}", [None] * len(paths))
    for path, value in zip(paths, partitions, strict=True):
        if value is not None and f"{partition_column}={value}/" not in path:
            raise ConfigError(f"serve.engine: inprocess needs {partition_column}=<value>/ in file paths; {path} has not")
    minimum = actions.get("min.timestamp", [None] * len(paths))
    maximum = actions.get("max.timestamp", [None] * len(paths))
    indexes = {} if indexes is None else indexes
    local_paths = [f"{location.rstrip('/')}/{path}" if is_object_url(location) else str(Path(location) / path) for path in paths]
    missing = [(p, v) for p, v in zip(local_paths, partitions, strict=True) if p not in indexes]
    # Workers that share an IndexStore start at different files, so they build different ones side by side.
    if missing:
        turn = os.getpid() % len(missing)
        missing = missing[turn:] + missing[:turn]
    # Parquet decoding releases the GIL: the files of a new version are indexed side by side.
    with ThreadPoolExecutor(max_workers=min(INDEX_THREADS, max(1, len(missing)))) as pool:
        built = pool.map(lambda item: build(item[0], {partition_column: item[1]} if item[1] is not None else {}),
                         missing)  # fmt: skip
        indexes.update(zip((p for p, _ in missing), built, strict=True))
    files = [DataFile(local, _millis(low), _millis(high), indexes[local])
             for local, low, high in zip(local_paths, minimum, maximum, strict=True)]  # fmt: skip
    return Snapshot(version=table.version(), files=tuple(files))


def _millis(value: object) -> int | None:
    return value if isinstance(value, int) else None


class TableSnapshots:
    """The snapshots of one Delta table, opened once and shared by every request.

    `latest()` looks for a newer table version at most once per `check_interval_s`; one request does the
    (incremental, log-only) check while the others keep reading the snapshot they have, so a switch to a
    new version never fails or blocks requests in flight. Requests that page with a scroll id read the
    version their first page read, through `at(version)`.

    Args:
        location: the table's storage location.
        check_interval_s: the least time between two checks for a new version.
        keep_versions: how many older versions stay open for scrolls.
        retired: called with the paths of files no open version reads any more (after compaction or VACUUM).
        build: returns the index of a data file given its path and partition values (e.g. mapped from an
            IndexStore shared by the server's workers).
    """

    def __init__(
        self,
        location: str,
        check_interval_s: float,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        retired: Callable[[set[str]], None] | None = None,
        build: Callable[[str, Mapping[str, object]], FileIndex] = build_file_index,
    ):
        check_at_least("check_interval_s", check_interval_s, 0)
        check_at_least("keep_versions", keep_versions, 1)
        self._location = location
        self._interval = check_interval_s
        self._keep = keep_versions
        self._retired = retired
        self._build = build
        # Indexes by data file path, shared by every version opened (files are written once).
        self._indexes: dict[str, FileIndex] = {}
        self._latest = open_snapshot(location, indexes=self._indexes, build=build)
        self._options = delta_storage_options(location)
        self._probe = DeltaTable(location, storage_options=self._options) if self._latest.version != NO_TABLE else None
        self._checked = time.monotonic()
        self._check_lock = threading.Lock()
        self._pinned: OrderedDict[int, Snapshot] = OrderedDict()
        self._pinned_lock = threading.Lock()

    @property
    def location(self) -> str:
        """The table's storage location."""
        return self._location

    def latest(self) -> Snapshot:
        """Return the newest snapshot seen, looking for a newer version when the interval has passed."""
        if time.monotonic() - self._checked >= self._interval and self._check_lock.acquire(blocking=False):
            try:
                self._refresh()
            finally:
                self._checked = time.monotonic()
                self._check_lock.release()
        return self._latest

    def _refresh(self) -> None:
        if self._probe is None:
            if not table_exists(self._location):
                return
            self._probe = DeltaTable(self._location, storage_options=self._options)
        self._probe.update_incremental()
        version = self._probe.version()
        if version != self._latest.version:
            fresh = open_snapshot(self._location, version, indexes=self._indexes, build=self._build)
            self._remember(self._latest)
            self._latest = fresh
            self._forget_indexes()

    def at(self, version: int) -> Snapshot:
        """Return the snapshot of `version`, opening it when it is not open yet.

        Raises:
            VersionGoneError: when the version's log or data files are gone (VACUUM) or it never existed.
        """
        latest = self._latest
        if version == latest.version:
            return latest
        with self._pinned_lock:
            snapshot = self._pinned.get(version)
            if snapshot is not None:
                self._pinned.move_to_end(version)
        if snapshot is None:
            snapshot = self._open_pinned(version)
        if not snapshot.files_exist():
            with self._pinned_lock:
                self._pinned.pop(version, None)
            raise gone(version)
        return snapshot

    def _open_pinned(self, version: int) -> Snapshot:
        try:
            snapshot = open_snapshot(self._location, version, indexes=self._indexes, build=self._build)
        except ConfigError:
            raise
        except Exception:  # delta-rs raises its own errors for a version it cannot load
            if version > self._latest.version:
                # Newer than any version seen and not in the log either: only a forged scroll id names one.
                raise RequestError(
                    f"scrollId: names table version {version}, which does not exist; restart the search"
                ) from None
            raise gone(version) from None
        self._remember(snapshot)
        return snapshot

    def _forget_indexes(self) -> None:
        """Drop the indexes of files no open version reads (compaction and VACUUM retire files)."""
        with self._pinned_lock:
            snapshots = [self._latest, *self._pinned.values()]
        live = {f.path for snapshot in snapshots for f in snapshot.files}
        retired = {p for p in self._indexes if p not in live}
        for path in retired:
            self._indexes.pop(path, None)
        if retired and self._retired is not None:
            self._retired(retired)

    def _remember(self, snapshot: Snapshot) -> None:
        with self._pinned_lock:
            self._pinned[snapshot.version] = snapshot
            self._pinned.move_to_end(snapshot.version)
            while len(self._pinned) > self._keep:
                self._pinned.popitem(last=False)


def gone(version: int) -> VersionGoneError:
    """Return the error of a scroll whose table version can no longer be read."""
    return VersionGoneError(
        f"scrollId: the table version {version} this search was paging through has been removed (VACUUM); "
        "restart the search without scrollId"
    )
