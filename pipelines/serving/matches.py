"""The rows of a table snapshot that match a search: the exact total, and the newest of them as page candidates.

A search over a long window meets many files, most of them wholly inside the window. For those the
window's conditions hold on every row, so the file's total depends on the filters alone: it is counted
from the coded column's value counts (one IN or = filter) or counted once per filter and remembered on
the file's index (files never change). The row masks, which cost a pass over the file's rows, are then
only evaluated for the files the page's newest rows can come from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from sqlglot import exp

from pipelines.serving.condition import compile_condition, compile_file_count, count_matching
from pipelines.serving.index import TIME_COLUMN, FileIndex
from pipelines.serving.snapshots import Snapshot

# The columns a search's window bounds (gold.search.to_match_condition): the time and the day partition.
WINDOW_COLUMNS = frozenset({TIME_COLUMN, "event_date"})


@dataclass(frozen=True)
class Candidates:
    """The newest matching rows below the page's upper bound, per file.

    Attributes:
        positions: (file index, ascending index positions) for each file with candidates.
        complete: whether they are every matching row below the upper bound.
    """

    positions: tuple[tuple[FileIndex, np.ndarray], ...]
    complete: bool


class FileMatches:
    """The matching rows of one file: positions [lo, hi) hold its window, [lo, upper) the rows below the page bound.

    Args:
        index: the file's index.
        lo, hi: the positions of the window.
        upper: the first position at or after the page's upper bound (lo <= upper <= hi).
        evaluate: returns which positions of [lo, hi) match (True: all of them); called at most once, and
            only when the rows themselves are needed.
        total: the matching rows of the window when known without the mask.
    """

    def __init__(self, index: FileIndex, lo: int, hi: int, upper: int, evaluate: Callable[[], np.ndarray | bool],
                 total: int | None = None):  # fmt: skip
        self.index, self.lo, self.hi, self.upper = index, lo, hi, upper
        self._evaluate = evaluate
        if total is not None:
            self.__dict__["total"] = total

    @cached_property
    def mask(self) -> np.ndarray | bool:
        """Which positions of [lo, hi) match (True: all of them, False: none)."""
        return self._evaluate()

    @cached_property
    def total(self) -> int:
        """The matching rows of the window."""
        return count_matching(self.mask, self.hi - self.lo)

    @cached_property
    def below_upper(self) -> int:
        """The matching rows below the page's upper bound."""
        if self.upper == self.hi:
            return self.total
        below = self.upper - self.lo
        return count_matching(self.mask if isinstance(self.mask, bool) else self.mask[:below], below)

    @property
    def newest_time(self) -> int:
        """The time of the newest row below the upper bound, matching or not (a bound on the newest match)."""
        return int(self.index.timestamps[self.upper - 1]) if self.upper > self.lo else -(2**63)

    @cached_property
    def _matching(self) -> np.ndarray:
        """The positions of the matching rows below the upper bound (only built for a filtered search)."""
        return self.lo + np.flatnonzero(self.mask[: self.upper - self.lo])

    def newest(self, count: int) -> np.ndarray:
        """Return the positions of the newest `count` matching rows below the upper bound."""
        if isinstance(self.mask, bool):
            return np.arange(max(self.lo, self.upper - count), self.upper) if self.mask else np.arange(0)
        return self._matching[-count:] if count else self._matching[:0]

    def since(self, timestamp: int) -> np.ndarray:
        """Return the positions of every matching row below the upper bound at or after `timestamp`."""
        if isinstance(self.mask, bool):
            if not self.mask:
                return np.arange(0)
            first = int(np.searchsorted(self.index.timestamps, timestamp, side="left"))
            return np.arange(max(self.lo, first), self.upper)
        matching = self._matching
        return matching[np.searchsorted(self.index.timestamps[matching], timestamp, side="left") :]


