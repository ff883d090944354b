"""Bounded concurrency for the serving engine: query slots, a bounded wait queue, then 503."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

from conf.errors import ConcurrencyError, ConfigError


class OverloadedError(ConcurrencyError):
    """Every query slot is busy and the wait queue is full (or the wait timed out): served as HTTP 503.

    Args:
        message: what was full, safe to show to the caller.
        retry_after_s: the seconds the caller should wait before trying again.
    """

    def __init__(self, message: str, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class Admission:
    """Admit at most `slots` queries at once and `queue_depth` more waiting; turn the rest away at once.

    `admit()` is called on the event loop before any work is queued, so a rejected request costs nothing;
    `slot()` is awaited on the event loop too, so a request waiting for a slot holds no worker thread: only
    the queries that run use threads (more threads than slots would only contend for the interpreter).

    Args:
        slots: queries that run at the same time.
        queue_depth: admitted requests that may wait for a slot.
        wait_timeout_s: the longest an admitted request waits for a slot before it gets a 503.
        retry_after_s: the Retry-After seconds sent with a 503.
    """

    def __init__(self, slots: int, queue_depth: int, wait_timeout_s: float, retry_after_s: int = 1):
        if slots < 1:
            raise ConfigError(f"slots: {slots!r} must be at least 1")
        if queue_depth < 0:
            raise ConfigError(f"queue_depth: {queue_depth!r} must be at least 0")
        if wait_timeout_s <= 0:
            raise ConfigError(f"wait_timeout_s: {wait_timeout_s!r} must be above 0")
        self.slots = slots
        self.queue_depth = queue_depth
        self._wait_timeout_s = wait_timeout_s
        self._retry_after_s = retry_after_s
        self._running = asyncio.BoundedSemaphore(slots)
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        """Requests admitted and not finished (running or waiting)."""
        return self._admitted

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Hold a place among the admitted requests for the block.

        Raises:
            OverloadedError: when slots and queue are all taken.
        """
        with self._lock:
            if self._admitted >= self.slots + self.queue_depth:
                raise OverloadedError(
                    f"server busy: {self.slots} queries running and {self.queue_depth} waiting "
                    f"(serve.query_slots, serve.queue_depth); retry after {self._retry_after_s} s",
                    self._retry_after_s,
                )
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Run the block in one of the query slots, waiting at most the wait timeout for it.

        Raises:
            OverloadedError: when no slot freed up in time.
        """
        try:
            await asyncio.wait_for(self._running.acquire(), self._wait_timeout_s)
        except TimeoutError:
            raise OverloadedError(
                f"server busy: no query slot freed up within {self._wait_timeout_s} s; retry after {self._retry_after_s} s",
                self._retry_after_s,
            ) from None
        try:
            yield
        finally:
            self._running.release()
