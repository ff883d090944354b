"""What a table version's Parquet row groups say about time: exact counts and page bounds without a scan."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.parquet as pq

TIME_COLUMN = "timestamp"


@dataclass(frozen=True)
class RowGroupRange:
    """One Parquet row group: its rows and the time range its statistics give.

    Attributes:
        rows: the rows in the row group.
        min_timestamp, max_timestamp: the least and greatest timestamp (None: no statistics, or some
            timestamps are null, so the rows cannot be placed in time).
    """

    rows: int
    min_timestamp: int | None
    max_timestamp: int | None


def read_row_group_ranges(path: str, column: str = TIME_COLUMN) -> tuple[RowGroupRange, ...]:
    """Return the row groups of the Parquet file at `path` with the time range of `column`, from its footer."""
    metadata = pq.read_metadata(path)
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    index = names.index(column) if column in names else None
    ranges = []
    for number in range(metadata.num_row_groups):
        group = metadata.row_group(number)
        stats = group.column(index).statistics if index is not None else None
        known = stats is not None and stats.has_min_max and stats.has_null_count and stats.null_count == 0
        low, high = (stats.min, stats.max) if known else (None, None)
        ranges.append(RowGroupRange(group.num_rows, low if isinstance(low, int) else None,
                                    high if isinstance(high, int) else None))  # fmt: skip
    return tuple(ranges)


def count_rows_between(path: str, row_groups: list[int], start_ms: int, end_ms: int, column: str = TIME_COLUMN) -> int:
    """Return how many rows of `row_groups` of the Parquet file at `path` have start_ms <= `column` < end_ms."""
    times = pq.ParquetFile(path).read_row_groups(row_groups, columns=[column]).column(0)
    inside = pc.and_(pc.greater_equal(times, start_ms), pc.less(times, end_ms))
    return int(pc.sum(inside.cast("int64")).as_py() or 0)


@dataclass(frozen=True)
class TimeSpan:
    """Rows of one or more row groups whose time ranges chain together; no other row group reaches into it.

    Attributes:
        start: the least timestamp of the span.
        end: the greatest timestamp + 1 (exclusive).
        rows: the rows of its row groups.
    """

    start: int
    end: int
    rows: int


class TimeSpans:
    """The disjoint time spans of every row group of a table version, sorted by time.

    Row groups whose time ranges overlap merge into one span, so every row with a timestamp inside a
    span belongs to one of that span's row groups: the rows of whole spans are known from the footers.
    Files sorted by time with small row groups give many short spans; one unsorted file gives one long
    span.

    Args:
        spans: disjoint spans, sorted by start.
    """

    def __init__(self, spans: Iterable[TimeSpan]):
        self.spans = tuple(spans)
        self._ends = [s.end for s in self.spans]

    @classmethod
    def from_row_groups(cls, ranges: Iterable[RowGroupRange]) -> TimeSpans | None:
        """Merge row group time ranges into spans; None when some row group cannot be placed in time."""
        placed = []
        for r in ranges:
            if r.rows == 0:
                continue
            if r.min_timestamp is None or r.max_timestamp is None:
                return None
            placed.append(r)
        placed.sort(key=lambda r: r.min_timestamp)
        spans: list[TimeSpan] = []
        for r in placed:
            if spans and r.min_timestamp < spans[-1].end:
                last = spans[-1]
                spans[-1] = TimeSpan(last.start, max(last.end, r.max_timestamp + 1), last.rows + r.rows)
            else:
                spans.append(TimeSpan(r.min_timestamp, r.max_timestamp + 1, r.rows))
        return cls(spans)

    def page_since(self, start: int, upper: int, size: int) -> int | None:
        """Return the latest time from which [since, upper) surely holds `size` rows of the window, or None.

        Only whole spans inside [start, upper) count, so the bound holds for an unfiltered search: its
        page (the newest `size` rows below `upper`) lies in [since, upper).
        """
        found = 0
        index = bisect.bisect_right(self._ends, upper)  # spans[:index] end at or before `upper`
        for span in reversed(self.spans[:index]):
            if span.start < start:
                return None
            found += span.rows
            if found >= size:
                return span.start if span.start > start else None
        return None
