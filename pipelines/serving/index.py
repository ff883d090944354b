"""An in-memory index of one audit data file: its timestamps sorted, its filter columns as small integer codes.

A search evaluates its match condition over these arrays (`pipelines.serving.condition`) to count the
matching rows and find the newest ones without decoding the file; only the rows of the page are then read
from the file (`pipelines.serving.rows`). Data files never change, so an index is built once per file and
shared by every table version that holds the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.runtime.storage import open_source
from pipelines.serving.row_files import RowFile

T = TypeVar("T")

TIME_COLUMN = "timestamp"
# The string columns a search can filter on (gold.search BODY_FILTERS, and the scope rules of
# gold.scopes: entity urn prefixes and platforms, domains), kept as codes.
CODED_COLUMNS = ("event_type", "entity_type", "aspect_name", "actor_urn", "entity_urn", "domain")
# The code of a null value.
NULL_CODE = -1
# Per coded column, the row masks of this many LIKE patterns are kept (`CodedColumn.rows_matching`).
MATCHING_PATTERNS = 16
# Per file, the row counts of this many filter conditions are kept (`FileIndex.count_of`).
REMEMBERED_COUNTS = 256


@dataclass(frozen=True)
class CodedColumn:
    """A string column as integer codes into its distinct values (NULL_CODE: null).

    The distinct values stay an Arrow array (a few bytes each): a file's entity urns run to tens of
    thousands, and Python strings and a dict of them would cost several times that per worker. The
    lookup from value to code is built the first time a search filters on the column.

    Attributes:
        codes: one code per index position (the smallest integer type that holds them).
        values: the distinct values; code i stands for values[i].
    """

    codes: np.ndarray
    values: pa.Array
    _matching: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)
    _rows_matching: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {value: code for code, value in enumerate(self.values.to_pylist())}

    @cached_property
    def value_counts(self) -> np.ndarray:
        """How many index positions hold each code (nulls not counted)."""
        return np.bincount(self.codes[self.codes >= 0], minlength=len(self.values))

    def codes_of(self, values: Sequence[str]) -> list[int]:
        """Return the codes of those `values` the column holds (values it never holds have none)."""
        positions = self._positions
        return [positions[v] for v in values if v in positions]

    def wanted(self, pattern: re.Pattern[str]) -> np.ndarray:
        """A lookup by code of which values fully match `pattern` (its last slot, the null code's, is False).

        Computed once per pattern over the distinct values (a file never changes), then reused: a scope's
        patterns are few and every request of the scope asks for the same ones.
        """
        found = self._matching.get(pattern.pattern)
        if found is None:
            found = np.zeros(len(self.values) + 1, dtype=bool)
            found[: len(self.values)] = [pattern.fullmatch(v) is not None for v in self.values.to_pylist()]
            self._matching[pattern.pattern] = found
        return found

    def rows_matching(self, pattern: re.Pattern[str]) -> np.ndarray:
        """Which index positions hold a value that fully matches `pattern` (one bool per position).

        Kept for up to MATCHING_PATTERNS patterns (then started afresh): a scope's patterns are the same in
        every request of the scope, and a request takes a slice of this array instead of looking up every
        row's code. Single dict operations only, so concurrent requests need no lock.
        """
        return _kept(self._rows_matching, pattern.pattern, MATCHING_PATTERNS, lambda: self.wanted(pattern)[self.codes])


@dataclass(frozen=True)
class FileIndex:
    """The searchable columns of one data file, sorted by time; rows without a timestamp are left out.

    Attributes:
        path: the file's local path.
        timestamps: epoch ms, ascending.
        rows: the file row number of each position (the file need not be sorted).
        columns: the coded filter columns, aligned with `timestamps`.
        constants: the partition values every row of the file shares (e.g. event_date as a date).
        row_group_starts: the file row number of the first row of each Parquet row group, ascending.
        column_names: the file's columns.
        row_file: the file's rows kept as a row file (None: rows are read from the Parquet file).
    """

    path: str
    timestamps: np.ndarray
    rows: np.ndarray
    columns: Mapping[str, CodedColumn]
    constants: Mapping[str, object]
    row_group_starts: np.ndarray
    column_names: frozenset[str]
    row_file: RowFile | None = None
    _counts: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        """The number of indexed rows."""
        return len(self.timestamps)

    def between(self, start_ms: int, end_ms: int) -> tuple[int, int]:
        """Return the positions [lo, hi) of the rows with start_ms <= timestamp < end_ms."""
        lo = int(np.searchsorted(self.timestamps, start_ms, side="left"))
        hi = int(np.searchsorted(self.timestamps, end_ms, side="left"))
        return lo, max(lo, hi)

    def count_of(self, key: str, count: Callable[[], int]) -> int:
        """Return the rows of the whole file matching the filters named `key`, counted by `count` the first time.

        Kept for up to REMEMBERED_COUNTS keys (then started afresh): the file never changes, and searches
        repeat their filters. Single dict operations only, so concurrent requests need no lock.
        """
        return _kept(self._counts, key, REMEMBERED_COUNTS, count)

    @property
    def nbytes(self) -> int:
        """The bytes its arrays hold."""
        arrays = [self.timestamps, self.rows, self.row_group_starts, *(c.codes for c in self.columns.values())]
        return sum(a.nbytes for a in arrays)


def _kept(kept: dict[str, T], key: str, limit: int, make: Callable[[], T]) -> T:
    """Return kept[key], made by `make` the first time; the dict is started afresh when it holds `limit` keys.

    Single dict operations only, so concurrent requests need no lock (two may make the same value).
    """
    found = kept.get(key)
    if found is None:
        found = make()
        if len(kept) >= limit:
            kept.clear()
        kept[key] = found
    return found


def build_file_index(path: str, partition: Mapping[str, object] | None = None) -> FileIndex:
    """Read the time and filter columns of the Parquet file at `path` into a FileIndex.

    Args:
        path: the data file's local path.
        partition: the file's partition values, typed as the table types them (delta-rs reads them so).
    """
    with open_source(path) as source:
        metadata = pq.read_metadata(source)
        present = set(metadata.schema.names)
        coded = [c for c in CODED_COLUMNS if c in present]
        table = pq.read_table(source, columns=[TIME_COLUMN, *coded], read_dictionary=coded, use_threads=False)
    times = table.column(TIME_COLUMN)
    known = np.asarray(pc.is_valid(times).to_numpy(zero_copy_only=False), dtype=bool)
    timestamps = np.asarray(pc.fill_null(times, 0).to_numpy(), dtype=np.int64)
    rows = np.flatnonzero(known).astype(np.int32) if not known.all() else np.arange(len(timestamps), dtype=np.int32)
    timestamps = timestamps[rows]
    if len(timestamps) > 1 and not bool(np.all(timestamps[1:] >= timestamps[:-1])):
        order = np.argsort(timestamps, kind="stable")
        timestamps, rows = timestamps[order], rows[order]
    columns = {name: _coded(table.column(name) if name in coded else None, rows, table.num_rows) for name in CODED_COLUMNS}
    starts = np.cumsum([0] + [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)])[:-1]
    return FileIndex(
        path=path,
        timestamps=timestamps,
        rows=rows,
        columns=columns,
        constants=dict(partition or {}),
        row_group_starts=np.asarray(starts, dtype=np.int64),
        column_names=frozenset(metadata.schema.names),
    )


def _coded(column: pa.ChunkedArray | None, rows: np.ndarray, file_rows: int) -> CodedColumn:
    """The codes of a dictionary-read string column at the index's `rows` (None: the file lacks the column)."""
    if column is None or file_rows == 0:
        return CodedColumn(np.full(len(rows), NULL_CODE, dtype=np.int8), pa.array([], pa.string()))
    combined = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_dictionary(combined.type):
        combined = pc.dictionary_encode(combined)
    values = combined.dictionary
    codes = np.asarray(pc.fill_null(combined.indices, NULL_CODE).to_numpy(), dtype=np.int64)[rows]
    return CodedColumn(codes.astype(_smallest_int(len(values))), values)


def _smallest_int(distinct: int) -> type:
    for candidate in (np.int8, np.int16, np.int32):
        if distinct <= np.iinfo(candidate).max:
            return candidate
    return np.int64
