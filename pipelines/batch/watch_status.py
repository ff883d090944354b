"""The watcher's lock and state file: one watcher per home, and what it last did (for status and /health)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conf.errors import ConcurrencyError
from conf.settings import Settings

# A watcher whose heartbeat is older than this many heartbeat periods is taken as gone.
_MISSED_HEARTBEATS = 3
_MIN_STALE_SECONDS = 30.0


def watch_lock_path(settings: Settings) -> Path:
    """The watcher lock of a home (held for the watcher's whole lifetime)."""
    return settings.home / "_locks" / "watch.lock"


def watch_state_path(settings: Settings) -> Path:
    """The watcher state file of a home: pid, start time, heartbeat, last micro-batch, pending files."""
    return settings.home / "_watch" / "state.json"


@contextlib.contextmanager
def watcher_lock(settings: Settings) -> Iterator[Path]:
    """Hold the home's watcher lock for the block: a second watcher on the same home is refused.

    The lock is a file created with O_EXCL holding pid, host and start time; the running watcher
    refreshes its mtime with every heartbeat. A lock whose process is gone (same host) or whose
    heartbeat stopped (any host) is taken over.

    Raises:
        ConcurrencyError: naming the running watcher when one holds the lock.
    """
    path = watch_lock_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time()}
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_json(path)
            if not _holder_alive(path, holder, settings):
                if _read_json(path) == holder:
                    path.unlink(missing_ok=True)
                continue
            raise ConcurrencyError(
                f"a watcher already runs on home {settings.home}: pid {holder.get('pid')} on {holder.get('host')}, "
                f"started {time.ctime(holder.get('started_at', 0))} (lock {path}); stop it first (SIGTERM)"
            ) from None
        with os.fdopen(fd, "w") as handle:
            json.dump(token, handle)
        break
    try:
        yield path
    finally:
        if _read_json(path) == token:
            path.unlink(missing_ok=True)


def touch_lock(settings: Settings) -> None:
    """Refresh the watcher lock's heartbeat (its mtime)."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(watch_lock_path(settings))


def write_state(settings: Settings, state: dict[str, Any]) -> None:
    """Replace the watcher state file atomically (readers never see half a file)."""
    path = watch_state_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps(state, default=str, sort_keys=True))
    os.replace(scratch, path)


def watch_status(settings: Settings, now: float | None = None) -> dict[str, Any]:
    """Whether a watcher runs on the home, its last micro-batch, the oldest unprocessed file and the lag.

    Args:
        settings: the lakehouse settings (home, watch.heartbeat_seconds).
        now: the current time (epoch seconds); default the clock.

    Returns:
        `running`, `pid`, `host`, `started_at`, `heartbeat_at`, `last_batch` (or None), `pending_files`,
        `oldest_unprocessed` ({path, arrived_at} or None) and `freshness_lag_seconds`: how long the oldest
        unprocessed file has waited, 0 when the watcher has caught up, None when it is not running.
    """
    now = time.time() if now is None else now
    lock = watch_lock_path(settings)
    holder = _read_json(lock)
    running = bool(holder) and _holder_alive(lock, holder, settings)
    state = _read_json(watch_state_path(settings))
    oldest = state.get("oldest_unprocessed") or None
    if running:
        lag = round(now - oldest["arrived_at"], 3) if oldest else 0.0
    else:
        lag = None
    return {
        "running": running,
        "pid": holder.get("pid") if running else state.get("pid"),
        "host": holder.get("host") if running else state.get("host"),
        "started_at": state.get("started_at"),
        "heartbeat_at": state.get("heartbeat_at"),
        "last_batch": state.get("last_batch"),
        "batches": state.get("batches", 0),
        "pending_files": state.get("pending_files", 0),
        "oldest_unprocessed": oldest,
        "freshness_lag_seconds": lag,
    }


def _holder_alive(path: Path, holder: dict, settings: Settings) -> bool:
    if not holder:
        # Empty: being written now, or its writer died between create and write.
        try:
            return time.time() - path.stat().st_mtime <= _MIN_STALE_SECONDS
        except FileNotFoundError:
            return False
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, KeyError, ValueError):
            pass
    stale_after = max(_MISSED_HEARTBEATS * settings.watch.heartbeat_seconds, _MIN_STALE_SECONDS)
    try:
        return time.time() - path.stat().st_mtime <= stale_after
    except FileNotFoundError:
        return False


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (FileNotFoundError, ValueError):
        return {}
