"""The run lock: one pipeline run at a time per lakehouse home, with a stale-lock timeout."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from conf.errors import ConcurrencyError
from conf.settings import Settings

_UNWRITTEN_LOCK_GRACE_SECONDS = 10


def lock_path(settings: Settings) -> Path:
    """The lock file of a lakehouse home."""
    return settings.home / "_locks" / "pipeline.lock"


@contextlib.contextmanager
def run_lock(settings: Settings, *, owner: str, wait_seconds: float = 0.0) -> Iterator[Path]:
    """Hold the home's run lock for the block.

    The lock is a file created with O_EXCL holding the holder's pid, host and start time. A lock older
    than `locks.stale_after_seconds`, or held by a process on this host that no longer exists (a run
    killed with SIGKILL), is taken over.

    Args:
        settings: the lakehouse settings (home and stale timeout).
        owner: what is running (shown to a run that finds the lock taken).
        wait_seconds: how long to wait for a held lock before giving up.

    Raises:
        ConcurrencyError: when another live run holds the lock after `wait_seconds`.
    """
    path = lock_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_seconds
    token = {"pid": os.getpid(), "host": socket.gethostname(), "owner": owner, "started_at": time.time()}
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_holder(path)
            if _is_stale(path, holder, settings.locks.stale_after_seconds):
                _remove_if_unchanged(path, holder)
                continue
            if time.monotonic() >= deadline:
                raise ConcurrencyError(
                    f"another run holds the lock {path}: {holder.get('owner', '?')} (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {time.ctime(holder.get('started_at', 0))}); "
                    "wait for it, or pass --wait SECONDS"
                ) from None
            time.sleep(0.5)
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(token, handle)
        break
    try:
        yield path
    finally:
        if _read_holder(path) == token:
            path.unlink(missing_ok=True)


def _read_holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (FileNotFoundError, ValueError):
        return {}


def _is_stale(path: Path, holder: dict, stale_after_seconds: int) -> bool:
    if not holder:
        # Empty: its holder is writing it now, or died between creating and writing it.
        try:
            return time.time() - path.stat().st_mtime > _UNWRITTEN_LOCK_GRACE_SECONDS
        except FileNotFoundError:
            return False
    if time.time() - float(holder.get("started_at", 0)) > stale_after_seconds:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, KeyError, ValueError):
            return False
    return False


def _remove_if_unchanged(path: Path, holder: dict) -> None:
    if _read_holder(path) == holder:
        path.unlink(missing_ok=True)
