"""Serving indexes kept as Arrow files that every worker memory-maps: built once per data file, shared in memory.

Each worker of `lakehouse serve` searches the same table versions. Built in each worker, the indexes of a
10M-row table would cost their 200 MB once per worker, plus what building them leaves on each worker's
heap. Kept as uncompressed Arrow IPC files and memory-mapped read-only, their pages are the page cache's,
shared by every worker that maps them: the first worker to need a file's index builds it (under a lock
file, so the others wait for it rather than build it too), the others map what it wrote.

Beside each index the store keeps the file's page columns as a row file (`pipelines.serving.row_files`),
so that reading a page's rows decodes nothing.

A data file never changes, so its index file is named by the file's path and stays valid for as long as
the folder is kept (`serve.index_dir`; by default a fresh folder per server run).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from conf.errors import ConfigError
from pipelines.serving.index import CODED_COLUMNS, CodedColumn, FileIndex, build_file_index
from pipelines.serving.row_files import RowFile, write_arrow_file, write_row_file

# Schema metadata key of an index file: its row group starts, column names, and where each column's
# distinct values are in the values file.
METADATA_KEY = b"lakehouse.index"
# Bumped when the layout of an index file changes, so a kept folder is never misread.
FORMAT = 1


class IndexStore:
    """The index files of one folder: `index_of` maps a data file's index, building it first when missing.

    Args:
        directory: the folder of the index files (created when missing).
        row_columns: the columns kept in each data file's row file (none: no row files are kept).
    """

    def __init__(self, directory: str | os.PathLike[str], row_columns: Sequence[str] = ()):
        self.directory = Path(directory)
        self.row_columns = tuple(row_columns)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"serve.index_dir: cannot create {str(self.directory)!r}: {error}") from None

    def index_of(self, path: str, partition: Mapping[str, object] | None = None) -> FileIndex:
        """Return the index of the data file at `path`, mapped from its index file (built now when missing).

        Args:
            path: the data file's path.
            partition: the file's partition values (kept on the index, not in the file).
        """
        positions, rows, values = self._files(path)
        kept_rows = rows if self.row_columns else None
        for _ in range(2):
            if not values.exists() or (kept_rows is not None and not kept_rows.exists()):
                with _locked(positions.with_suffix(".lock")):
                    # Rows first: the values file, written last, tells the others the index is whole.
                    if kept_rows is not None and not kept_rows.exists():
                        write_row_file(path, self.row_columns, kept_rows)
                    if not values.exists():
                        write_index(build_file_index(path, partition), positions, values)
            with contextlib.suppress(FileNotFoundError):  # removed by a worker that retired the file meanwhile
                return read_index(path, positions, values, partition, kept_rows)
        return build_file_index(path, partition)

    def forget(self, paths: set[str]) -> None:
        """Remove the index files of data files no open table version reads (workers mapping them keep reading)."""
        for path in paths:
            for file in self._files(path):
                with contextlib.suppress(FileNotFoundError):
                    file.unlink()

    def _files(self, path: str) -> tuple[Path, Path, Path]:
        """The index's positional arrays, the row file and the distinct values of the data file at `path`."""
        name = f"v{FORMAT}-{hashlib.sha256(path.encode()).hexdigest()[:40]}"
        return (self.directory / f"{name}.arrow", self.directory / f"{name}.rows.arrow",
                self.directory / f"{name}.values.arrow")  # fmt: skip


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (an advisory lock; released when the holder exits, even by a crash)."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_index(index: FileIndex, positions: Path, values: Path) -> None:
    """Write `index` as two Arrow files: its positional arrays, then its columns' distinct values.

    Each file is written beside its name and renamed into place, values last: a reader that finds the
    values file finds a whole index.
    """
    names = list(index.columns)
    arrays = [pa.array(index.timestamps), pa.array(index.rows), *(pa.array(index.columns[n].codes) for n in names)]
    spans, start = {}, 0
    for name in names:
        count = len(index.columns[name].values)
        spans[name] = [start, count]
        start += count
    metadata = {
        "format": FORMAT,
        "row_group_starts": index.row_group_starts.tolist(),
        "column_names": sorted(index.column_names),
        "values": spans,
    }
    batch = pa.record_batch(arrays, names=["timestamp", "row", *(f"code:{n}" for n in names)])
    batch = batch.replace_schema_metadata({METADATA_KEY: json.dumps(metadata)})
    distinct = [index.columns[n].values.cast(pa.large_string()) for n in names]
    all_values = pa.concat_arrays(distinct) if distinct else pa.array([], pa.large_string())
    write_arrow_file(positions, batch.schema, [batch])
    values_batch = pa.record_batch([all_values], names=["value"])
    write_arrow_file(values, values_batch.schema, [values_batch])


def read_index(
    path: str, positions: Path, values: Path, partition: Mapping[str, object] | None = None, rows: Path | None = None
) -> FileIndex:
    """Map the index files of the data file at `path` (no copy: the arrays are views of the mapped pages).

    Args:
        path: the data file's path.
        positions, values: its index files.
        partition: the file's partition values.
        rows: its row file (None: its rows are read from the data file).

    Raises:
        ConfigError: when the files are not an index of this layout.
    """
    batch = pa.ipc.open_file(pa.memory_map(str(positions))).get_batch(0)
    metadata = json.loads((batch.schema.metadata or {}).get(METADATA_KEY, b"{}"))
    if metadata.get("format") != FORMAT:
        raise ConfigError(f"serve.index_dir: {positions} is not a serving index of format {FORMAT}")
    all_values = pa.ipc.open_file(pa.memory_map(str(values))).get_batch(0).column(0)
    columns = {}
    for name in CODED_COLUMNS:
        start, count = metadata["values"][name]
        codes = batch.column(f"code:{name}").to_numpy()
        columns[name] = CodedColumn(codes, all_values.slice(start, count))
    return FileIndex(
        path=path,
        timestamps=batch.column("timestamp").to_numpy(),
        rows=batch.column("row").to_numpy(),
        columns=columns,
        constants=dict(partition or {}),
        row_group_starts=np.asarray(metadata["row_group_starts"], dtype=np.int64),
        column_names=frozenset(metadata["column_names"]),
        row_file=RowFile(rows) if rows is not None else None,
    )
