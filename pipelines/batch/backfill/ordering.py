"""DataHub's version order made on the client: rows read in any order, put in `createdon` ranges, each sorted.

A MariaDB / MySQL server asked for `ORDER BY createdon` sorts the whole table with its text columns
(DataHub's DDL has no index on `createdon`): the slowest part of a backfill. Instead the server is asked
for the `createdon` of every `window_rows`-th row in order (a sort of one narrow column), which cut the
time into ranges of about a window each; the rows are then read in the server's own order in one
statement (one consistent read), each record batch split by range and spilled to one local Arrow file,
and the ranges are read back one at a time, each sorted in DataHub's order. Every row of one `createdon`
is in one range, so the ranges in turn give the table in that order; memory holds a range, not the table.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# DataHub's order (`VersionOrderer`): by createdon; for one createdon the archived versions (1..N) first,
# the version 0 rows last; then by urn, aspect and version so that the order is total.
_ORDER = [("createdon_us", "ascending"), ("_current", "ascending"), ("urn", "ascending"), ("aspect", "ascending"),
          ("version", "ascending")]  # fmt: skip


def in_version_order(table: pa.Table) -> pa.Table:
    """The rows (the reader's COLUMNS) sorted in DataHub's version order (strings by their bytes)."""
    keyed = table.append_column("_current", pc.equal(table.column("version"), 0))
    return table.take(pc.sort_indices(keyed, sort_keys=_ORDER))


def range_of(bounds: np.ndarray, createdon_us: np.ndarray) -> np.ndarray:
    """Each row's range: 0 for `createdon_us` <= bounds[0], i for bounds[i-1] < it <= bounds[i], len(bounds) after."""
    return np.searchsorted(bounds, createdon_us, side="left")


def ranges_in_version_order(batches: Iterable[pa.RecordBatch], bounds: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of `batches` (any order) in DataHub's version order, one `createdon` range at a time.

    Args:
        batches: record batches with the reader's COLUMNS, in any order.
        bounds: ascending `createdon` (µs) bounds of the ranges (`range_of`); rows after the last bound
            (written after the bounds were read) form the last range.

    Returns:
        Record batches in version order. The batches are spilled first to a temporary file without a
        name, which the system frees when the iterator ends or the process does, however it ends (a
        backfill killed with SIGKILL leaves no file behind).
    """
    with tempfile.TemporaryFile(prefix="lakehouse-backfill-") as spill:
        ranges = _spilled_by_range(batches, bounds, spill)
        if ranges is None:
            return
        spill.seek(0)
        reader = pa.ipc.open_file(pa.PythonFile(spill, mode="r"))
        for indices in ranges:
            if indices:
                table = pa.Table.from_batches([reader.get_batch(i) for i in indices])
                yield from in_version_order(table).to_batches()


def _spilled_by_range(batches: Iterable[pa.RecordBatch], bounds: np.ndarray, spill: BinaryIO) -> list[list[int]] | None:
    """Write each batch's rows to `spill` as one record batch per range; return each range's batch numbers.

    Returns:
        Per range, the numbers of its record batches in the file; None when there were no rows.
    """
    ranges: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    writer = None
    written = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pa.ipc.new_file(pa.PythonFile(spill, mode="w"), batch.schema)
            row_ranges = range_of(bounds, batch.column("createdon_us").to_numpy(zero_copy_only=False))
            order = np.argsort(row_ranges, kind="stable")
            grouped, grouped_ranges = batch.take(pa.array(order)), row_ranges[order]
            starts = np.concatenate(([0], np.flatnonzero(np.diff(grouped_ranges)) + 1))
            ends = np.append(starts[1:], len(grouped_ranges))
            for start, end in zip(starts.tolist(), ends.tolist()):
                writer.write_batch(grouped.slice(start, end - start))
                ranges[int(grouped_ranges[start])].append(written)
                written += 1
    finally:
        if writer is not None:
            writer.close()
    return ranges if writer is not None else None
