"""Land input files into bronze: detect each file's kind, validate its records, drop duplicates, commit the batch.

One call of `land_paths` is one batch:
  1. rows of batches that never committed (a landing killed half-way) are deleted from the data tables;
  2. every file is planned: a file landed before with the same path and content hash is skipped;
  3. each file is parsed and validated once and staged as Parquet under `<home>/_scratch/land/<batch>`
     (gzip is read directly; file-sink arrays are first streamed into numbered JSON lines). Line numbers
     of a text read come from the row id within each read partition, with the partitions put in file
     order by checking their first and last lines against the file (the embedded engine may number
     them out of order); a file that does not check out, that the engine cannot read (not UTF-8, a
     damaged gzip: the lines before the damage land), or whose path the engine would take as a glob
     pattern, is numbered here instead. The lines staged must be as many as the file has, or the
     landing stops;
  4. the batch's landable rows lose their duplicates (within the batch, then against the table, on the
     record hash) and are appended to bronze.aspect_snapshots / bronze.usage_events, quarantined records
     to bronze.quarantine;
  5. bronze.landed_files gets one row per landed file with its counts, LAST: only then is the batch
     committed (pipelines.runtime.progress.committed_batches), so a crash before it leaves rows step 1 removes.
"""

from __future__ import annotations

import bisect
import codecs
import gzip
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from bronze.formats import (
    DETECTION_LINES,
    EMPTY,
    FILE_SINK,
    USAGE,
    check_kind,
    detect_kind,
    iter_json_array,
)
from bronze.records import (
    drop_batch_duplicates,
    drop_landed_duplicates,
    filter_landable,
    filter_quarantined,
    line_offsets,
    order_partitions,
    parse_snapshot_lines,
    parse_usage_lines,
    to_duplicate_hashes,
    to_lines,
    to_numbered_lines,
    to_partition_summary,
    to_quarantine_rows,
    with_batch,
    with_line_numbers,
)
from conf.errors import InputError, LakehouseError
from conf.settings import Settings
from conf.tables import table_name
from pipelines.runtime.faults import crash_point
from pipelines.runtime.io import append, read_table, retry_commit
from pipelines.runtime.progress import StageResult, committed_batches

STAGE = "land"
LANDED = "landed"
ALREADY_LANDED = "already landed"
UNDETECTED = "undetected"

SNAPSHOTS_TABLE = "bronze.aspect_snapshots"
USAGE_TABLE = "bronze.usage_events"
QUARANTINE_TABLE = "bronze.quarantine"
LEDGER_TABLE = "bronze.landed_files"
# The tables a batch writes before its ledger rows; rows of uncommitted batches are removed from these.
DATA_TABLES = (SNAPSHOTS_TABLE, USAGE_TABLE, QUARANTINE_TABLE)

# The time column the anti-join against landed rows is restricted by: a duplicate has the same time,
# so only rows (and, with Delta file statistics, only files) in the batch's time range are read.
_TIME_COLUMN = {SNAPSHOTS_TABLE: "created_time", USAGE_TABLE: "timestamp"}
_FAMILIES = ((SNAPSHOTS_TABLE, "snapshots"), (USAGE_TABLE, "usage"))
log = logging.getLogger("lakehouse.landing")
_BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# Detection looks at no more than this many characters of one line; the rest of a longer line is skipped.
_HEAD_CHARS = 8 << 20
_READ_CHUNK = 1 << 20
# The engine reads a path as a glob pattern: with one of these in it, it may read another file, or none.
_GLOB_CHARACTERS = re.compile(r"[*?\[\]{}\\]")
# What reading a damaged file raises: truncated gzip (EOFError), bad header or CRC (OSError), bad deflate data.
_READ_ERRORS = (OSError, EOFError, zlib.error)

# progress(path, files_done, files_total): called before and after each file, and for the commit step.
ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class FileResult:
    """What landing did with one input file.

    Attributes:
        path: the absolute path (bronze's `source_file`).
        kind: mcl, mcp, file-sink, usage or empty; None when it could not be detected.
        status: `landed`, `already landed` (same path and content hash in the ledger) or `undetected`.
        content_hash: SHA-256 of the file's bytes (None when not needed).
        records_read: non-blank lines (file-sink: array elements).
        records_landed: rows written to bronze.aspect_snapshots or bronze.usage_events.
        records_quarantined: rows written to bronze.quarantine.
        duplicates_skipped: valid records already landed, or repeated earlier in the batch.
        note: why a file was not landed.
    """

    path: str
    kind: str | None
    status: str
    content_hash: str | None = None
    records_read: int = 0
    records_landed: int = 0
    records_quarantined: int = 0
    duplicates_skipped: int = 0
    note: str | None = None


