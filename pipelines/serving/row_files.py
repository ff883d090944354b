"""A data file's page columns kept as an uncompressed Arrow file of small batches: a page's rows read without decoding.

Reading one row from Parquet costs decoding its whole row group (about 1 ms for 1,024 audit rows, most of
it the raw events). Searches filtered on an actor take 20-100 rows from as many row groups. A row file
holds the same rows in file order, in batches of ROWS_PER_BATCH, uncompressed: reading a row costs one
positioned read of its batch and no decoding (about 0.015 ms a row, against 1 ms). The price is disk:
about 2.6 times the Parquet file (`serve.row_files` turns them off).

Read, not memory-mapped: mapped, every page a worker ever touched would count in its resident memory
(at 10M rows the workers' summed RSS passed 2.7 GB); read, a batch is a short-lived buffer and the page
cache, shared and reclaimable, holds the file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.runtime.storage import open_source

# Rows per batch: a row costs reading its whole batch, so small (32 rows read 10% faster than 128 over
# the contract mix's searches), but each batch carries a message of about a kilobyte.
ROWS_PER_BATCH = 32
# Batches are written through a buffer of this size: a write call per batch costs more system time than the copy.
WRITE_BUFFER_BYTES = 1 << 20


def write_row_file(path: str, columns: Sequence[str], target: Path) -> None:
    """Write `columns` (those the Parquet file at `path` has) of every row, in file order, as the row file `target`.

    Batch i holds file rows [i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH). One row group is decoded at a
    time.
    """
    with open_source(path) as source:
        parquet = pq.ParquetFile(source)
        present = [c for c in columns if c in parquet.schema_arrow.names]
        schema = pa.schema([parquet.schema_arrow.field(c) for c in present])
        write_arrow_file(target, schema, _row_batches(parquet, present))


def _row_batches(parquet: pq.ParquetFile, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The file's rows as batches of ROWS_PER_BATCH (the last one shorter), whatever its row groups' sizes."""
    pending: list[pa.Table] = []
    pending_rows = 0
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=columns, use_threads=False)
        pending.append(table)
        pending_rows += table.num_rows
        whole = pending_rows - pending_rows % ROWS_PER_BATCH
        if whole:
            combined = pa.concat_tables(pending).combine_chunks()
            yield from combined.slice(0, whole).to_batches(max_chunksize=ROWS_PER_BATCH)
            pending, pending_rows = [combined.slice(whole)], pending_rows - whole
    if pending_rows:
        yield from pa.concat_tables(pending).combine_chunks().to_batches(max_chunksize=ROWS_PER_BATCH)


def write_arrow_file(target: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> None:
    """Write `batches` as the Arrow IPC file `target`: written beside it and renamed into place, so a reader
    that finds the file finds it whole."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    with pa.OSFile(str(partial), "wb") as file, pa.BufferedOutputStream(file, WRITE_BUFFER_BYTES) as sink, \
            pa.ipc.new_file(sink, schema) as writer:  # fmt: skip
        for batch in batches:
            writer.write_batch(batch)
    os.replace(partial, target)


class RowFile:
    """A row file open for reading rows by file row number (by positioned reads, from any thread).

    Args:
        target: the row file's path.
    """

    def __init__(self, target: str | os.PathLike[str]):
        self._reader = pa.ipc.open_file(pa.OSFile(str(target)))
        self._lock = threading.Lock()  # one IPC reader, not documented as safe for concurrent reads
        self.names = frozenset(self._reader.schema.names)

    def read(self, file_rows: np.ndarray, columns: Sequence[str]) -> list[dict[str, Any]]:
        """Return the rows at `file_rows` with `columns` (None for those the file lacks), in ascending row order.

        Each run of consecutive rows in one batch is a zero-copy slice of it; the slices are joined and
        converted once (a take and a conversion per batch cost five times as much for scattered rows).
        """
        file_rows = np.sort(np.asarray(file_rows, dtype=np.int64))
        if not len(file_rows):
            return []
        batches = file_rows // ROWS_PER_BATCH
        breaks = np.flatnonzero((np.diff(file_rows) != 1) | (np.diff(batches) != 0)) + 1
        starts, ends = np.concatenate(([0], breaks)), np.concatenate((breaks, [len(file_rows)]))
        with self._lock:
            parts = [self._reader.get_batch(int(batches[s])).slice(int(file_rows[s] % ROWS_PER_BATCH), int(e - s))
                     for s, e in zip(starts, ends, strict=True)]  # fmt: skip
        present = [c for c in columns if c in self.names]
        rows = pa.concat_batches(parts).select(present).to_pylist()
        return rows if len(present) == len(columns) else [{c: row.get(c) for c in columns} for row in rows]
