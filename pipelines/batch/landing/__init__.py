"""Land input files into bronze: detect each file's kind, validate its records, drop duplicates, commit the batch.

One call of `land_paths` is one batch:
  1. rows of batches that never committed (a landing killed half-way) are deleted from the data tables
     (`writes.discard_uncommitted_batches`). A landing marks its batch (`writes.mark_landing_begun`) before
     it writes anything and unmarks it once committed, so the tables are only looked at when a marker
     was left behind;
  2. every file is planned (`discovery`): a file landed before with the same path and content hash is
     skipped;
  3. each file is parsed and validated once and staged as Parquet under `<home>/_scratch/land/<batch>`
     (`staging`; gzip is read directly; file-sink arrays are first streamed into numbered JSON lines by
     `files`). Line numbers of a text read come from the row id within each read partition, with the
     partitions put in file order by checking their first and last lines against the file (the embedded
     engine may number them out of order); a file that does not check out, that the engine cannot read
     (not UTF-8, a damaged gzip: the lines before the damage land), or whose path the engine would take as
     a glob pattern, is numbered in Python instead, and so are small JSON-lines files of one kind, into one
     shared copy staged by one engine job (`staging.stage_small_files`). The lines staged must be as many
     as the file has, or the landing stops;
  4. the batch's landable rows lose their duplicates (within the batch, then against the table, on the
     record hash) and are appended to bronze.aspect_snapshots / bronze.usage_events, quarantined records
     to bronze.quarantine (`writes`);
  5. bronze.landed_files gets one row per landed file with its counts, LAST: only then is the batch
     committed (pipelines.runtime.progress.committed_batches), so a crash before it leaves rows step 1 removes.

Modules: `batch` (land_paths, batch ids, list_quarantined), `model` (statuses, tables, the per-file plan
and the report), `discovery` (input files, kinds, files landed before), `files` (reading input files in
Python), `staging` (parse, validate, stage as Parquet) and `writes` (the Delta writes).
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
from pipelines.batch.landing.files import FileDigest, RangeReader, count_lines, file_digest
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
    "FileDigest",
    "FileResult",
    "LandingReport",
    "RangeReader",
    "ProgressCallback",
    "check_batch_id",
    "count_lines",
    "discard_uncommitted_batches",
    "file_digest",
    "land_paths",
    "list_input_files",
    "list_quarantined",
    "mark_landing_begun",
    "new_batch_id",
    "scratch_folder",
]
