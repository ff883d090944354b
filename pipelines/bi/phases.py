"""Where a sync's time goes: seconds per named phase, nested phases counted once."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Phases:
    """Seconds spent per named phase; a phase inside another is counted in the inner one only."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []

    def add(self, name: str, seconds: float) -> None:
        """Count `seconds` to phase `name` (and not to the phase it runs in)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if self._inner:
            self._inner[-1] += seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name`."""
        started = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            inner = self._inner.pop()
            self.add(name, time.perf_counter() - started - inner)

    def timed(self, name: str, items: Iterator) -> Iterator:
        """Yield the items, counting the time spent producing each to phase `name`."""
        while True:
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                self.add(name, time.perf_counter() - started)
                return
            self.add(name, time.perf_counter() - started)
            yield item

    def total(self) -> float:
        """All phases' seconds, rounded to the millisecond."""
        return round(sum(self.seconds.values()), 3)

    def rounded(self) -> dict[str, float]:
        """The phases' seconds rounded to the millisecond."""
        return {name: round(value, 3) for name, value in self.seconds.items()}
