"""Bounded concurrency for the serving engine: query slots, a bounded wait queue, then 503, per server.

The bounds hold for the whole server, however many worker processes answer: every worker counts its
admitted and running queries in one row of a `WorkerBoard`, memory all workers share (created by the
parent before it starts them), and checks the sum of all rows under a file lock before taking a place.
A worker killed while holding places loses nothing for the others: the parent zeroes its row before it
starts the replacement, and the kernel releases a dead process's file lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ConcurrencyError, ConfigError
from conf.values import check_at_least

# The columns of a worker's row on the board.
PID, ADMITTED, RUNNING, SERVED, STARTED_MS = range(5)
_FIELDS = 5
# How often the first request waiting in a worker looks for a slot freed by another worker (seconds).
_POLL_S = 0.002


class OverloadedError(ConcurrencyError):
    """Every query slot is busy and the wait queue is full (or the wait timed out): served as HTTP 503.

    Args:
        message: what was full, safe to show to the caller.
        retry_after_s: the seconds the caller should wait before trying again.
    """

    def __init__(self, message: str, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class WorkerBoard:
    """Per-worker counts (pid, admitted, running, served, start time) in memory shared by the worker processes.

    Created before the workers are forked, so each inherits the same anonymous shared mapping. Changes
    that must see every row at once (take a place if the sum allows it) hold a threading lock and, when
    `lock_path` is given, an exclusive flock on that file, opened by each process for itself (a flock
    on a descriptor inherited across fork would be shared, not exclusive).

    Args:
        workers: the number of rows (one per worker).
        lock_path: the lock file all processes lock (None: one process only, a threading lock suffices).
    """

    def __init__(self, workers: int, lock_path: Path | None = None):
        check_at_least("workers", workers, 1)
        self.workers = workers
        self._map = mmap.mmap(-1, workers * _FIELDS * 8)
        self._rows = np.frombuffer(self._map, dtype=np.int64).reshape(workers, _FIELDS)
        self._lock_path = lock_path
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._fd_pid = 0
        if lock_path is not None:
            lock_path.touch(mode=0o600, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[np.ndarray]:
        """Hold the board exclusively (against threads and other processes); yield its rows."""
        with self._thread_lock:
            if self._lock_path is None:
                yield self._rows
                return
            if self._fd is None or self._fd_pid != os.getpid():
                self._fd = os.open(self._lock_path, os.O_RDWR)
                self._fd_pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield self._rows
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def take(self, worker: int, field: int, limit: int) -> bool:
        """Add one to `field` of `worker` if the sum of `field` over all workers is below `limit`."""
        with self.locked() as rows:
            if int(rows[:, field].sum()) >= limit:
                return False
            rows[worker, field] += 1
            return True

    def give_back(self, worker: int, field: int, served: bool = False) -> None:
        """Subtract one from `field` of `worker` (and count a served request when `served`)."""
        with self.locked() as rows:
            rows[worker, field] -= 1
            if served:
                rows[worker, SERVED] += 1

    def reset(self, worker: int, pid: int) -> None:
        """Start `worker`'s row afresh for the process `pid` (its predecessor's places are freed)."""
        with self.locked() as rows:
            rows[worker] = (pid, 0, 0, 0, int(time.time() * 1000))

    def total(self, field: int) -> int:
        """The sum of `field` over all workers."""
        return int(self._rows[:, field].sum())

    def snapshot(self) -> list[dict[str, Any]]:
        """Each worker's row as JSON values, with whether its process is alive."""
        rows = self._rows.copy()
        return [
            {"worker": index, "pid": int(row[PID]), "alive": _alive(int(row[PID])), "admitted": int(row[ADMITTED]),
             "running": int(row[RUNNING]), "served": int(row[SERVED]), "startedAt": int(row[STARTED_MS])}
            for index, row in enumerate(rows)
        ]  # fmt: skip


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Admission:
    """Admit at most `slots` queries at once and `queue_depth` more waiting, server-wide; turn the rest away at once.

    `admit()` is called on the event loop before any work is queued, so a rejected request costs nothing;
    `slot()` is awaited on the event loop too, so a request waiting for a slot holds no worker thread: only
    the queries that run use threads (more threads than slots would only contend for the interpreter).
    The counts live on a `WorkerBoard` shared by every worker process of the server (by default a board
    of this process alone).

    Args:
        slots: queries that run at the same time.
        queue_depth: admitted requests that may wait for a slot.
        wait_timeout_s: the longest an admitted request waits for a slot before it gets a 503.
        retry_after_s: the Retry-After seconds sent with a 503.
        board: the counts shared with the server's other workers (None: this process only).
        worker: this worker's row on `board`.
    """

    def __init__(
        self,
        slots: int,
        queue_depth: int,
        wait_timeout_s: float,
        retry_after_s: int = 1,
        *,
        board: WorkerBoard | None = None,
        worker: int = 0,
    ):
        check_at_least("slots", slots, 1)
        check_at_least("queue_depth", queue_depth, 0)
        if wait_timeout_s <= 0:
            raise ConfigError(f"wait_timeout_s: {wait_timeout_s!r} must be above 0")
        self.slots = slots
        self.queue_depth = queue_depth
        self._wait_timeout_s = wait_timeout_s
        self._retry_after_s = retry_after_s
        if board is None:
            board = WorkerBoard(1)
            board.reset(0, os.getpid())
        self.board = board
        if not 0 <= worker < self.board.workers:
            raise ConfigError(f"worker: {worker!r} is not a row of the board (0..{self.board.workers - 1})")
        self.worker = worker
        # The requests of this worker waiting for a slot, first come first served (see `slot`).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: deque[asyncio.Event] = deque()
        self._released = asyncio.Event()

    @property
    def admitted(self) -> int:
        """Requests admitted and not finished (running or waiting), on every worker of the server."""
        return self.board.total(ADMITTED)

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Hold a place among the server's admitted requests for the block.

        Raises:
            OverloadedError: when slots and queue are all taken.
        """
        if not self.board.take(self.worker, ADMITTED, self.slots + self.queue_depth):
            raise OverloadedError(
                f"server busy: {self.slots} queries running and {self.queue_depth} waiting "
                f"(serve.query_slots, serve.queue_depth); retry after {self._retry_after_s} s",
                self._retry_after_s,
            )
        try:
            yield
        finally:
            self.board.give_back(self.worker, ADMITTED)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Run the block in one of the server's query slots, waiting at most the wait timeout for it.

        The requests of a worker wait in line: only the first one looks for a slot, woken when one of this
        worker's queries ends and every few milliseconds for slots freed in other workers; the others
        sleep until their turn comes. A request that finds no one waiting takes a free slot at once.

        Raises:
            OverloadedError: when no slot freed up in time.
        """
        await self._wait_for_slot(time.monotonic() + self._wait_timeout_s)
        try:
            yield
        finally:
            self.board.give_back(self.worker, RUNNING, served=True)
            self._released.set()

    async def _wait_for_slot(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # the events belong to one event loop
            self._loop, self._waiting, self._released = loop, deque(), asyncio.Event()
        if not self._waiting and self.board.take(self.worker, RUNNING, self.slots):
            return
        turn = asyncio.Event()
        self._waiting.append(turn)
        try:
            while True:
                first = self._waiting[0] is turn
                if first:
                    self._released.clear()
                    if self.board.take(self.worker, RUNNING, self.slots):
                        return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise OverloadedError(
                        f"server busy: no query slot freed up within {self._wait_timeout_s} s; "
                        f"retry after {self._retry_after_s} s",
                        self._retry_after_s,
                    )
                event, pause = (self._released, min(_POLL_S, remaining)) if first else (turn, remaining)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), pause)
        finally:
            was_first = self._waiting[0] is turn
            self._waiting.remove(turn)
            if was_first and self._waiting:
                self._waiting[0].set()

    def status(self) -> dict[str, Any]:
        """The server's bounds and what is taken of them, per worker, as JSON values."""
        workers = self.board.snapshot()
        return {
            "slots": self.slots,
            "queueDepth": self.queue_depth,
            "running": sum(w["running"] for w in workers),
            "admitted": sum(w["admitted"] for w in workers),
            "workers": workers,
        }
