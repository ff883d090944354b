"""What a landing batch works with: the statuses, the bronze tables it writes, one plan per input file and
the report it returns."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql.types import StructType

from conf.locations import Location
from pipelines.batch.landing.files import NumberedCopy
from pipelines.runtime.progress import StageResult

STAGE = "land"
LANDED = "landed"
ALREADY_LANDED = "already landed"
UNDETECTED = "undetected"

SNAPSHOTS_TABLE = "bronze.aspect_snapshots"
USAGE_TABLE = "bronze.usage_events"
QUARANTINE_TABLE = "bronze.quarantine"
LEDGER_TABLE = "bronze.landed_files"
KAFKA_OFFSETS_TABLE = "bronze.kafka_offsets"
# The tables a batch writes before its ledger rows; rows of uncommitted batches are removed from these.
DATA_TABLES = (SNAPSHOTS_TABLE, USAGE_TABLE, QUARANTINE_TABLE, KAFKA_OFFSETS_TABLE)
# The tables valid records land in, each with the name of its staging folder.
FAMILIES = ((SNAPSHOTS_TABLE, "snapshots"), (USAGE_TABLE, "usage"))


@dataclass(frozen=True)
class FileResult:
    """What landing did with one input file.

    Attributes:
        path: the absolute path (bronze's `source_file`).
        kind: mcl, mcp, file-sink, usage or empty; None when it could not be detected.
        status: `landed`, `already landed` (same path and content hash in the ledger) or `undetected`.
        content_hash: SHA-256 of the file's bytes (None when not needed).
        records_read: non-blank lines (file-sink: array elements); an MCE counts one record per aspect.
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
        return landing_stage_result([self])


def landing_stage_result(reports: list[LandingReport]) -> StageResult:
    """Several landing batches (files, then Kafka batches) as one pipeline stage result (summed totals)."""
    totals: dict[str, int] = {}
    for report in reports:
        for key, value in report.totals.items():
            totals[key] = totals.get(key, 0) + value
        for landed in (f for f in report.files if f.records_landed):  # per input kind too (watcher metrics)
            key = f"records_landed.{landed.kind}"
            totals[key] = totals.get(key, 0) + landed.records_landed
    return StageResult(
        stage=STAGE,
        batch_ids=tuple(r.batch_id for r in reports if r.committed),
        rows_in=totals.get("records_read", 0),
        rows_out=totals.get("records_landed", 0),
        metrics={k: float(v) for k, v in totals.items()},
    )


@dataclass
class FilePlan:
    """One input file on its way through the batch."""

    index: int
    path: Location
    kind: str | None
    explicit: bool = False  # named on its own, not found in a folder
    status: str = LANDED
    note: str | None = None
    size: int = 0  # bytes stored
    hash_future: Future | None = None  # of the hex SHA-256, when it is computed beside the staging
    content_hash: str | None = None
    family: str | None = None  # the table the file's records land in
    staged: Location | None = None
    schema: StructType | None = None  # of the staged Parquet (an empty part writes no file to read it from)
    records_read: int = 0
    records_quarantined: int = 0
    partitions: list[tuple[int, int]] = field(default_factory=list)  # (read partition, rows) in file order
    rejected: list[tuple[int, str, str]] = field(default_factory=list)  # (line, raw text, reason) found in Python
    # A source that is not a file (a Kafka topic partition): its records written as a numbered copy at
    # `path`, provenance under `source_name` with the line numbers the copy gives (the offsets).
    source_name: str | None = None
    numbered: NumberedCopy | None = None
    # A file-sink or MCE file: where the engine wrote its numbered copy, and how reading the file ended.
    converted: tuple[Location, NumberedCopy] | None = None

    def sha256(self) -> str:
        """The file's content hash (hex SHA-256), waiting for it when it is computed beside the staging."""
        if self.content_hash is None:
            self.content_hash = self.hash_future.result()
        return self.content_hash

    @property
    def source(self) -> str:
        """The name the plan's records carry as `source_file`: the file's path, or the source's name."""
        return self.source_name or str(self.path)