@dataclass(frozen=True)
class LandingReport:
    """One landing batch: per-file results and totals.

    Attributes:
        batch_id: the batch id (committed only when `committed`).
        files: one result per input file, in landing order.
        seconds: wall time of the landing.
        discarded_batches: uncommitted batches whose rows were removed before landing.
    """

    batch_id: str
    files: tuple[FileResult, ...]
    seconds: float = 0.0
    discarded_batches: tuple[str, ...] = ()

    @property
    def committed(self) -> bool:
        """True when the batch landed at least one file (its ledger rows exist)."""
        return any(f.status == LANDED for f in self.files)

    @property
    def totals(self) -> dict[str, int]:
        """Sums over the files: records read/landed/quarantined/duplicates, files landed/skipped."""
        return {
            "records_read": sum(f.records_read for f in self.files),
            "records_landed": sum(f.records_landed for f in self.files),
            "records_quarantined": sum(f.records_quarantined for f in self.files),
            "duplicates_skipped": sum(f.duplicates_skipped for f in self.files),
            "files_landed": sum(f.status == LANDED for f in self.files),
            "files_already_landed": sum(f.status == ALREADY_LANDED for f in self.files),
            "files_undetected": sum(f.status == UNDETECTED for f in self.files),
        }

    def reconciliation(self) -> str:
        """The batch's `read = landed + quarantined + duplicates` line, as printed after a landing."""
        t = self.totals
        return (
            f"batch {self.batch_id}: {t['records_read']} records read = {t['records_landed']} landed + "
            f"{t['records_quarantined']} quarantined + {t['duplicates_skipped']} duplicates skipped"
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data."""
        return {
            "batch_id": self.batch_id,
            "committed": self.committed,
            "seconds": self.seconds,
            "discarded_batches": list(self.discarded_batches),
            "totals": self.totals,
            "files": [asdict(f) for f in self.files],
        }

    def as_stage_result(self) -> StageResult:
        """The landing as a pipeline stage result (metrics: the totals)."""
        totals = self.totals
        return StageResult(
            stage=STAGE,
            batch_ids=(self.batch_id,) if self.committed else (),
            rows_in=totals["records_read"],
            rows_out=totals["records_landed"],
            metrics={k: float(v) for k, v in totals.items()},
        )


@dataclass
class _Plan:
    """One input file on its way through the batch."""

    index: int
    path: Path
    kind: str | None
    explicit: bool = False  # named on its own, not found in a folder
    status: str = LANDED
    note: str | None = None
    digest_future: Future | None = None  # of a FileDigest
    lines_future: Future | None = None  # of the line count of a gzip file (plain files: in the digest)
    content_hash: str | None = None
    family: str | None = None  # the table the file's records land in
    staged: Path | None = None
    schema: StructType | None = None  # of the staged Parquet (an empty part writes no file to read it from)
    records_read: int = 0
    records_quarantined: int = 0
    partitions: list[tuple[int, int]] = field(default_factory=list)  # (read partition, rows) in file order
    rejected: list[tuple[int, str, str]] = field(default_factory=list)  # (line, raw text, reason) found in Python


def land_paths(
    spark: SparkSession,
    settings: Settings,
    paths: Sequence[Path | str],
    kind: str | None = None,
    batch_id: str | None = None,
    progress: ProgressCallback | None = None,
) -> LandingReport:
    """Land files and folders (walked recursively, sorted) into the bronze tables as one batch.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings (home, ingest.default_actor, ingest.max_record_bytes).
        paths: files or folders; inside folders, names starting with `.` or `_` are passed over.
        kind: force every file's kind (mcl, mcp, file-sink, usage) instead of detecting it.
        batch_id: the batch id; a new time-ordered one when None.
        progress: called as `progress(path, files_done, files_total)`.

    Returns:
        The per-file results and totals; `batch_id` is committed when any file landed.

    Raises:
        InputError: a path that does not exist, a file named explicitly whose kind cannot be detected or
            of which nothing can be read, a bad kind or batch id, or a batch id that is already committed.
        LakehouseError: a file whose staged lines are not as many as it has (nothing is committed).
    """
    started = time.monotonic()
    check_kind(kind, "kind")
    files = list_input_files(paths)
    batch_id = check_batch_id(batch_id) if batch_id is not None else new_batch_id()
    landed_at = datetime.now(timezone.utc)
    discarded = discard_uncommitted_batches(spark, settings)
    if batch_id in set(committed_batches(spark, settings)):
        raise InputError(f"batch_id: {batch_id!r} is already committed; choose another or leave it out")
    scratch = scratch_folder(settings, batch_id)
    shutil.rmtree(scratch, ignore_errors=True)
    total = len(files) + 1
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="land-hash")
    try:
        plans = _plan_files(spark, settings, files, kind, hasher)
        for plan in plans:
            _report(progress, str(plan.path), plan.index, total)
            if plan.status == LANDED:
                _stage_file(spark, settings, plan, scratch)
            _report(progress, str(plan.path), plan.index + 1, total)
        _report(progress, f"commit batch {batch_id}", len(files), total)
        results = _write_batch(spark, settings, plans, batch_id, landed_at)
        _report(progress, f"commit batch {batch_id}", total, total)
    finally:
        hasher.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return LandingReport(
        batch_id=batch_id,
        files=tuple(results),
        seconds=round(time.monotonic() - started, 3),
        discarded_batches=tuple(discarded),
    )


def list_input_files(paths: Sequence[Path | str]) -> list[tuple[Path, bool]]:
    """Expand files and folders into the files to land, in order, each once.

    Args:
        paths: files or folders.

    Returns:
        (absolute path, named explicitly) per file: a folder's files sorted by path, recursively,
        leaving out names that start with `.` or `_`.

    Raises:
        InputError: for an empty list or a path that does not exist.
    """
    if not paths:
        raise InputError("paths: [] names no file or folder to land")
    found: list[tuple[Path, bool]] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given).expanduser().resolve()
        if path.is_dir():
            inner = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
                inner += [Path(folder) / n for n in names if not n.startswith((".", "_"))]
            candidates = [(p, False) for p in sorted(inner, key=str) if p.is_file()]
        elif path.is_file():
            candidates = [(path, True)]
        else:
            raise InputError(f"paths: {str(given)!r} does not exist")
        for candidate, explicit in candidates:
            if candidate not in seen:
                seen.add(candidate)
                found.append((candidate, explicit))
    return found


def new_batch_id() -> str:
    """A new batch id: UTC time (sortable) and a random suffix, e.g. `20261121T221500123456Z-1a2b3c4d`."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"


def check_batch_id(batch_id: str) -> str:
    """Return `batch_id` when it is usable as an id (letters, digits, `.`, `_`, `:`, `-`; at most 128).

    Raises:
        InputError: naming the value.
    """
    if not isinstance(batch_id, str) or not _BATCH_ID.match(batch_id):
        raise InputError(
            f"batch_id: {batch_id!r} must be 1-128 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )
    return batch_id


def scratch_folder(settings: Settings, batch_id: str) -> Path:
    """The folder holding one landing batch's staged files (removed when the landing ends)."""
    return settings.home / "_scratch" / STAGE / batch_id


def discard_uncommitted_batches(spark: SparkSession, settings: Settings) -> list[str]:
    """Delete the rows of batches that wrote data but no ledger rows (a landing that did not finish).

    Must run under the run lock: a landing in progress elsewhere looks exactly like a dead one.

    Returns:
        The batch ids whose rows were deleted, sorted.
    """
    committed = set(committed_batches(spark, settings))
    discarded: set[str] = set()
    for key in DATA_TABLES:
        present = [r.batch_id for r in read_table(spark, settings, key).select("batch_id").distinct().collect()]
        stale = sorted(b for b in present if b is not None and b not in committed)
        if stale:
            listed = ", ".join(_sql_string(b) for b in stale)
            statement = f"DELETE FROM {table_name(settings, key)} WHERE batch_id IN ({listed})"
            retry_commit(lambda statement=statement: spark.sql(statement).collect())
            discarded.update(stale)
    leftovers = settings.home / "_scratch" / STAGE
    if leftovers.is_dir():
        for folder in leftovers.iterdir():
            if folder.name not in committed:
                shutil.rmtree(folder, ignore_errors=True)
    return sorted(discarded)


def list_quarantined(
    spark: SparkSession, settings: Settings, *, batch_id: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Return quarantined records, newest batch first, then by file and line.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        batch_id: only this batch's records.
        limit: at most this many records.

    Raises:
        InputError: for a limit below 1.
    """
    if not isinstance(limit, int) or limit < 1:
        raise InputError(f"limit: {limit!r} must be a positive integer")
    quarantine_df = read_table(spark, settings, QUARANTINE_TABLE)
    if batch_id is not None:
        quarantine_df = quarantine_df.filter(F.col("batch_id") == batch_id)
    rows = (
        quarantine_df.orderBy(F.col("quarantined_at").desc(), "batch_id", "source_file", "line_number")
        .select("batch_id", "source_file", "line_number", "kind", "field", "reason", "raw_text", "quarantined_at")
        .limit(limit)
        .collect()
    )
    return [r.asDict() for r in rows]


# ----------------------------------------------------------------------------------------------
# Planning: kinds, and files already landed
# ----------------------------------------------------------------------------------------------


def _plan_files(
    spark: SparkSession,
    settings: Settings,
    files: list[tuple[Path, bool]],
    kind: str | None,
    hasher: ThreadPoolExecutor,
) -> list[_Plan]:
    landed_kinds: dict[str, dict[str, str]] = {}  # path -> content hash -> kind it landed as
    ledger_df = read_table(spark, settings, LEDGER_TABLE).select("source_file", "content_hash", "kind").distinct()
    for row in ledger_df.collect():
        landed_kinds.setdefault(row.source_file, {})[row.content_hash] = row.kind
    plans = []
    for index, (path, explicit) in enumerate(files):
        # Reading a large file takes seconds; it runs beside the Spark work unless the skip decision needs it.
        plan = _Plan(
            index=index, path=path, kind=kind, explicit=explicit, digest_future=hasher.submit(file_digest, path)
        )
        previous = landed_kinds.get(str(path))
        if previous and plan.digest_future.result().sha256 in previous:
            plan.kind = previous[plan.digest_future.result().sha256]
            plan.status, plan.note = ALREADY_LANDED, "same path and content hash as a landed file"
        elif kind is None:
            try:
                plan.kind = _detect(path)
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
        if plan.status == LANDED and plan.kind not in (EMPTY, FILE_SINK) and _is_gzip(path):
            # Counting a gzip file's lines means decompressing it: only for files that land, beside the Spark work.
            plan.lines_future = hasher.submit(count_lines, path)
        plans.append(plan)
    return plans


def _detect(path: Path) -> str | None:
    """The kind of a file from its first lines (see `detect_kind`), or None when they do not tell it.

    Raises:
        InputError: naming the file, when reading fails before any line tells the kind (a corrupt gzip).
    """
    try:
        with _open_text(path) as handle:
            head = _HeadLines(handle)
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


class _HeadLines:
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
                    while (rest := self._handle.readline(_READ_CHUNK)) and not rest.endswith("\n"):
                        pass
                self.lines_given += 1
                yield line
        except _READ_ERRORS as exc:
            self.error = _error_text(exc)

    def at_end(self) -> bool:
        """Whether the lines given are all of the file (False when reading it failed)."""
        if not self._ended and self.error is None:
            try:
                self._ended = self._handle.read(1) == ""
            except _READ_ERRORS as exc:
                self.error = _error_text(exc)
        return self._ended and self.error is None


def _open_text(path: Path) -> TextIO:
    if _is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class FileDigest:
    """What one read of a file's bytes gives: its SHA-256 and where its lines are.

    Attributes:
        sha256: hex SHA-256 of the bytes.
        block_size: the size of the blocks `newlines` counts in.
        newlines: line breaks in each block of `block_size` bytes (empty for gzip: its blocks are compressed).
        lines: the file's lines as `count_lines` counts them (None for gzip: see `count_lines`).
    """

    sha256: str
    block_size: int
    newlines: tuple[int, ...]
    lines: int | None = None


def file_digest(path: Path, block_size: int = 16 << 20) -> FileDigest:
    """Hash a file's bytes and count its line breaks per block, in one read.

    Args:
        path: the file.
        block_size: bytes per block (the unit `LineScanner` seeks by).
    """
    digest = hashlib.sha256()
    counts = []
    plain = not _is_gzip(path)
    last = b""
    with open(path, "rb") as handle:
        while chunk := handle.read(block_size):
            digest.update(chunk)
            if plain:
                counts.append(chunk.count(b"\n"))
                last = chunk[-1:]
    if not plain:
        return FileDigest(digest.hexdigest(), block_size, ())
    return FileDigest(digest.hexdigest(), block_size, tuple(counts), sum(counts) + (last not in (b"", b"\n")))


def count_lines(path: Path) -> int | None:
    """Count a file's lines (decompressed): its line breaks, plus a last line without one.

    Returns:
        The count, or None when the file cannot be read to its end (a truncated or corrupt gzip).
    """
    breaks = 0
    last = b""
    try:
        with _open_binary(path) as handle:
            while block := handle.read1(4 * _READ_CHUNK):
                breaks += block.count(b"\n")
                last = block[-1:]
    except _READ_ERRORS:
        return None
    return breaks + (last not in (b"", b"\n"))


# ----------------------------------------------------------------------------------------------
# Staging: parse and validate one file, write it as Parquet, count it
# ----------------------------------------------------------------------------------------------


def _stage_file(spark: SparkSession, settings: Settings, plan: _Plan, scratch: Path) -> None:
    """Parse, validate and stage one file; fill in its counts and the file order of its read partitions.

    Raises:
        InputError: for a file named explicitly of which not one line can be read.
        LakehouseError: when the lines staged are not the file's lines (see `_check_line_count`).
    """
    if plan.kind == EMPTY:
        return
    plan.family = USAGE_TABLE if plan.kind == USAGE else SNAPSHOTS_TABLE
    numbered = scratch / "input" / f"{plan.index:05d}.txt"
    if plan.kind == FILE_SINK:
        copy, plan.rejected = _convert_file_sink(plan.path, numbered, settings.ingest.max_record_bytes)
        _stage_copy(spark, settings, plan, scratch, numbered, copy)
        return
    ordered = _stage_engine_read(spark, settings, plan, scratch)
    if ordered is None:
        # Number the lines here (undecodable bytes become U+FFFD; a damaged gzip gives the lines before
        # the damage) and stage the numbered copy, which has a safe name, instead.
        copy = _number_lines(plan.path, numbered)
        _check_line_count(plan.path, copy.lines, "lines read", None if copy.error else _file_lines(plan))
        _stage_copy(spark, settings, plan, scratch, numbered, copy)
        ordered = []
    plan.partitions = ordered


def _stage_engine_read(
    spark: SparkSession, settings: Settings, plan: _Plan, scratch: Path
) -> list[tuple[int, int]] | None:
    """Stage a JSON-lines file as the engine reads it; return its read partitions in file order.

    Returns:
        (partition, rows) in file order, or None when the engine's read cannot be used and the caller
        must number the lines itself: a path the engine would take as a glob pattern, a file it cannot
        read (bytes that are not UTF-8, a gzip it cannot decompress), or a read that is not exactly the
        file's lines (another count, e.g. a lone carriage return splits a line; partitions, or a first
        and last line, that do not match the file).
    """
    source = str(plan.path)
    if _GLOB_CHARACTERS.search(source):
        return None
    try:
        summary = _stage_lines(settings, plan, scratch, to_lines(spark.read.text(source), plan.index, source))
    except Exception as exc:  # noqa: BLE001 - the Python pass reads what can be read and says why the rest cannot
        # Logged, so that a failure unrelated to the file (which the Python pass then meets again) is
        # seen with its first cause.
        log.warning("%s: the engine could not read it (%s); numbering its lines in Python", source, exc)
        return None
    if sum(int(r.rows) for r in summary) != _file_lines(plan):
        return None
    return _file_order(plan.path, summary, plan.digest_future.result())


def _stage_copy(
    spark: SparkSession, settings: Settings, plan: _Plan, scratch: Path, numbered: Path, copy: _Copy
) -> None:
    """Stage the numbered copy of a file, quarantining where reading the file stopped early.

    Raises:
        InputError: for a file named explicitly of which nothing can be read.
        LakehouseError: when the rows staged are not the lines of the copy.
    """
    if copy.error is not None:
        if not (copy.lines or copy.lines_read or copy.cut_text or plan.rejected):
            # Nothing of the file can be read: reported as detection reports a corrupt gzip.
            message = f"{plan.path}: cannot be read ({copy.error})"
            if plan.explicit:
                raise InputError(message)
            plan.status, plan.note = UNDETECTED, message
            return
        limit = settings.ingest.max_record_bytes
        reason = f"record: file truncated or corrupt after line {copy.lines_read} ({copy.error})"
        plan.rejected.append((copy.cut_line or copy.lines_read + 1, copy.cut_text[:limit], reason))
    # Only a line feed ends a line of the copy: the engine would also end one at a lone carriage return.
    text_df = spark.read.option("lineSep", "\n").text(str(numbered))
    summary = _stage_lines(settings, plan, scratch, to_numbered_lines(text_df, plan.index, str(plan.path)))
    _check_line_count(plan.path, sum(int(r.rows) for r in summary), "lines staged", copy.lines)


def _file_lines(plan: _Plan) -> int | None:
    """How many lines the plan's file has (decompressed); None when that is unknown (a damaged gzip)."""
    if plan.lines_future is not None:
        return plan.lines_future.result()
    return plan.digest_future.result().lines


def _check_line_count(path: Path, got: int, what: str, expected: int | None) -> None:
    """Fail unless `got` lines of a file are `expected` (when known): no line may be lost or made up.

    Raises:
        LakehouseError: naming the file and both counts (the batch is not committed).
    """
    if expected is not None and got != expected:
        raise LakehouseError(
            f"{path}: {got} {what} but the file has {expected} lines; the batch is not committed, so that "
            "no record is lost silently"
        )


def _stage_lines(settings: Settings, plan: _Plan, scratch: Path, lines_df: DataFrame) -> list:
    """Validate `lines_df`, write it to the plan's staging folder, count it; return its partition summary."""
    limit = settings.ingest.max_record_bytes
    if plan.family == USAGE_TABLE:
        staged_df = parse_usage_lines(lines_df, max_record_bytes=limit)
    else:
        staged_df = parse_snapshot_lines(
            lines_df, plan.kind, default_actor=settings.ingest.default_actor, max_record_bytes=limit
        )
    plan.staged = scratch / dict(_FAMILIES)[plan.family] / f"{plan.index:05d}"
    staged_df.write.mode("overwrite").parquet(str(plan.staged))
    # Read back as nullable: the parts of one family differ there (text reads have a non-null row id).
    plan.schema = StructType([StructField(f.name, f.dataType, nullable=True) for f in staged_df.schema.fields])
    summary = []
    if _has_files(plan.staged):
        read_df = lines_df.sparkSession.read.schema(plan.schema).parquet(str(plan.staged))
        summary = to_partition_summary(read_df).collect()
    plan.records_read = sum(int(r.records_read) for r in summary) + len(plan.rejected)
    plan.records_quarantined = sum(int(r.records_quarantined) for r in summary) + len(plan.rejected)
    return summary


def _file_order(path: Path, summary: list, digest: FileDigest) -> list[tuple[int, int]] | None:
    """The read partitions of a text-read file as (partition, rows) in file order; None if unverifiable."""
    parts = [(int(r.partition), int(r.rows), r.first_crc, r.last_crc) for r in summary if r.partition is not None]
    if len(parts) <= 1 and not digest.newlines:
        # A gzip file is read as one partition, front to back; checking its last line means decompressing it.
        return [(p[0], p[1]) for p in parts]
    with LineScanner(path, digest) as scanner:
        order = order_partitions(parts, scanner.crc_at)
    if order is None:
        return None
    rows = {p[0]: p[1] for p in parts}
    return [(partition, rows[partition]) for partition in order]


class LineScanner:
    """Reads a file forward and gives the CRC-32 of the lines asked for, as the engine splits lines.

    With a FileDigest of a plain file it seeks to the block holding a far line instead of reading up to it.
    """

    def __init__(self, path: Path, digest: FileDigest | None = None):
        self._handle = _open_binary(path)
        self._buf = b""
        self._line = 1  # the line number of self._buf[0]
        self._eof = False
        self._block_size = digest.block_size if digest else 0
        # Lines that start before each block: a line break at the end of block b-1 starts a line in b.
        self._breaks_before = []
        seen = 0
        for count in digest.newlines if digest else ():
            self._breaks_before.append(seen)
            seen += count

    def __enter__(self) -> LineScanner:
        return self

    def __exit__(self, *exc_info) -> None:
        self._handle.close()

    def crc_at(self, number: int) -> int | None:
        """The CRC-32 of line `number` (without its line break), None past the end; never go back."""
        if number < self._line:
            raise InputError(f"number: line {number} is behind the scanner (at line {self._line})")
        self._seek_towards(number)
        self._skip(number - self._line)
        end = self._buf.find(b"\n")
        while end == -1 and not self._eof:
            self._read_more()
            end = self._buf.find(b"\n")
        if end == -1 and not self._buf:
            return None
        line = self._buf if end == -1 else self._buf[:end]
        return zlib.crc32(line[:-1] if line.endswith(b"\r") else line)

    def _seek_towards(self, number: int) -> None:
        """Jump ahead to the last block where a line at most `number` starts, when that is ahead."""
        # Block b starts inside line breaks_before[b] + 1; the next line starts in it (or b starts it).
        block = bisect.bisect_right(self._breaks_before, number - 2) - 1
        if block <= 0 or self._breaks_before[block] + 1 <= self._line:
            return
        self._handle.seek(block * self._block_size - 1)
        starts_a_line = self._handle.read(1) == b"\n"
        self._buf = b""
        self._eof = False
        self._line = self._breaks_before[block] + 1
        if not starts_a_line:
            self._skip(1)  # the rest of the line the block starts inside

    def _skip(self, count: int) -> None:
        while count > 0:
            newlines = self._buf.count(b"\n")
            if newlines >= count:
                position = -1
                for _ in range(count):
                    position = self._buf.find(b"\n", position + 1)
                self._buf = self._buf[position + 1 :]
                self._line += count
                return
            if newlines:
                self._buf = self._buf[self._buf.rfind(b"\n") + 1 :]
                self._line += newlines
                count -= newlines
            if self._eof:
                if self._buf:  # a last line without a line break
                    self._buf = b""
                    self._line += 1
                    count -= 1
                if count > 0:
                    return
            else:
                self._read_more()

    def _read_more(self) -> None:
        chunk = self._handle.read(4 * _READ_CHUNK)
        if chunk:
            self._buf += chunk
        else:
            self._eof = True


@dataclass(frozen=True)
class _Copy:
    """A numbered copy of an input file (`<line>\t<record>` lines) and how reading the input ended.

    Attributes:
        lines: lines written to the copy.
        lines_read: input lines read to their end (file-sink: the input's lines, not its elements).
        error: why the input could not be read to its end (a truncated or corrupt gzip); None when it was.
        cut_text: with an error, the text read of the record reading stopped in.
        cut_line: the line that record starts on, when not the line after `lines_read` (a file-sink element).
    """

    lines: int
    lines_read: int
    error: str | None = None
    cut_text: str = ""
    cut_line: int | None = None


def _number_lines(path: Path, out: Path) -> _Copy:
    """Write a JSON-lines file as `<line>\t<line text>` lines (the engine-independent way to number lines).

    A file that cannot be read to its end (a truncated or corrupt gzip) gives the lines before the damage.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    number = 0
    pending: list[bytes] = []  # the start of a line no block has ended yet
    error = None
    with _open_binary(path) as source, open(out, "w", encoding="utf-8") as target:
        while True:
            try:
                # One read of the source at a time: when one fails, the text of those before is kept.
                block = source.read1(4 * _READ_CHUNK)
            except _READ_ERRORS as exc:
                error = _error_text(exc)
                break
            if not block:
                break
            cut = block.rfind(b"\n")
            if cut == -1:
                pending.append(block)
                continue
            text = b"".join([*pending, block[:cut]])
            pending = [block[cut + 1 :]]
            # Blocks end at a line break, so no UTF-8 sequence is cut in two.
            lines = text.decode("utf-8", "replace").split("\n")
            target.write("".join(f"{number + i}\t{line.removesuffix(chr(13))}\n" for i, line in enumerate(lines, 1)))
            number += len(lines)
        tail = b"".join(pending).decode("utf-8", "replace")
        if error is not None:
            return _Copy(lines=number, lines_read=number, error=error, cut_text=tail)
        if tail:
            target.write(f"{number + 1}\t{tail.removesuffix(chr(13))}\n")
            number += 1
    return _Copy(lines=number, lines_read=number)


def _open_binary(path: Path):
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def _is_gzip(path: Path) -> bool:
    return path.name.endswith(".gz")


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _convert_file_sink(path: Path, out: Path, max_record_bytes: int) -> tuple[_Copy, list[tuple[int, str, str]]]:
    """Stream a file-sink JSON array into `<line>\\t<record>` lines.

    Returns:
        The copy written (a file that cannot be read to its end gives the elements before the damage),
        and the elements that failed as (line, raw text, reason).

    Raises:
        InputError: naming the file, when its text is not a JSON array.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    rejected = []
    written = 0
    chunks = _CountedChunks(path)
    last_rejected = False
    try:
        with open(out, "w", encoding="utf-8") as target:
            for item in iter_json_array(chunks, max_element_chars=max_record_bytes):
                last_rejected = item.reason is not None
                if item.reason is None:
                    target.write(f"{item.line}\t{item.text}\n")
                    written += 1
                else:
                    rejected.append((item.line, item.text[:max_record_bytes], item.reason))
    except InputError as exc:
        # The array reader stops where the text stops: when reading failed there, the file is damaged
        # (cut between two elements).
        if chunks.error is None:
            raise InputError(f"{path}: {exc}") from None
        last_rejected = False
    if chunks.error is not None and last_rejected:
        # Reading stopped inside the last element: it is the record the damage cut, not a malformed one.
        line, text, _ = rejected.pop()
        return _Copy(written, chunks.lines, chunks.error, cut_text=text, cut_line=line), rejected
    return _Copy(lines=written, lines_read=chunks.lines, error=chunks.error), rejected


class _CountedChunks:
    """A file's text (decompressed) in chunks, counting the lines they end: how far reading got when it fails.

    Iteration stops where the file cannot be read further (a truncated or corrupt gzip); `error` then says
    why, and every chunk before was given.
    """

    def __init__(self, path: Path):
        self._path = path
        self.lines = 0
        self.error: str | None = None

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            with _open_binary(self._path) as handle:
                # One read of the source at a time: when one fails, the text of those before is kept.
                while block := handle.read1(_READ_CHUNK):
                    chunk = decoder.decode(block)
                    self.lines += chunk.count("\n")
                    yield chunk
        except _READ_ERRORS as exc:
            self.error = _error_text(exc)
            return
        if rest := decoder.decode(b"", final=True):
            yield rest  # the replacement of a UTF-8 sequence the file ends inside


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.suffix == ".parquet" for p in folder.iterdir())


# ----------------------------------------------------------------------------------------------
# Writing the batch: data tables, quarantine, then the ledger
# ----------------------------------------------------------------------------------------------


def _write_batch(
    spark: SparkSession, settings: Settings, plans: list[_Plan], batch_id: str, landed_at: datetime
) -> list[FileResult]:
    landing = [p for p in plans if p.status == LANDED]
    for plan in landing:
        plan.content_hash = plan.digest_future.result().sha256
    if not landing:
        return [_result(p, 0) for p in plans]
    offsets = line_offsets({p.index: p.partitions for p in landing if p.partitions})
    quarantined: list[DataFrame] = []
    for table_key, _ in _FAMILIES:
        family = [p for p in landing if p.family == table_key and p.staged is not None and _has_files(p.staged)]
        if not family:
            continue
        staged_df = with_line_numbers(
            spark.read.schema(family[0].schema).parquet(*[str(p.staged) for p in family]), offsets
        )
        if any(p.records_read > p.records_quarantined for p in family):
            _append_landable(spark, settings, table_key, filter_landable(staged_df), batch_id, landed_at)
        if any(p.records_quarantined > len(p.rejected) for p in family):
            quarantined.append(to_quarantine_rows(filter_quarantined(staged_df), batch_id, landed_at))
    rejected = [(r[1], str(p.path), r[0], p.kind, r[2]) for p in landing for r in p.rejected]
    if rejected:
        rejected_df = spark.createDataFrame(
            rejected, "raw_text string, source_file string, line_number bigint, source_kind string, reason string"
        )
        quarantined.append(to_quarantine_rows(rejected_df, batch_id, landed_at))
    if quarantined:
        all_quarantined_df = quarantined[0]
        for more_df in quarantined[1:]:
            all_quarantined_df = all_quarantined_df.unionByName(more_df)
        append(all_quarantined_df, settings, QUARANTINE_TABLE)
    landed = _landed_counts(spark, settings, batch_id)
    results = []
    for plan in plans:
        result = _result(plan, landed.get(str(plan.path), 0))
        if result.duplicates_skipped < 0:
            raise LakehouseError(
                f"{plan.path}: landed {result.records_landed} of {plan.records_read - plan.records_quarantined} "
                f"valid records in batch {batch_id}; the bronze tables changed during the landing"
            )
        results.append(result)
    crash_point("land.after_data")
    _append_ledger(spark, settings, [r for r in results if r.status == LANDED], batch_id, landed_at)
    return results


def _append_landable(
    spark: SparkSession, settings: Settings, table_key: str, landable_df: DataFrame, batch_id: str, landed_at: datetime
) -> None:
    """Append the landable rows that are not duplicates (of each other, or of landed rows)."""
    # A window over the whole batch costs a sort; most batches have no repeated record, so look first.
    if to_duplicate_hashes(landable_df).limit(1).count():
        landable_df = drop_batch_duplicates(landable_df)
    time_column = _TIME_COLUMN[table_key]
    low, high = landable_df.agg(F.min(time_column), F.max(time_column)).first()
    landed_hashes_df = read_table(spark, settings, table_key).filter(F.col(time_column).between(low, high))
    new_df = drop_landed_duplicates(landable_df, landed_hashes_df)
    append(with_batch(new_df, batch_id, landed_at), settings, table_key)


def _landed_counts(spark: SparkSession, settings: Settings, batch_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table_key, _ in _FAMILIES:
        rows = (
            read_table(spark, settings, table_key)
            .filter(F.col("batch_id") == batch_id)
            .groupBy("source_file")
            .count()
            .collect()
        )
        for row in rows:
            counts[row.source_file] = counts.get(row.source_file, 0) + int(row["count"])
    return counts


def _append_ledger(
    spark: SparkSession, settings: Settings, results: list[FileResult], batch_id: str, landed_at: datetime
) -> None:
    rows = [
        (
            r.path,
            r.content_hash,
            r.kind,
            r.records_read,
            r.records_landed,
            r.records_quarantined,
            r.duplicates_skipped,
        )
        for r in results
    ]
    ledger_df = spark.createDataFrame(
        rows,
        "source_file string, content_hash string, kind string, records_read bigint, records_landed bigint, "
        "records_quarantined bigint, duplicates_skipped bigint",
    )
    append(with_batch(ledger_df, batch_id, landed_at), settings, LEDGER_TABLE)


def _result(plan: _Plan, landed: int) -> FileResult:
    if plan.status != LANDED:
        return FileResult(path=str(plan.path), kind=plan.kind, status=plan.status, note=plan.note)
    return FileResult(
        path=str(plan.path),
        kind=plan.kind,
        status=LANDED,
        content_hash=plan.content_hash,
        records_read=plan.records_read,
        records_landed=landed,
        records_quarantined=plan.records_quarantined,
        duplicates_skipped=plan.records_read - plan.records_quarantined - landed,
    )


def _report(progress: ProgressCallback | None, path: str, done: int, total: int) -> None:
    if progress is not None:
        progress(path, done, total)


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
