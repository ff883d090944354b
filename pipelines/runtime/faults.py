"""Named crash points, so tests can kill a real job at an exact place and check that it resumes.

Set LAKEHOUSE_CRASH_AT to a point's name to have the process SIGKILL itself there; `name@MS` kills it
MS milliseconds after the point is passed instead, which lands the kill in the middle of the work that
follows (a MERGE, a file write). Set LAKEHOUSE_FAIL_AT to a point's name to have it raise InjectedFailure
there instead: an error the project did not raise on purpose, as the engine's are. Set LAKEHOUSE_STALL_AT
to `stage.step@SECONDS` to have the run sit that long inside that step (`pipelines.runtime.lock.running_step`),
as a query that does not come back does. Unset, a crash point costs two dictionary lookups.
"""

from __future__ import annotations

import os
import signal
import threading
import time

CRASH_ENV = "LAKEHOUSE_CRASH_AT"
FAIL_ENV = "LAKEHOUSE_FAIL_AT"
STALL_ENV = "LAKEHOUSE_STALL_AT"


class InjectedFailure(RuntimeError):
    """The failure LAKEHOUSE_FAIL_AT asks for: stands for an engine or system error at that point."""


def crash_point(name: str) -> None:
    """SIGKILL this process here (or after a delay) when LAKEHOUSE_CRASH_AT names this point.

    Raises:
        InjectedFailure: when LAKEHOUSE_FAIL_AT names this point.
    """
    if os.environ.get(FAIL_ENV) == name:
        raise InjectedFailure(f"failure injected at {name} ({FAIL_ENV})")
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, delay_ms = wanted.partition("@")
    if point != name:
        return
    if not delay_ms:
        _kill()
    timer = threading.Timer(int(delay_ms) / 1000, _kill)
    timer.daemon = True
    timer.start()


def stall_point(name: str) -> None:
    """Sleep here for the seconds LAKEHOUSE_STALL_AT gives when it names this point (`name@SECONDS`)."""
    wanted = os.environ.get(STALL_ENV)
    if not wanted:
        return
    point, _, seconds = wanted.partition("@")
    if point == name:
        time.sleep(float(seconds or 0))


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
