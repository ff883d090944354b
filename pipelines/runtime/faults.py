"""Named crash points, so tests can kill a real job at an exact place and check that it resumes.

Set LAKEHOUSE_CRASH_AT to a point's name to have the process SIGKILL itself there; `name@MS` kills it
MS milliseconds after the point is passed instead, which lands the kill in the middle of the work that
follows (a MERGE, a file write). Unset, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import threading

CRASH_ENV = "LAKEHOUSE_CRASH_AT"


def crash_point(name: str) -> None:
    """SIGKILL this process here (or after a delay) when LAKEHOUSE_CRASH_AT names this point."""
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


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
