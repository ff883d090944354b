"""Finding a batch's input files and planning each one: its content hash (computed by the engine), its kind
(detected from its first lines, or forced), and whether it landed before (the same path and content hash
in bronze.landed_files)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from pyspark.sql import SparkSession

from bronze.formats import DETECTION_LINES, EMPTY, detect_kind
from conf.errors import ConfigError, InputError
from conf.locations import Location, ObjectLocation, parse_location
from conf.settings import Settings
from pipelines.batch.landing.engine_files import content_hashes, engine_hashable
from pipelines.batch.landing.files import READ_CHUNK, READ_ERRORS, error_text, open_text, sha256_of
from pipelines.batch.landing.model import ALREADY_LANDED, LEDGER_TABLE, UNDETECTED, FilePlan
from pipelines.runtime.io import read_table
from pipelines.runtime.storage import storage_for

# Detection looks at no more than this many characters of one line; the rest of a longer line is skipped.
_HEAD_CHARS = 8 << 20


def list_input_files(paths: Sequence[Location | str]) -> list[tuple[Location, bool]]:
    """Expand files and folders into the files to land, in order, each once.

    Args:
        paths: files or folders: local paths, or object-storage locations (a prefix is a folder).

    Returns:
        (absolute location, named explicitly) per file: a folder's files sorted by path, recursively,
        leaving out names that start with `.` or `_`.

    Raises:
        InputError: for an empty list or a path that does not exist.
    """
    if not paths:
        raise InputError("paths: [] names no file or folder to land")
    found: list[tuple[Location, bool]] = []
    seen: set[Location] = set()
    for given in paths:
        try:
            path = parse_location(given)
        except ConfigError as exc:
            raise InputError(f"paths: {'; '.join(exc.problems)}") from None
        if isinstance(path, ObjectLocation):
            candidates = _object_candidates(path)
            if candidates is None:
                raise InputError(f"paths: {str(given)!r} does not exist")
        elif path.resolve().is_dir():
            path = path.resolve()
            inner = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
                inner += [Path(folder) / n for n in names if not n.startswith((".", "_"))]
            candidates = [(p, False) for p in sorted(inner, key=str) if p.is_file()]
        elif path.resolve().is_file():
            candidates = [(path.resolve(), True)]
        else:
            raise InputError(f"paths: {str(given)!r} does not exist")
        for candidate, explicit in candidates:
            if candidate not in seen:
                seen.add(candidate)
                found.append((candidate, explicit))
    return found


def _object_candidates(location: ObjectLocation) -> list[tuple[Location, bool]] | None:
    """The files of an object location: itself when it is an object, else those below its prefix
    (none whose name on the way starts with `.` or `_`); None when neither exists."""
    storage = storage_for(location)
    if storage.stat(location) is not None:
        return [(location, True)]
    found = []
    for stored in storage.list_files(location):
        relative = stored.location.key[len(location.key) :].strip("/").split("/")
        if not any(part.startswith((".", "_")) for part in relative):
            found.append((stored.location, False))
    if not found and not storage.has_files(location):
        return None
    return found


def plan_files(
    spark: SparkSession,
    settings: Settings,
    files: list[tuple[Location, bool]],
    kind: str | None,
    hasher: ThreadPoolExecutor,
) -> list[FilePlan]:
    """Plan each file of the batch: its content hash, its kind, and whether it is landed already.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        files: (path, named explicitly) per file, as `list_input_files` gives them.
        kind: the kind forced on every file, or None to detect each file's kind.
        hasher: the thread where the hashes no skip decision needs are computed beside the staging: by
            the engine, or here for a file it does not hash (`engine_files.engine_hashable`).

    Returns:
        One plan per file, in order; files not to land have their status and a note.

    Raises:
        InputError: for a file named explicitly whose kind cannot be detected.
    """
    landed_kinds: dict[str, dict[str, str]] = {}  # path -> content hash -> kind it landed as
    ledger_df = read_table(spark, settings, LEDGER_TABLE).select("source_file", "content_hash", "kind").distinct()
    for row in ledger_df.collect():
        landed_kinds.setdefault(row.source_file, {})[row.content_hash] = row.kind
    sizes = {path: _stored_size(path) for path, _ in files}
    hashable = {path for path, size in sizes.items() if engine_hashable(path, size)}
    # The hash decides whether a file whose path landed before is skipped: the engine computes those now.
    # Other files' hashes only go to the ledger: the engine computes them beside the staging.
    hashes = content_hashes(spark, [(path, sizes[path]) for path in sorted(hashable, key=str) if str(path) in landed_kinds])
    later = [(path, sizes[path]) for path in sorted(hashable, key=str) if str(path) not in landed_kinds]
    later_hashes = hasher.submit(content_hashes, spark, later) if later else None
    plans = []
    for index, (path, explicit) in enumerate(files):
        plan = FilePlan(index=index, path=path, kind=kind, explicit=explicit, size=sizes[path])
        if path in hashes:
            plan.content_hash = hashes[path]
        else:
            # The hashing thread runs one task at a time: the engine's batch job before these.
            plan.hash_future = hasher.submit(_content_hash, path, later_hashes if path in hashable else None)
        previous = landed_kinds.get(str(path))
        if previous and plan.sha256() in previous:
            plan.kind = previous[plan.sha256()]
            plan.status, plan.note = ALREADY_LANDED, "same path and content hash as a landed file"
        elif kind is None:
            try:
                plan.kind = detect_file_kind(path)
                message = (
                    f"no line among the first {DETECTION_LINES} is an MCL, MCP or usage record and the file is "
                    "not a JSON array; pass --kind to land it"
                )
            except InputError as exc:
                if explicit:
                    raise
                message = str(exc)
            if plan.kind is None:
                if explicit:
                    raise InputError(f"{path}: {message}")
                # Inside a folder, a file that is no input (a manifest, a README) is reported, not fatal.
                plan.status, plan.note = UNDETECTED, message
        plans.append(plan)
    return plans


def _content_hash(path: Location, engine_hashes: Future | None) -> str:
    """A file's hex SHA-256: the engine's (from the batch's hash job), else computed here."""
    computed = engine_hashes.result() if engine_hashes is not None else {}
    return computed[path] if path in computed else sha256_of(path)


def _stored_size(path: Location) -> int:
    """A file's size in bytes (0 when it is gone: reading it then says so)."""
    stored = storage_for(path).stat(path)
    return stored.size if stored else 0


def detect_file_kind(path: Location) -> str | None:
    """The kind of a file from its first lines (see `detect_kind`), or None when they do not tell it.

    Raises:
        InputError: naming the file, when reading fails before any line tells the kind (a corrupt gzip).
    """
    try:
        with open_text(path) as handle:
            head = HeadLines(handle)
            detected = detect_kind(head)
            # A file that only looked empty because its first lines are blank is not empty.
            if detected == EMPTY and not head.at_end():
                detected = None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
    if detected is None and head.error is not None:
        after = f" after line {head.lines_given}" if head.lines_given else ""
        raise InputError(f"{path}: cannot be read{after} ({head.error})")
    return detected


class HeadLines:
    """The first lines of a file (decompressed) for detection, read one by one as detection asks for them.

    A line longer than `max_chars` (an oversized record, quarantined when landed) is given cut there and
    the rest of it is skipped, so detection goes on with the next lines. Reading stops after
    DETECTION_LINES lines, at the end of the file, or where the file cannot be read further (a truncated
    gzip: detection uses the lines before; `error` says why).
    """

    def __init__(self, handle: TextIO, max_chars: int = _HEAD_CHARS):
        self._handle = handle
        self._max_chars = max_chars
        self._ended = False
        self.lines_given = 0
        self.error: str | None = None

    def __iter__(self) -> Iterator[str]:
        try:
            while self.lines_given < DETECTION_LINES:
                line = self._handle.readline(self._max_chars)
                if not line:
                    self._ended = True
                    return
                if len(line) == self._max_chars and not line.endswith("\n"):
                    while (rest := self._handle.readline(READ_CHUNK)) and not rest.endswith("\n"):
                        pass
                self.lines_given += 1
                yield line
        except READ_ERRORS as exc:
            self.error = error_text(exc)

    def at_end(self) -> bool:
        """Whether the lines given are all of the file (False when reading it failed)."""
        if not self._ended and self.error is None:
            try:
                self._ended = self._handle.read(1) == ""
            except READ_ERRORS as exc:
                self.error = error_text(exc)
        return self._ended and self.error is None

