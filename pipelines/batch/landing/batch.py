"""One landing batch from start to commit (`land_paths`), its ids and scratch folder, and reading back the
records it quarantined."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.formats import check_kind
from conf.errors import InputError
from conf.locations import Location
from conf.settings import Settings
from pipelines.batch.landing.conversion import convert_in_engine
from pipelines.batch.landing.discovery import list_input_files, plan_files
from pipelines.batch.landing.model import LANDED, QUARANTINE_TABLE, STAGE, FilePlan, LandingReport
from pipelines.batch.landing.staging import stage_file, stage_text_reads
from pipelines.batch.landing.writes import discard_uncommitted_batches, mark_landing_begun, write_batch
from pipelines.runtime.home import home_of
from pipelines.runtime.io import read_table
from pipelines.runtime.progress import committed_batches

_BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

# progress(path, files_done, files_total): called before and after each file, and for the commit step.
ProgressCallback = Callable[[str, int, int], None]


def land_paths(
    spark: SparkSession,
    settings: Settings,
    paths: Sequence[Location | str],
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
    check_kind(kind, "kind")
    files = list_input_files(paths)

    def make_plans(_scratch: Location, hasher: ThreadPoolExecutor) -> list[FilePlan]:
        return plan_files(spark, settings, files, kind, hasher)

    return land_plans(spark, settings, make_plans, batch_id=batch_id, progress=progress)


# make_plans(scratch, hasher): the batch's plans, given its (empty) scratch folder and the hashing thread.
PlanMaker = Callable[[Location, ThreadPoolExecutor], list[FilePlan]]


def land_plans(
    spark: SparkSession,
    settings: Settings,
    make_plans: PlanMaker,
    *,
    batch_id: str | None = None,
    progress: ProgressCallback | None = None,
    before_commit: Callable[[str, datetime], None] | None = None,
) -> LandingReport:
    """Land the plans `make_plans` gives as one batch: discard uncommitted batches, stage, write, commit.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        make_plans: builds the plans once the batch's scratch folder is empty (see `PlanMaker`).
        batch_id: the batch id; a new time-ordered one when None.
        progress: called as `progress(source, done, total)`.
        before_commit: `before_commit(batch_id, landed_at)` writes the batch's own bookkeeping rows after its
            data and before its ledger rows.

    Raises:
        InputError: a bad batch id, or one that is already committed (and as `make_plans` raises).
        LakehouseError: a plan whose staged lines are not as many as it has (nothing is committed).
    """
    started = time.monotonic()
    if batch_id is not None:
        check_batch_id(batch_id)
    landed_at = datetime.now(timezone.utc)
    discarded = discard_uncommitted_batches(spark, settings)
    if batch_id is None:
        batch_id = new_batch_id()  # time-ordered with a random suffix: no committed batch has it
    elif batch_id in set(committed_batches(spark, settings)):
        raise InputError(f"batch_id: {batch_id!r} is already committed; choose another or leave it out")
    storage = home_of(settings).storage
    marker = mark_landing_begun(settings, batch_id)
    scratch = scratch_folder(settings, batch_id)
    storage.remove_tree(scratch)
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="land-hash")
    try:
        plans = make_plans(scratch, hasher)
        total = len(plans) + 1
        stage_text_reads(spark, settings, plans, scratch)
        convert_in_engine(spark, plans, scratch, settings.ingest.max_record_bytes, home_of(settings).storage_options)
        for plan in plans:
            _report(progress, plan.source, plan.index, total)
            if plan.status == LANDED and plan.staged is None:
                stage_file(spark, settings, plan, scratch)
            _report(progress, plan.source, plan.index + 1, total)
        _report(progress, f"commit batch {batch_id}", len(plans), total)
        commit_hook = (lambda: before_commit(batch_id, landed_at)) if before_commit is not None else None
        results = write_batch(spark, settings, plans, batch_id, landed_at, scratch, commit_hook)
        # Committed: the next landing has nothing of this one to discard. On any failure the marker stays.
        storage.delete(marker)
        _report(progress, f"commit batch {batch_id}", total, total)
    finally:
        hasher.shutdown(wait=False, cancel_futures=True)
        storage.remove_tree(scratch)
    return LandingReport(
        batch_id=batch_id,
        files=tuple(results),
        seconds=round(time.monotonic() - started, 3),
        discarded_batches=tuple(discarded),
    )


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


def scratch_folder(settings: Settings, batch_id: str) -> Location:
    """The folder holding one landing batch's staged files (removed when the landing ends)."""
    return settings.home / "_scratch" / STAGE / batch_id


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


def _report(progress: ProgressCallback | None, path: str, done: int, total: int) -> None:
    if progress is not None:
        progress(path, done, total)
