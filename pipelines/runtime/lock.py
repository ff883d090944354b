"""The run lock: one pipeline run at a time per lakehouse home, a lease renewed while the run lasts."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import time
from collections.abc import Iterator

from conf.errors import ConcurrencyError
from conf.locations import Location
from conf.settings import Settings
from pipelines.runtime.faults import stall_point
from pipelines.runtime.home import home_of
from pipelines.runtime.lease import Lease, holder_process_gone, read_token
from pipelines.runtime.storage import StoredFile

_UNWRITTEN_LOCK_GRACE_SECONDS = 10
# The lease is renewed this many times per stale timeout: a few missed renewals do not lose it.
_RENEWALS_PER_TIMEOUT = 4
# A step change is written to the lease at most this often: steps that end sooner are not worth a write.
_STEP_WRITE_GAP_SECONDS = 0.5
# What the lease tells of the running step (present from the start: the renewer serializes the token
# while the run's threads change these values).
_STEP_FIELDS = ("stage", "stage_started_at", "step", "step_started_at")


@dataclasses.dataclass
class _HeldRun:
    """The run lock this process holds: its lease, and the event that has its renewer write it now."""

    lease: Lease
    wake: threading.Event


_HELD_RUNS: list[_HeldRun] = []


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
    lease = Lease.for_this_process(home.storage, path, owner=owner, **dict.fromkeys(_STEP_FIELDS))
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
    held = _HeldRun(lease, threading.Event())
    renewer = threading.Thread(
        target=_renew_until, args=(held, stop, stale_after / _RENEWALS_PER_TIMEOUT), name="run-lock-lease", daemon=True
    )
    renewer.start()
    _HELD_RUNS.append(held)
    try:
        yield path
    finally:
        _HELD_RUNS.remove(held)
        stop.set()
        held.wake.set()
        renewer.join()
        lease.release()


# The step running in this context, as `stage` or `stage.step`: what pipelines.runtime.plan_sizes files requests under.
_CURRENT_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_step", default=None)


def current_step() -> str | None:
    """The pipeline step running in this context (`stage` or `stage.step`), None outside every step."""
    return _CURRENT_STEP.get()


@contextlib.contextmanager
def running_step(stage: str, step: str | None = None) -> Iterator[None]:
    """Show `stage` (and its `step`) in the run lock's lease as what this process's run does, for the block.

    Any process reads it (`run_in_progress`: `lakehouse status`, the pipeline metrics): a step whose
    time keeps growing is a query that does not come back. The lease is written by its renewer thread,
    so the step costs the run no request. Outside a run lock (a stage called on its own) nothing is shown.

    Args:
        stage: the pipeline stage (land, refine, publish).
        step: the part of the stage (refine's staged parts and writes, publish's tables); None for the
            stage as a whole.
    """
    reset = _CURRENT_STEP.set(stage if step is None else f"{stage}.{step}")
    try:
        with _shown_in_lease(stage, step):
            yield
    finally:
        _CURRENT_STEP.reset(reset)


@contextlib.contextmanager
def _shown_in_lease(stage: str, step: str | None) -> Iterator[None]:
    held = _HELD_RUNS[-1] if _HELD_RUNS else None
    if held is None:
        yield
        return
    token = held.lease.token
    previous = {key: token.get(key) for key in _STEP_FIELDS}
    now = time.time()
    if step is None or token.get("stage") != stage:
        token.update(stage=stage, stage_started_at=now, step=None, step_started_at=None)
    if step is not None:
        token.update(step=step, step_started_at=now)
    held.wake.set()
    try:
        stall_point(stage if step is None else f"{stage}.{step}")
        yield
    finally:
        token.update(previous)
        held.wake.set()


def run_in_progress(settings: Settings, now: float | None = None) -> dict | None:
    """The run holding the home's run lock, read from its lease; None when no run holds it.

    Returns:
        owner, pid, host; started_at and seconds (the run's); stage, step and how long each has run
        (None between stages); renewed_at and stale (not renewed within locks.stale_after_seconds:
        the holder is gone or cannot reach the home).
    """
    token = read_token(home_of(settings).storage, lock_path(settings))
    if not token:
        return None
    now = time.time() if now is None else now

    def seconds_since(key: str) -> float | None:
        value = token.get(key)
        return round(now - float(value), 1) if isinstance(value, (int, float)) else None

    renewed = token.get("renewed_at", token.get("started_at"))
    return {
        "owner": token.get("owner"),
        "pid": token.get("pid"),
        "host": token.get("host"),
        "started_at": token.get("started_at"),
        "seconds": seconds_since("started_at"),
        "stage": token.get("stage"),
        "stage_seconds": seconds_since("stage_started_at"),
        "step": token.get("step"),
        "step_seconds": seconds_since("step_started_at"),
        "renewed_at": renewed,
        "stale": isinstance(renewed, (int, float)) and now - renewed > settings.locks.stale_after_seconds,
    }


def _renew_until(held: _HeldRun, stop: threading.Event, every_seconds: float) -> None:
    while True:
        held.wake.wait(every_seconds)
        if stop.is_set():
            return
        held.wake.clear()
        held.lease.token["renewed_at"] = time.time()
        if not held.lease.renew():
            return  # taken over: a later release leaves the new holder's lease alone
        stop.wait(_STEP_WRITE_GAP_SECONDS)


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
