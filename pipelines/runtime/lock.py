"""The run lock: one pipeline run at a time per lakehouse home, a lease renewed while the run lasts."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from conf.errors import ConcurrencyError
from conf.locations import Location
from conf.settings import Settings
from pipelines.runtime.home import home_of
from pipelines.runtime.lease import Lease, holder_process_gone
from pipelines.runtime.storage import StoredFile

_UNWRITTEN_LOCK_GRACE_SECONDS = 10
# The lease is renewed this many times per stale timeout: a few missed renewals do not lose it.
_RENEWALS_PER_TIMEOUT = 4


def lock_path(settings: Settings) -> Location:
    """The lease file of a lakehouse home's run lock."""
    return home_of(settings).lock("pipeline.lock")


@contextlib.contextmanager
def run_lock(settings: Settings, *, owner: str, wait_seconds: float = 0.0) -> Iterator[Location]:
    """Hold the home's run lock for the block.

    The lock is a lease file created by a conditional put (an O_EXCL-like create, on local disk and
    on object storage alike) holding the holder's pid, host, owner and start time, and renewed by a
    background thread. A lease not renewed for `locks.stale_after_seconds`, or held by a process on
    this host that no longer exists (a run killed with SIGKILL), is taken over.

    Args:
        settings: the lakehouse settings (home and stale timeout).
        owner: what is running (shown to a run that finds the lock taken).
        wait_seconds: how long to wait for a held lock before giving up.

    Raises:
        ConcurrencyError: when another live run holds the lock after `wait_seconds`.
    """
    home = home_of(settings)
    path = lock_path(settings)
    stale_after = settings.locks.stale_after_seconds
    lease = Lease.for_this_process(home.storage, path, owner=owner)
    deadline = time.monotonic() + wait_seconds
    while (holder := lease.try_acquire(lambda token, stored: _is_stale(token, stored, stale_after))) is not None:
        if time.monotonic() >= deadline:
            raise ConcurrencyError(
                f"another run holds the lock {path}: {holder.get('owner', '?')} (pid {holder.get('pid')} on "
                f"{holder.get('host')}, started {time.ctime(holder.get('started_at', 0))}); "
                "wait for it, or pass --wait SECONDS"
            ) from None
        time.sleep(0.5)
    stop = threading.Event()
    renewer = threading.Thread(
        target=_renew_until, args=(lease, stop, stale_after / _RENEWALS_PER_TIMEOUT), name="run-lock-lease", daemon=True
    )
    renewer.start()
    try:
        yield path
    finally:
        stop.set()
        renewer.join()
        lease.release()


def _renew_until(lease: Lease, stop: threading.Event, every_seconds: float) -> None:
    while not stop.wait(every_seconds):
        lease.token["renewed_at"] = time.time()
        if not lease.renew():
            return  # taken over: a later release leaves the new holder's lease alone


def _is_stale(holder: dict, stored: StoredFile, stale_after_seconds: int) -> bool:
    if not holder:
        # Not a lease (an empty file an earlier version left while creating it): stale after a grace.
        return time.time() - stored.modified > _UNWRITTEN_LOCK_GRACE_SECONDS
    renewed = holder.get("renewed_at", holder.get("started_at", 0))
    try:
        if time.time() - float(renewed) > stale_after_seconds:
            return True
    except (TypeError, ValueError):
        return True
    return holder_process_gone(holder)
