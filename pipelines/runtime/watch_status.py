"""The watcher's lock and state file: one watcher per home, and what it last did (for status and /health)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from conf.errors import ConcurrencyError
from conf.locations import Location
from conf.settings import Settings
from pipelines.runtime.home import home_of
from pipelines.runtime.lease import Lease, holder_process_gone, read_token
from pipelines.runtime.storage import StoredFile

# A watcher whose heartbeat is older than this many heartbeat periods is taken as gone.
_MISSED_HEARTBEATS = 3
_MIN_STALE_SECONDS = 30.0


def watch_lock_path(settings: Settings) -> Location:
    """The watcher lease of a home (held for the watcher's whole lifetime)."""
    return home_of(settings).lock("watch.lock")


def watch_state_path(settings: Settings) -> Location:
    """The watcher state file of a home: pid, start time, heartbeat, last micro-batch, pending files."""
    return home_of(settings).join("_watch", "state.json")


@contextlib.contextmanager
def watcher_lock(settings: Settings) -> Iterator[Lease]:
    """Hold the home's watcher lease for the block: a second watcher on the same home is refused.

    The lease is a file created by a conditional put (local disk or object storage) holding pid, host
    and start time; the running watcher renews it with every heartbeat (`touch_lock`). A lease whose
    process is gone (same host) or whose heartbeat stopped (any host) is taken over.

    Yields:
        The lease, for `touch_lock`.

    Raises:
        ConcurrencyError: naming the running watcher when one holds the lease.
    """
    path = watch_lock_path(settings)
    lease = Lease.for_this_process(home_of(settings).storage, path)
    holder = lease.try_acquire(lambda token, stored: not _holder_alive(token, stored, settings))
    if holder is not None:
        raise ConcurrencyError(
            f"a watcher already runs on home {settings.home}: pid {holder.get('pid')} on {holder.get('host')}, "
            f"started {time.ctime(holder.get('started_at', 0))} (lock {path}); stop it first (SIGTERM)"
        )
    try:
        yield lease
    finally:
        lease.release()


def touch_lock(lease: Lease) -> None:
    """Renew the watcher's lease: its heartbeat."""
    lease.token["heartbeat_at"] = time.time()
    lease.renew()


def write_state(settings: Settings, state: dict[str, Any]) -> None:
    """Replace the watcher state file at once (readers never see half a file)."""
    home_of(settings).write(watch_state_path(settings), json.dumps(state, default=str, sort_keys=True).encode())


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
    storage = home_of(settings).storage
    lock = watch_lock_path(settings)
    holder = read_token(storage, lock)
    stored = storage.stat(lock)
    running = bool(holder) and stored is not None and _holder_alive(holder, stored, settings)
    state = read_token(storage, watch_state_path(settings))
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


def _holder_alive(holder: dict, stored: StoredFile, settings: Settings) -> bool:
    if not holder:
        # Not a lease: an empty file an earlier version left while creating it.
        return time.time() - stored.modified <= _MIN_STALE_SECONDS
    if holder_process_gone(holder):
        return False
    stale_after = max(_MISSED_HEARTBEATS * settings.watch.heartbeat_seconds, _MIN_STALE_SECONDS)
    heartbeat = holder.get("heartbeat_at", holder.get("started_at", 0))
    try:
        return time.time() - float(heartbeat) <= stale_after
    except (TypeError, ValueError):
        return False
