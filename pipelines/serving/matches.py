"""The rows of a table snapshot that match a search: the exact total, and the newest of them as page candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from sqlglot import exp

from pipelines.serving.condition import compile_condition
from pipelines.serving.index import FileIndex
from pipelines.serving.snapshots import Snapshot


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
        mask: which positions of [lo, hi) match (True: all of them).
    """

    def __init__(self, index: FileIndex, lo: int, hi: int, upper: int, mask: np.ndarray | bool):
        self.index, self.lo, self.hi, self.upper, self.mask = index, lo, hi, upper, mask

    @cached_property
    def total(self) -> int:
        """The matching rows of the window."""
        return self.hi - self.lo if self.mask is True else int(np.count_nonzero(self.mask))

    @cached_property
    def below_upper(self) -> int:
        """The matching rows below the page's upper bound."""
        if self.mask is True:
            return self.upper - self.lo
        return int(np.count_nonzero(self.mask[: self.upper - self.lo]))

    @cached_property
    def _matching(self) -> np.ndarray:
        """The positions of the matching rows below the upper bound (only built for a filtered search)."""
        return self.lo + np.flatnonzero(self.mask[: self.upper - self.lo])

    def newest(self, count: int) -> np.ndarray:
        """Return the positions of the newest `count` matching rows below the upper bound."""
        if self.mask is True:
            return np.arange(max(self.lo, self.upper - count), self.upper)
        return self._matching[-count:] if count else self._matching[:0]

    def since(self, timestamp: int) -> np.ndarray:
        """Return the positions of every matching row below the upper bound at or after `timestamp`."""
        if self.mask is True:
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

        Args:
            limit: how many rows at least (when there are as many).
        """
        available = sum(f.below_upper for f in self.files)
        if available <= limit:
            chosen = [(f, f.newest(f.below_upper)) for f in self.files]
            return Candidates(tuple((f.index, p) for f, p in chosen if len(p)), complete=True)
        tails = [f.newest(limit) for f in self.files]
        times = np.concatenate([f.index.timestamps[t] for f, t in zip(self.files, tails, strict=True)])
        oldest = int(np.partition(times, len(times) - limit)[len(times) - limit])
        chosen = [(f, f.since(oldest)) for f in self.files]
        taken = sum(len(p) for _, p in chosen)
        return Candidates(tuple((f.index, p) for f, p in chosen if len(p)), complete=taken == available)


def find_matches(snapshot: Snapshot, condition: exp.Expression, start_ms: int, end_ms: int, upper_ms: int) -> Matches:
    """Evaluate a search's match condition over the index of every file of `snapshot` its window meets.

    Args:
        snapshot: the table version searched (its files indexed).
        condition: the request's match condition (`gold.search.to_match_condition`).
        start_ms, end_ms: the window [start_ms, end_ms) the condition bounds the timestamps to.
        upper_ms: the page's exclusive upper time bound (`gold.search.page_upper_bound`).
    """
    files = []
    evaluate = compile_condition(condition)
    for data_file in snapshot.files_between(start_ms, end_ms):
        index = data_file.index
        lo, hi = index.between(start_ms, end_ms)
        if hi == lo:
            continue
        mask = evaluate(index, lo, hi)
        if mask is False:
            continue
        upper = min(hi, max(lo, index.between(start_ms, upper_ms)[1]))
        matches = FileMatches(index, lo, hi, upper, mask)
        if matches.total:
            files.append(matches)
    return Matches(files)
