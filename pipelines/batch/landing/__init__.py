"""Land input files into bronze: detect each file's kind, validate its records, drop duplicates, commit the batch.

One call of `land_paths` is one batch:
  1. rows of batches that never committed (a landing killed half-way) are deleted from the data tables
     (`writes.discard_uncommitted_batches`). A landing marks its batch (`writes.mark_landing_begun`) before
     it writes anything and unmarks it once committed, so the tables are only looked at when a marker
     was left behind;
  2. every file is planned (`discovery`): its content hash is computed by the engine (`engine_files`), and a
     file landed before with the same path and content hash is skipped;
  3. each file is parsed and validated once and staged as Parquet under `<home>/_scratch/land/<batch>`
     (`staging`). JSON-lines files (gzip too) are read as text by the engine, those of one kind in one
     job; line numbers come from the row id within each read partition, with the partitions put in file
     order from the bytes at their bounds (the embedded engine may number them out of order). A file the
     engine cannot read (not UTF-8, a damaged gzip: the lines before the damage land), whose path it
     would take as a glob pattern, or whose partitions do not cover its bytes exactly, is numbered in
     Python instead (`files`); file-sink arrays (streamed into numbered JSON lines) and MCE lines are
     converted into numbered copies by the engine's workers, a task per file (`conversion`). The lines
     staged from such a copy must be as many as it has, or the landing stops;
  4. the batch's landable rows lose their duplicates (within the batch, then against the table, on the
     record hash) and are appended to bronze.aspect_snapshots / bronze.usage_events, quarantined records
     to bronze.quarantine (`writes`);
  5. bronze.landed_files gets one row per landed file with its counts, LAST: only then is the batch
     committed (pipelines.runtime.progress.committed_batches), so a crash before it leaves rows step 1 removes.

Modules: `batch` (land_paths, batch ids, list_quarantined), `model` (statuses, tables, the per-file plan
and the report), `discovery` (input files, kinds, files landed before), `engine_files` (content hashes by
the engine), `files` (reading input files in Python), `conversion` (file-sink and MCE files converted by
the engine's workers), `staging` (parse, validate, stage as Parquet) and `writes` (the Delta writes).
"""

from pipelines.batch.landing.batch import (
    ProgressCallback,
    check_batch_id,
    land_paths,
    list_quarantined,
    new_batch_id,
    scratch_folder,
)
from pipelines.batch.landing.discovery import list_input_files
from pipelines.batch.landing.files import read_at, sha256_of
from pipelines.batch.landing.model import (
    ALREADY_LANDED,
    DATA_TABLES,
    LANDED,
    LEDGER_TABLE,
    QUARANTINE_TABLE,
    SNAPSHOTS_TABLE,
    STAGE,
    UNDETECTED,
    USAGE_TABLE,
    FileResult,
    LandingReport,
)
from pipelines.batch.landing.writes import discard_uncommitted_batches, mark_landing_begun

__all__ = [
    "ALREADY_LANDED",
    "DATA_TABLES",
    "LANDED",
    "LEDGER_TABLE",
    "QUARANTINE_TABLE",
    "SNAPSHOTS_TABLE",
    "STAGE",
    "UNDETECTED",
    "USAGE_TABLE",
    "FileResult",
    "LandingReport",
    "ProgressCallback",
    "check_batch_id",
    "discard_uncommitted_batches",
    "sha256_of",
    "land_paths",
    "list_input_files",
    "list_quarantined",
    "mark_landing_begun",
    "new_batch_id",
    "read_at",
    "scratch_folder",
]
