"""The rate limit's buckets: one caller's rate, and the shared table when more callers come than it holds."""

from __future__ import annotations

import contextlib
import threading

import pytest

from conf.errors import ConfigError
from pipelines.serving.rate_limit import RateLimitedError, RateLimiter, SharedTokenBuckets, TokenBuckets


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lock():
    """A lock factory as the admission board gives one (here for threads of one process)."""
    guard = threading.Lock()

    @contextlib.contextmanager
    def held():
        with guard:
            yield

    return held


@pytest.mark.parametrize("buckets", [TokenBuckets, lambda: SharedTokenBuckets(_lock(), slots=8)])
def test_a_burst_then_the_rate_then_a_refill(buckets):
    clock = _Clock()
    limiter = RateLimiter(per_minute=60, burst=3, buckets=buckets(), clock=clock)
    for _ in range(3):
        limiter.check("token:a")
    with pytest.raises(RateLimitedError) as refused:
        limiter.check("token:a")
    assert refused.value.retry_after_s == 1 and refused.value.status == 429
    limiter.check("token:b")  # another caller has its own bucket
    clock.now += 1.0  # one request a second comes back
    limiter.check("token:a")
    with pytest.raises(RateLimitedError):
        limiter.check("token:a")


def test_a_full_shared_table_gives_a_new_caller_the_most_rested_bucket():
    clock = _Clock()
    limiter = RateLimiter(per_minute=60, burst=2, buckets=SharedTokenBuckets(_lock(), slots=2), clock=clock)
    limiter.check("token:idle")
    clock.now += 5.0
    limiter.check("token:busy")
    limiter.check("token:busy")
    limiter.check("token:new")  # the table is full: the idle caller's bucket (refilled) is taken over
    with pytest.raises(RateLimitedError):
        limiter.check("token:busy")  # the busy caller's empty bucket was kept, not handed out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimiter(per_minute=-1, burst=1), "per_minute: -1 must be at least 0"),
        (lambda: RateLimiter(per_minute=60, burst=0), "burst: 0 must be at least 1"),
        (lambda: SharedTokenBuckets(_lock(), slots=0), "slots: 0 must be at least 1"),
    ],
)
def test_a_limit_below_its_least_is_refused_naming_it_and_the_value(make, message):
    with pytest.raises(ConfigError, match=message):
        make()
