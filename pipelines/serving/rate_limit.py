"""A per-caller rate limit on the data endpoints: token buckets, refused requests get 429 with Retry-After."""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from conf.errors import RequestError
from conf.values import check_at_least

# Buckets full again (the caller idle long enough) are dropped once this many callers are tracked.
_PRUNE_ABOVE = 10_000


class RateLimitedError(RequestError):
    """A caller above its request rate: served as HTTP 429 with Retry-After.

    Args:
        message: what was exceeded, safe to show to the caller.
        retry_after_s: the whole seconds until the caller may send again.
    """

    status = 429

    def __init__(self, message: str, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class TokenBuckets:
    """The buckets of every caller, in this process's memory.

    The rate limiter reads and changes them only through `take`, so a store shared by several server
    processes can stand in for this one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._levels: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)

    def take(self, key: str, now: float, rate_per_s: float, capacity: float) -> float:
        """Take one token from `key`'s bucket (filled at `rate_per_s` up to `capacity`).

        Returns:
            0 when a token was taken; otherwise the seconds until one is available.
        """
        with self._lock:
            tokens, counted = self._levels.get(key, (capacity, now))
            tokens = min(capacity, tokens + (now - counted) * rate_per_s)
            if tokens >= 1:
                self._levels[key] = (tokens - 1, now)
                if len(self._levels) > _PRUNE_ABOVE:
                    self._prune(now, rate_per_s, capacity)
                return 0.0
            self._levels[key] = (tokens, now)
            return (1 - tokens) / rate_per_s

    def _prune(self, now: float, rate_per_s: float, capacity: float) -> None:
        self._levels = {
            key: (tokens, counted)
            for key, (tokens, counted) in self._levels.items()
            if tokens + (now - counted) * rate_per_s < capacity
        }


class SharedTokenBuckets(TokenBuckets):
    """The buckets of every caller in memory shared by a server's worker processes, so the rate is per server.

    Made by the parent before it forks its workers (each inherits the same anonymous mapping) and changed
    only under `lock`, the lock the workers' admission board holds across processes. A fixed table of
    `slots` buckets (a caller's 64-bit hash, its tokens, when they were counted); when it is full, a new
    caller takes the slot of the bucket that has refilled the most (an idle caller, who loses nothing).
    The monotonic clock is the machine's, the same in every process.

    Args:
        lock: a context manager factory holding the table exclusively (threads and processes).
        slots: the callers the table holds at once.
    """

    def __init__(self, lock: Callable[[], contextlib.AbstractContextManager], slots: int = 4096):
        check_at_least("slots", slots, 1)
        self._lock_of = lock
        self._map = mmap.mmap(-1, slots * 3 * 8)
        self._keys = np.frombuffer(self._map, dtype=np.int64, count=slots)
        self._levels = np.frombuffer(self._map, dtype=np.float64, offset=slots * 8).reshape(slots, 2)

    def take(self, key: str, now: float, rate_per_s: float, capacity: float) -> float:
        code = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little", signed=True) or 1
        with self._lock_of():
            found = np.flatnonzero(self._keys == code)
            if found.size:
                slot = int(found[0])
                tokens = min(capacity, self._levels[slot, 0] + (now - self._levels[slot, 1]) * rate_per_s)
            else:
                free = np.flatnonzero(self._keys == 0)
                refilled = self._levels[:, 0] + (now - self._levels[:, 1]) * rate_per_s
                slot = int(free[0]) if free.size else int(np.argmax(refilled))
                self._keys[slot] = code
                tokens = capacity
            if tokens >= 1:
                self._levels[slot] = (tokens - 1, now)
                return 0.0
            self._levels[slot] = (tokens, now)
            return (1 - tokens) / rate_per_s


class RateLimiter:
    """At most `per_minute` requests per caller per minute, with bursts of up to `burst` at once.

    Args:
        per_minute: the sustained rate; 0 turns the limit off.
        burst: the bucket's size: requests a rested caller may send at once.
        buckets: where the buckets live (default: this process's memory).
        clock: monotonic seconds (a parameter so that the rate can be checked without waiting).
    """

    def __init__(
        self, per_minute: int, burst: int, buckets: TokenBuckets | None = None, clock: Callable[[], float] = time.monotonic
    ):
        check_at_least("per_minute", per_minute, 0)
        check_at_least("burst", burst, 1)
        self.per_minute = per_minute
        self.burst = burst
        self._buckets = buckets or TokenBuckets()
        self._clock = clock

    def check(self, caller: str) -> None:
        """Count one request of `caller`.

        Raises:
            RateLimitedError: when the caller's bucket is empty.
        """
        if self.per_minute == 0:
            return
        wait_s = self._buckets.take(caller, self._clock(), self.per_minute / 60, self.burst)
        if wait_s > 0:
            retry_after = max(1, math.ceil(wait_s))
            raise RateLimitedError(
                f"rate limit: more than {self.per_minute} requests per minute (serve.rate_limit_per_minute, "
                f"bursts of {self.burst}); retry after {retry_after} s",
                retry_after,
            )


class RateLimitedVerifier:
    """A token verifier that also counts each authenticated request against its caller's rate.

    Counted after authentication, by principal (a token id or a JWT subject): nobody can use up another caller's rate without its token.

    Args:
        verifier: the verifier that authenticates (its other methods are passed through).
        limiter: the rate limit.
    """

    def __init__(self, verifier: Any, limiter: RateLimiter):
        self._verifier = verifier
        self._limiter = limiter

    async def authenticate_request(self, authorization: str | None, role: str) -> Any:
        """Authenticate as the wrapped verifier does, then count the request.

        Raises:
            AuthError: as the wrapped verifier.
            RateLimitedError: when the caller is above its rate.
        """
        principal = await self._verifier.authenticate_request(authorization, role)
        self._limiter.check(principal.name)
        return principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._verifier, name)
