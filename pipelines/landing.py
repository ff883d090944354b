"""Land input files into bronze: detect each file's kind, validate its records, drop duplicates, commit the batch.

One call of `land_paths` is one batch:
  1. rows of batches that never committed (a landing killed half-way) are deleted from the data tables;
  2. every file is planned: a file landed before with the same path and content hash is skipped;
  3. each file is parsed and validated once and staged as Parquet under `<home>/_scratch/land/<batch>`
     (gzip is read directly; file-sink arrays are first streamed into numbered JSON lines). Line numbers
     of a text read come from the row id within each read partition, with the partitions put in file
     order by checking their first and last lines against the file (the embedded engine may number
     them out of order); a file that does not check out, or that the engine cannot decode, is numbered
     here instead;
  4. the batch's landable rows lose their duplicates (within the batch, then against the table, on the
     record hash) and are appended to bronze.aspect_snapshots / bronze.usage_events, quarantined records
     to bronze.quarantine;
  5. bronze.landed_files gets one row per landed file with its counts, LAST: only then is the batch
     committed (pipelines.progress.committed_batches), so a crash before it leaves rows step 1 removes.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
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
from pipelines.faults import crash_point
from pipelines.io import append, read_table, retry_commit
from pipelines.progress import StageResult, committed_batches

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
_BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_HEAD_CHARS = 8 << 20
_READ_CHUNK = 1 << 20

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
    status: str = LANDED
    note: str | None = None
    digest_future: Future | None = None  # of a FileDigest
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
        InputError: a path that does not exist, a file named explicitly whose kind cannot be detected,
            a bad kind or batch id, or a batch id that is already committed.
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
        plan = _Plan(index=index, path=path, kind=kind, digest_future=hasher.submit(file_digest, path))
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
        plans.append(plan)
    return plans


def _detect(path: Path) -> str | None:
    try:
        lines, complete = _head_lines(path)
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
    detected = detect_kind(lines)
    # A file that only looked empty because its first lines are blank is not empty.
    return None if detected == EMPTY and not complete else detected


def _head_lines(path: Path) -> tuple[list[str], bool]:
    """The first lines of a file (decompressed) and whether they are all of it."""
    lines: list[str] = []
    chars = 0
    with _open_text(path) as handle:
        while len(lines) < DETECTION_LINES and chars < _HEAD_CHARS:
            line = handle.readline(_HEAD_CHARS - chars)
            if not line:
                return lines, True
            lines.append(line)
            chars += len(line)
        return lines, handle.read(1) == ""


def _open_text(path: Path) -> TextIO:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class FileDigest:
    """What one read of a file's bytes gives: its SHA-256 and where its lines are.

    Attributes:
        sha256: hex SHA-256 of the bytes.
        block_size: the size of the blocks `newlines` counts in.
        newlines: line breaks in each block of `block_size` bytes (empty for gzip: its blocks are compressed).
    """

    sha256: str
    block_size: int
    newlines: tuple[int, ...]


def file_digest(path: Path, block_size: int = 16 << 20) -> FileDigest:
    """Hash a file's bytes and count its line breaks per block, in one read.

    Args:
        path: the file.
        block_size: bytes per block (the unit `LineScanner` seeks by).
    """
    digest = hashlib.sha256()
    counts = []
    plain = not path.name.endswith(".gz")
    with open(path, "rb") as handle:
        while chunk := handle.read(block_size):
            digest.update(chunk)
            if plain:
                counts.append(chunk.count(b"\n"))
    return FileDigest(digest.hexdigest(), block_size, tuple(counts) if plain else ())


# ----------------------------------------------------------------------------------------------
# Staging: parse and validate one file, write it as Parquet, count it
# ----------------------------------------------------------------------------------------------


def _stage_file(spark: SparkSession, settings: Settings, plan: _Plan, scratch: Path) -> None:
    """Parse, validate and stage one file; fill in its counts and the file order of its read partitions."""
    if plan.kind == EMPTY:
        return
    plan.family = USAGE_TABLE if plan.kind == USAGE else SNAPSHOTS_TABLE
    source = str(plan.path)
    numbered = scratch / "input" / f"{plan.index:05d}.txt"
    if plan.kind == FILE_SINK:
        plan.rejected = _convert_file_sink(plan.path, numbered, settings.ingest.max_record_bytes)
        _stage_lines(settings, plan, scratch, to_numbered_lines(spark.read.text(str(numbered)), plan.index, source))
        return
    try:
        summary = _stage_lines(settings, plan, scratch, to_lines(spark.read.text(source), plan.index, source))
        ordered = _file_order(plan.path, summary, plan.digest_future.result())
    except Exception as exc:  # noqa: BLE001 - re-raised unless the engine could not decode the file
        if "utf-8" not in str(exc).lower():
            raise
        ordered = None
    if ordered is None:
        # The engine could not decode the file, or its read partitions did not tile the file's lines:
        # number the lines here (undecodable bytes become U+FFFD) and stage the numbered copy instead.
        _number_lines(plan.path, numbered)
        _stage_lines(settings, plan, scratch, to_numbered_lines(spark.read.text(str(numbered)), plan.index, source))
        ordered = []
    plan.partitions = ordered


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
    if len(parts) <= 1:
        return [(p[0], p[1]) for p in parts]  # one partition is read front to back
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


def _number_lines(path: Path, out: Path) -> None:
    """Write a JSON-lines file as `<line>\t<line text>` lines (the engine-independent way to number lines)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    number = 0
    tail = b""
    with _open_binary(path) as source, open(out, "w", encoding="utf-8") as target:
        while block := source.read(4 * _READ_CHUNK):
            block = tail + block
            cut = block.rfind(b"\n")
            if cut == -1:
                tail = block
                continue
            tail = block[cut + 1 :]
            # Blocks end at a line break, so no UTF-8 sequence is cut in two.
            lines = block[:cut].decode("utf-8", "replace").split("\n")
            target.write("".join(f"{number + i}\t{line.removesuffix(chr(13))}\n" for i, line in enumerate(lines, 1)))
            number += len(lines)
        if tail:
            target.write(f"{number + 1}\t{tail.decode('utf-8', 'replace').removesuffix(chr(13))}\n")


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _convert_file_sink(path: Path, out: Path, max_record_bytes: int) -> list[tuple[int, str, str]]:
    """Stream a file-sink JSON array into `<line>\\t<record>` lines; return the elements that failed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    rejected = []
    try:
        with _open_text(path) as source, open(out, "w", encoding="utf-8") as target:
            for item in iter_json_array(_chunks(source), max_element_chars=max_record_bytes):
                if item.reason is None:
                    target.write(f"{item.line}\t{item.text}\n")
                else:
                    rejected.append((item.line, item.text[:max_record_bytes], item.reason))
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
    return rejected


def _chunks(handle: TextIO) -> Iterator[str]:
    while chunk := handle.read(_READ_CHUNK):
        yield chunk


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
