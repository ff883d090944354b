"""`lakehouse backfill`: land DataHub's whole history from its database, window by window, resumable."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from pipelines.batch.backfill.mcl_lines import write_numbered_copy
from pipelines.batch.backfill.reader import read_password, version_batches
from pipelines.batch.backfill.windows import createdon_windows, high_water_mark, source_prefix, window_source
from pipelines.batch.landing import LEDGER_TABLE, LandingReport, sha256_of
from pipelines.batch.landing.batch import land_plans
from pipelines.batch.landing.files import NumberedCopy
from pipelines.batch.landing.model import FilePlan
from pipelines.runtime.faults import crash_point
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


@dataclass(frozen=True)
class PreparedWindow:
    """A window written out as numbered MCL lines, ready to land."""

    source: str
    path: Path
    rows: int
    content_hash: str


def _prepared_windows(windows: Iterator[pa.Table], backfill, folder: Path) -> Iterator[PreparedWindow]:
    for index, window in enumerate(windows):
        path = folder / f"{index:06d}.txt"
        rows = write_numbered_copy(window, backfill.provenance, backfill.table, path)
        yield PreparedWindow(window_source(backfill.provenance, backfill.table, window), path, rows, sha256_of(path))


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
    with version_batches(backfill, password, mark) as batches, tempfile.TemporaryDirectory(
        prefix="lakehouse-backfill-"
    ) as staging, ThreadPoolExecutor(max_workers=1, thread_name_prefix="backfill-read") as reader:
        windows = _prepared_windows(createdon_windows(batches, backfill.window_rows), backfill, Path(staging))
        # The next window is read and written out while the engine lands this one.
        upcoming = reader.submit(next, windows, None)
        while (prepared := upcoming.result()) is not None:
            upcoming = reader.submit(next, windows, None)

            def make_plans(scratch, _hasher, prepared=prepared) -> list[FilePlan]:
                path = scratch / "backfill" / "window.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(prepared.path, path)
                plan = FilePlan(index=0, path=path, kind="mcl", source_name=prepared.source)
                plan.numbered = NumberedCopy(lines=prepared.rows, lines_read=prepared.rows)
                plan.content_hash = prepared.content_hash
                return [plan]

            landed = land_plans(spark, settings, make_plans)
            rows += prepared.rows
            report.windows.append(landed)
            crash_point("backfill.window_committed")
            if on_window is not None:
                on_window(landed, rows)
    report.seconds = time.monotonic() - started
    return report