class Matches:
    """The matching rows of every file a search's window meets.

    Args:
        files: the files with matching rows in the window.
    """

    def __init__(self, files: Sequence[FileMatches]):
        self.files = tuple(files)

    @property
    def total(self) -> int:
        """The exact number of matching rows in the window."""
        return sum(f.total for f in self.files)

    def newest(self, limit: int) -> Candidates:
        """Return the newest `limit` matching rows below the upper bound, with every row that ties the oldest of them.

        Files are visited newest first and their rows read only until `limit` rows are found, plus any file
        whose time range reaches back into the rows found (files of one day can overlap in time).

        Args:
            limit: how many rows at least (when there are as many).
        """
        available = sum(f.below_upper for f in self.files)
        if available <= limit:
            chosen = [(f, f.newest(f.below_upper)) for f in self.files]
            return Candidates(tuple((f.index, p) for f, p in chosen if len(p)), complete=True)
        ordered = sorted((f for f in self.files if f.below_upper), key=lambda f: f.newest_time, reverse=True)
        involved: list[FileMatches] = []
        found = 0
        for matches in ordered:
            if found >= limit:
                break
            involved.append(matches)
            found += matches.below_upper
        oldest = _oldest_of_newest(involved, limit)
        involved += [f for f in ordered[len(involved) :] if f.newest_time >= oldest]
        oldest = _oldest_of_newest(involved, limit)
        chosen = [(f, f.since(oldest)) for f in involved]
        taken = sum(len(p) for _, p in chosen)
        return Candidates(tuple((f.index, p) for f, p in chosen if len(p)), complete=taken == available)


def _oldest_of_newest(files: Sequence[FileMatches], limit: int) -> int:
    """The time of the `limit`-th newest matching row of `files` (they hold at least `limit` rows)."""
    tails = [f.newest(limit) for f in files]
    times = np.concatenate([f.index.timestamps[t] for f, t in zip(files, tails, strict=True)])
    return int(np.partition(times, len(times) - limit)[len(times) - limit])


def split_window(condition: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """Split a match condition into its window conjuncts (time and day bounds) and the rest (the filters).

    Returns:
        (window, filters): each an AND of its conjuncts, TRUE when it has none.
    """
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    window = [c for c in conjuncts if {column.name for column in c.find_all(exp.Column)} <= WINDOW_COLUMNS]
    filters = [c for c in conjuncts if all(c is not w for w in window)]
    return _all_of(window), _all_of(filters)


def _all_of(conjuncts: list[exp.Expression]) -> exp.Expression:
    return exp.and_(*conjuncts, copy=False) if conjuncts else exp.true()


def find_matches(snapshot: Snapshot, condition: exp.Expression, start_ms: int, end_ms: int, upper_ms: int) -> Matches:
    """Evaluate a search's match condition over the index of every file of `snapshot` its window meets.

    Args:
        snapshot: the table version searched (its files indexed).
        condition: the request's match condition (`gold.search.to_match_condition`).
        start_ms, end_ms: the window [start_ms, end_ms) the condition bounds the timestamps to.
        upper_ms: the page's exclusive upper time bound (`gold.search.page_upper_bound`).
    """
    window, filters = split_window(condition)
    evaluate, in_window = compile_condition(condition), compile_condition(window)
    count_file, filters_key = compile_file_count(filters), filters.sql()
    files = []
    for data_file in snapshot.files_between(start_ms, end_ms):
        index = data_file.index
        lo, hi = index.between(start_ms, end_ms)
        if hi == lo:
            continue
        upper = min(hi, max(lo, index.between(start_ms, upper_ms)[1]))
        # A file wholly in the window: only the filters decide its total, over all its rows.
        whole = lo == 0 and hi == index.size and in_window(index, lo, hi) is True
        total = index.count_of(filters_key, lambda index=index: count_file(index)) if whole else None
        matches = FileMatches(index, lo, hi, upper, lambda index=index, lo=lo, hi=hi: evaluate(index, lo, hi), total)
        if matches.total:
            files.append(matches)
    return Matches(files)
