"""The replica survives its readers: a BI session's open transaction never stops a sync, nor the sync the session.

psycopg's default is what many BI tools do: a transaction begins with the first statement and stays
open (holding its table locks) until the client commits, which an idle dashboard never does.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from deltalake import DeltaTable

from conf.tables import table_location
from pipelines.bi.cluster import writer_conninfo
from pipelines.bi.sync import sync_replica
from tests.pipelines.bi.conftest import reader_conninfo

pytestmark = pytest.mark.slow


def _forget_version(settings, table_key: str) -> None:
    """Make the next sync copy the table whole (as a first copy or a schema change would)."""
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        conn.execute("DELETE FROM lakehouse_sync.table_versions WHERE table_key = %s", (table_key,))


def test_a_reader_holding_a_transaction_open_across_a_swap_keeps_its_session_and_the_sync_succeeds(replica):
    settings, port, _ = replica
    delta_rows = DeltaTable(str(table_location(settings, "gold.audit_events"))).count()
    reader = psycopg.connect(reader_conninfo(port))  # not autocommit: the transaction stays open
    try:
        assert reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0] == delta_rows
        assert reader.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        _forget_version(settings, "gold.audit_events")
        started = time.monotonic()
        synced = {r.table_key: r for r in sync_replica(settings)}
        assert synced["gold.audit_events"].mode in ("swap", "rewrite")
        assert time.monotonic() - started < 60
        # The reader's session and transaction are still there, and it goes on reading.
        assert reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0] == delta_rows
        reader.commit()
        assert reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0] == delta_rows
    finally:
        reader.close()
    with psycopg.connect(reader_conninfo(port)) as conn:
        version = conn.execute(
            "SELECT delta_version FROM lakehouse_sync.table_versions WHERE table_key = 'gold.audit_events'"
        ).fetchone()  # fmt: skip
    assert version == (DeltaTable(str(table_location(settings, "gold.audit_events"))).version(),)


def test_a_swap_does_not_hold_new_readers_out_while_an_old_transaction_stays_open(replica):
    settings, port, _ = replica
    idle = psycopg.connect(reader_conninfo(port))
    try:
        idle.execute("SELECT count(*) FROM silver.aspect_state").fetchone()
        _forget_version(settings, "silver.aspect_state")
        sync_replica(settings)
        # A new BI session reads at once: no swap is left waiting for the idle one's lock in front of it.
        with psycopg.connect(reader_conninfo(port), options="-c statement_timeout=2000") as conn:
            assert conn.execute("SELECT count(*) FROM silver.aspect_state").fetchone()[0] > 0
    finally:
        idle.close()
