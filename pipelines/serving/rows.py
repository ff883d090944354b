"""Read given rows of data files: only the Parquet row groups holding them, decoded row groups kept in a cache.

A page is a few rows; reading them costs decoding the row groups that hold them (a compacted day has
small row groups for that reason). Searches mostly page through recent rows, so decoded row groups are
kept as Arrow record batches (one contiguous chunk per column: taking a few rows from one costs less
than from a table of chunked columns) in a least-recently-used cache bounded in bytes and shared by every
request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conf.errors import ConfigError
from conf.values import check_at_least
from pipelines.runtime.storage import open_source
from pipelines.serving.index import FileIndex

# Parsed Parquet footers kept by a RowGroupCache. A compacted day's footer (about 250 row groups of 1,024
# rows) takes about 3 MB parsed, 50 times its size on disk: all of a 10M-row table's would cost 170 MB per
# worker, while parsing one again takes about 4 ms. Searches read mostly the newest days' rows.
FOOTERS_KEPT = 16


class RowGroupCache:
    """Decoded Parquet row groups by (file, row group), least recently used dropped first.

    Args:
        max_bytes: the most bytes of decoded row groups kept (0: none kept).
        columns: the columns read and kept (those a file lacks read as nulls).
        footers: how many files' parsed footers are kept.
    """

    def __init__(self, max_bytes: int, columns: Sequence[str], footers: int = FOOTERS_KEPT):
        check_at_least("max_bytes", max_bytes, 0)
        if not columns:
            raise ConfigError("columns: at least one column must be read")
        self.columns = tuple(columns)
        self._max = max_bytes
        self._bytes = 0
        self._groups: OrderedDict[tuple[str, int], pa.RecordBatch] = OrderedDict()
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._footers_kept = footers
        self._lock = threading.Lock()

    @property
    def footers(self) -> int:
        """How many parsed footers are kept now."""
        return len(self._footers)

    @property
    def bytes(self) -> int:
        """The bytes the cached row groups hold."""
        return self._bytes

    def read(self, index: FileIndex, group: int) -> pa.RecordBatch:
        """Return row group `group` of the file of `index` with the cache's columns (those the file has)."""
        key = (index.path, group)
        with self._lock:
            batch = self._groups.get(key)
            if batch is not None:
                self._groups.move_to_end(key)
                return batch
        with open_source(index.path) as source:
            table = pq.ParquetFile(source, metadata=self._footer(index.path, source)).read_row_group(
                group, columns=[c for c in self.columns if c in index.column_names], use_threads=False
            ).combine_chunks()
        batches = table.to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
        if batch.nbytes <= self._max:
            with self._lock:
                if key not in self._groups:
                    self._groups[key] = batch
                    self._bytes += batch.nbytes
                while self._bytes > self._max:
                    _, dropped = self._groups.popitem(last=False)
                    self._bytes -= dropped.nbytes
        return batch

    def _footer(self, path: str, source: Any) -> pq.FileMetaData:
        """The parsed footer of the file at `path` (open as `source`), parsed again when not among the kept."""
        with self._lock:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
                return footer
        footer = pq.read_metadata(source)
        with self._lock:
            self._footers[path] = footer
            while len(self._footers) > self._footers_kept:
                self._footers.popitem(last=False)
        return footer

    def forget(self, paths: set[str]) -> None:
        """Drop the row groups and footers of files at `paths` (files no open table version reads)."""
        with self._lock:
            for key in [k for k in self._groups if k[0] in paths]:
                self._bytes -= self._groups.pop(key).nbytes
            for path in paths & self._footers.keys():
                del self._footers[path]


def read_rows(cache: RowGroupCache, index: FileIndex, positions: np.ndarray, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Return the rows at index `positions` of one file, with `columns` (some of the cache's), in row group order.

    Read from the file's row file when it has one, else from its decoded Parquet row groups.

    Args:
        cache: where decoded row groups are kept.
        index: the file's index.
        positions: index positions (not file row numbers).
        columns: the columns of each row.
    """
    file_rows = index.rows[positions].astype(np.int64)
    if index.row_file is not None:
        return index.row_file.read(file_rows, columns)
    groups = np.searchsorted(index.row_group_starts, file_rows, side="right") - 1
    offsets = file_rows - index.row_group_starts[groups]
    rows: list[dict[str, Any]] = []
    for group in np.unique(groups):
        batch = cache.read(index, int(group))
        names = set(batch.schema.names)  # column_names builds a new list on every access
        present = [c for c in columns if c in names]
        picked = batch.select(present).take(pa.array(offsets[groups == group])).to_pylist()
        rows += picked if len(present) == len(columns) else [{c: row.get(c) for c in columns} for row in picked]
    return rows
