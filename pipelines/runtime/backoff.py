"""How long to wait before trying again: the one backoff of the project (exponential, capped, optionally jittered)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from conf.errors import InputError


def backoff_seconds(
    attempt: int,
    initial: float,
    maximum: float = math.inf,
    jitter: float = 0.0,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """The wait before retry `attempt` (1-based): `initial` doubled per earlier failure, capped at `maximum`.

    Args:
        attempt: how many attempts have failed so far (>= 1).
        initial: the wait after the first failure, before jitter.
        maximum: the cap before jitter.
        jitter: the share of the wait drawn at random (0: none; 0.5: the wait is between half and all of it),
            so that writers that failed together do not retry together.
        uniform: the random source (`random.uniform` by default).

    Raises:
        InputError: for an attempt below 1 or a jitter outside 0..1.
    """
    if attempt < 1:
        raise InputError(f"attempt: {attempt!r} must be at least 1")
    if not 0.0 <= jitter <= 1.0:
        raise InputError(f"jitter: {jitter!r} must be between 0 and 1")
    ceiling = min(maximum, initial * (2 ** (attempt - 1)))
    return ceiling * (1.0 - jitter) + uniform(0.0, ceiling * jitter)
