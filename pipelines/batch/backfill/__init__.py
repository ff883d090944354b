"""DataHub's database as a source: every version of `metadata_aspect_v2`, landed as MCLs, window by window.

`reader` streams the table as Arrow record batches in DataHub's version order inside one read-only
snapshot (ADBC for PostgreSQL, connectorx for MariaDB / MySQL); `windows` cuts them into `createdon`
windows and names each window's high-water mark; `mcl_lines` writes a window as numbered MCL lines;
`source` lands each window as one landing batch, whose ledger row is the mark a restart resumes after;
`handoff` finds where the Kafka source must start after the mark.
"""

from pipelines.batch.backfill.source import BackfillReport, committed_mark, run_backfill

__all__ = ["BackfillReport", "committed_mark", "run_backfill"]
