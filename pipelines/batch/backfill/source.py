"""`lakehouse backfill`: land DataHub's whole history from its database, window by window, resumable."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from conf.settings import Settings
from conf.settings_sections import BackfillSettings
from pipelines.batch.backfill.bronze_rows import STAGED_SCHEMA, StagedWindow, to_staged_rows
from pipelines.batch.backfill.mcl_lines import numbered_copy
from pipelines.batch.backfill.reader import read_password, version_batches
from pipelines.batch.backfill.windows import createdon_windows, high_water_mark, source_prefix, window_source
from pipelines.batch.landing import LEDGER_TABLE, LandingReport
from pipelines.batch.landing.batch import land_plans
from pipelines.batch.landing.files import NumberedCopy
from pipelines.batch.landing.model import SNAPSHOTS_TABLE, FilePlan
from pipelines.batch.landing.staging import stage_file
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import read_table
from pipelines.runtime.progress import committed_batches

log = logging.getLogger("lakehouse.backfill")

WindowCallback = Callable[[LandingReport, int], None]


@dataclass
class BackfillReport:
    """What one `backfill` did: where it resumed, the windows it landed, its totals."""

    source: str
    resumed_after_us: int | None
    windows: list[LandingReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def versions_read(self) -> int:
        """Rows read from the database (landed + quarantined + duplicates skipped)."""
        return sum(w.totals["records_read"] for w in self.windows)

    @property
    def totals(self) -> dict[str, int]:
        """Sums over the windows of the landing totals."""
        keys = ("records_read", "records_landed", "records_quarantined", "duplicates_skipped")
        return {key: sum(w.totals[key] for w in self.windows) for key in keys}

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "source": self.source,
            "resumed_after_us": self.resumed_after_us,
            "windows": [w.batch_id for w in self.windows],
            "seconds": round(self.seconds, 3),
            **self.totals,
        }


# Row groups of a window's staged Parquet: the engine reads them side by side.
STAGED_ROW_GROUP_ROWS = 25_000
# The staged rows' schema as the batch reads them.
STAGED_STRUCT = from_arrow_schema(STAGED_SCHEMA)


@dataclass(frozen=True)
class PreparedWindow:
    """A window made ready to land: its rows staged as bronze rows, the others as numbered MCL lines.

    Attributes:
        source: the window's source name (its high-water mark).
        rows: the window's rows.
        staged_rows: rows staged as bronze rows (`bronze_rows`), written as `staged_parquet`.
        staged_parquet: their Parquet bytes (empty when none).
        mcl_rows: rows left to landing's MCL path, written as `mcl_copy` (numbered by their line in the window).
        mcl_copy: their numbered MCL lines (empty when none).
        content_hash: SHA-256 of the staged Parquet and MCL bytes (the window's ledger `content_hash`).
    """

    source: str
    rows: int
    staged_rows: int
    staged_parquet: bytes
    mcl_rows: int
    mcl_copy: bytes
    content_hash: str


def prepare_window(window: pa.Table, backfill: BackfillSettings, max_record_bytes: int, all_as_mcl: bool) -> PreparedWindow:
    """Stage a window's rows as bronze rows where they certainly land so, the rest as MCL lines.

    Args:
        window: rows with the reader's COLUMNS.
        backfill: the backfill settings (the provenance and table names).
        max_record_bytes: the landing limit.
        all_as_mcl: every row as an MCL line (with pseudonymisation on: landing's staging pseudonymises).
    """
    source = window_source(backfill.provenance, backfill.table, window)
    if all_as_mcl:
        staged = StagedWindow(STAGED_SCHEMA.empty_table(), np.arange(window.num_rows))
    else:
        provenance_bytes = len(backfill.provenance.encode()) + len(backfill.table.encode())
        staged = to_staged_rows(window, source, max_record_bytes, provenance_bytes)
    staged_parquet = b""
    if staged.rows.num_rows:
        sink = pa.BufferOutputStream()
        # Without Arrow's schema: its large strings are then read as the engine's own parts' strings.
        pq.write_table(staged.rows, sink, row_group_size=STAGED_ROW_GROUP_ROWS, store_schema=False)
        staged_parquet = sink.getvalue().to_pybytes()
    mcl_copy = b""
    if len(staged.fallback):
        fallback = window.take(pa.array(staged.fallback, pa.int64()))
        mcl_copy = numbered_copy(fallback, backfill.provenance, backfill.table, staged.fallback + 1)
    content_hash = hashlib.sha256(staged_parquet)
    content_hash.update(mcl_copy)
    return PreparedWindow(
        source, window.num_rows, staged.rows.num_rows, staged_parquet, len(staged.fallback), mcl_copy, content_hash.hexdigest()
    )


def _prepared_windows(windows: Iterator[pa.Table], settings: Settings) -> Iterator[PreparedWindow]:
    for window in windows:
        yield prepare_window(window, settings.ingest.backfill, settings.ingest.max_record_bytes, settings.privacy.pseudonymise)


def window_plans(spark: SparkSession, settings: Settings, prepared: PreparedWindow, scratch) -> list[FilePlan]:
    """The window's one plan, staged in the batch's scratch folder: its MCL lines by landing, then its bronze rows.

    Returns:
        The plan, with the counts of both parts.
    """
    storage = home_of(settings).storage
    plan = FilePlan(index=0, path=scratch / "backfill" / "window.txt", kind="mcl", source_name=prepared.source)
    plan.content_hash = prepared.content_hash
    if prepared.mcl_rows:
        storage.write_bytes(plan.path, prepared.mcl_copy)
        plan.numbered = NumberedCopy(lines=prepared.mcl_rows, lines_read=prepared.mcl_rows)
        stage_file(spark, settings, plan, scratch)
    else:
        plan.family, plan.staged, plan.schema = SNAPSHOTS_TABLE, scratch / "snapshots" / "rows", STAGED_STRUCT
    if prepared.staged_rows:
        # Beside the part landing staged: the batch reads the folder as one.
        storage.write_bytes(plan.staged / "bronze-rows.parquet", prepared.staged_parquet)
        plan.records_read += prepared.staged_rows
    return [plan]


def committed_mark(spark: SparkSession, settings: Settings) -> int | None:
    """The high-water mark of this database's table: the last `createdon` (µs) a committed window holds."""
    backfill = settings.ingest.backfill
    prefix = source_prefix(backfill.provenance, backfill.table)
    rows = (
        read_table(spark, settings, LEDGER_TABLE)
        .filter(F.col("source_file").startswith(prefix))
        .select("batch_id", "source_file")
        .collect()
    )
    if not rows:
        return None
    committed = set(committed_batches(spark, settings))
    return high_water_mark((r.source_file for r in rows if r.batch_id in committed), prefix)


def run_backfill(spark: SparkSession, settings: Settings, on_window: WindowCallback | None = None) -> BackfillReport:
    """Land every version of `metadata_aspect_v2` after the high-water mark, one landing batch per window.

    Args:
        spark: the session (tables registered), under the run lock.
        settings: the lakehouse settings (`ingest.backfill` names the database).
        on_window: called as `on_window(report, rows so far)` after each window commits.

    Returns:
        The report; no windows when the database holds nothing after the mark.

    Raises:
        ConfigError: no password in the file or the variable the settings name.
        SourceUnavailable: the database refuses the connection or the query; the windows committed
            before stay, and a new run resumes after them.
    """
    backfill = settings.ingest.backfill
    started = time.monotonic()
    password = read_password(backfill)
    mark = committed_mark(spark, settings)
    report = BackfillReport(source=f"{backfill.provenance}/{backfill.table}", resumed_after_us=mark)
    log.info("backfill from %s, after createdon %s µs", report.source, mark)
    rows = 0
    with version_batches(backfill, password, mark) as batches, ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="backfill-read"
    ) as reader:
        windows = _prepared_windows(createdon_windows(batches, backfill.window_rows), settings)
        # The next window is read and staged while the engine lands this one.
        upcoming = reader.submit(next, windows, None)
        while (prepared := upcoming.result()) is not None:
            upcoming = reader.submit(next, windows, None)

            def make_plans(scratch, _hasher, prepared=prepared) -> list[FilePlan]:
                return window_plans(spark, settings, prepared, scratch)

            landed = land_plans(spark, settings, make_plans)
            rows += prepared.rows
            report.windows.append(landed)
            crash_point("backfill.window_committed")
            if on_window is not None:
                on_window(landed, rows)
    report.seconds = time.monotonic() - started
    return report
