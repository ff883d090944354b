"""The one backoff: doubling from the first wait, capped, with a share of each wait drawn at random."""

from __future__ import annotations

import pytest

from conf.errors import InputError
from pipelines.runtime.backoff import backoff_seconds


def lowest(low: float, _high: float) -> float:
    return low


def highest(_low: float, high: float) -> float:
    return high


@pytest.mark.parametrize(("attempt", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (6, 10.0)])
def test_the_wait_doubles_per_failure_up_to_the_cap(attempt, expected):
    assert backoff_seconds(attempt, 1.0, maximum=10.0) == expected


def test_jitter_draws_that_share_of_the_wait_at_random():
    assert backoff_seconds(3, 0.5, 30.0, jitter=0.5, uniform=lowest) == 1.0
    assert backoff_seconds(3, 0.5, 30.0, jitter=0.5, uniform=highest) == 2.0


@pytest.mark.parametrize(("attempt", "jitter", "field"), [(0, 0.0, "attempt"), (1, 1.5, "jitter")])
def test_an_impossible_attempt_or_jitter_is_refused_naming_it(attempt, jitter, field):
    with pytest.raises(InputError, match=f"^{field}: "):
        backoff_seconds(attempt, 1.0, jitter=jitter)
