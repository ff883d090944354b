"""DataHub's database as a source: every version of `metadata_aspect_v2`, landed into bronze, window by window.

`reader` streams the table as Arrow record batches in DataHub's version order inside one read-only
snapshot (ADBC for PostgreSQL, connectorx for MariaDB / MySQL); `windows` cuts them into `createdon`
windows and names each window's high-water mark; `bronze_rows` stages a window's rows as bronze rows
straight from their columns, and `mcl_lines` writes the few it cannot vouch for as numbered MCL lines,
which landing parses and checks itself; `source` lands each window as one landing batch, whose ledger
row is the mark a restart resumes after; `handoff` finds where the Kafka source must start after the mark.
"""

from pipelines.batch.backfill.source import BackfillReport, committed_mark, run_backfill

__all__ = ["BackfillReport", "committed_mark", "run_backfill"]
