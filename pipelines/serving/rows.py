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
from pipelines.runtime.storage import open_source
from pipelines.serving.index import FileIndex



class RowGroupCache:
    """Decoded Parquet row groups by (file, row group), least recently used dropped first.

    Args:
        max_bytes: the most bytes of decoded row groups kept (0: none kept).
        columns: the columns read and kept (those a file lacks read as nulls).
    """

    def __init__(self, max_bytes: int, columns: Sequence[str]):
        if max_bytes < 0:
            raise ConfigError(f"max_bytes: {max_bytes!r} must be at least 0")
        if not columns:
            raise ConfigError("columns: at least one column must be read")
        self.columns = tuple(columns)
        self._max = max_bytes
        self._bytes = 0
        self._groups: OrderedDict[tuple[str, int], pa.RecordBatch] = OrderedDict()
        self._lock = threading.Lock()

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
        names = index.metadata.schema.names
        with open_source(index.path) as source:
            table = pq.ParquetFile(source, metadata=index.metadata).read_row_group(
                group, columns=[c for c in self.columns if c in names], use_threads=False
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

    def forget(self, paths: set[str]) -> None:
        """Drop the row groups of files at `paths` (files no open table version reads)."""
        with self._lock:
            for key in [k for k in self._groups if k[0] in paths]:
                self._bytes -= self._groups.pop(key).nbytes


def read_rows(cache: RowGroupCache, index: FileIndex, positions: np.ndarray, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Return the rows at index `positions` of one file, with `columns` (some of the cache's), in row group order.

    Args:
        cache: where decoded row groups are kept.
        index: the file's index.
        positions: index positions (not file row numbers).
        columns: the columns of each row.
    """
    file_rows = index.rows[positions].astype(np.int64)
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
