"""Which landing files a watcher takes: finished files below a landing root, and those of no known kind."""

from __future__ import annotations

import contextlib
from pathlib import Path

from conf.errors import InputError
from conf.locations import Location


def is_complete_file(path: Location, roots: tuple[Location, ...]) -> bool:
    """Whether a landing path is a finished file: no `.tmp` suffix, no `.`/`_` name on the way from its root.

    Producers write `name.tmp` or `.name` and rename it when done, so those are never read half-written
    (on object storage an object appears whole when its upload completes).
    """
    if path.name.endswith(".tmp"):
        return False
    for root in roots:
        parts = _relative_parts(path, root)
        if parts is not None:
            return bool(parts) and not any(p.startswith((".", "_")) for p in parts)
    return False


def _relative_parts(path: Location, root: Location) -> tuple[str, ...] | None:
    """The parts of `path` below `root`; None when it is not below it."""
    if isinstance(path, Path) and isinstance(root, Path):
        with contextlib.suppress(ValueError):
            return path.relative_to(root).parts
        return None
    prefix = str(root).rstrip("/") + "/"
    if type(path) is not type(root) or not str(path).startswith(prefix):
        return None
    return tuple(p for p in str(path)[len(prefix) :].split("/") if p)


def undetectable_files(files: list[Location]) -> list[Location]:
    """The files whose kind (MCL, MCP, file sink, usage, ...) cannot be told from their name or first bytes."""
    from pipelines.batch.landing.discovery import detect_file_kind

    bad = []
    for path in files:
        try:
            kind = detect_file_kind(path)
        except InputError:
            kind = None
        if kind is None:
            bad.append(path)
    return bad
