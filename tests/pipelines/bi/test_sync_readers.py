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
        # The reader holds the table through every attempt to switch a new copy in: its rows are rewritten in place.
        assert synced["gold.audit_events"].mode == "rewrite"
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
    import threading

    settings, port, _ = replica
    idle = psycopg.connect(reader_conninfo(port))
    waits: list[float] = []
    try:
        idle.execute("SELECT count(*) FROM silver.aspect_state").fetchone()
        _forget_version(settings, "silver.aspect_state")
        synced: list = []
        syncing = threading.Thread(target=lambda: synced.extend(sync_replica(settings)))
        syncing.start()
        # New BI sessions keep reading while the sync tries to switch the table in: a waiting switch holds
        # them at most bi.lock_timeout_ms (1 s), and gives up its place in the lock queue after it.
        while syncing.is_alive():
            with psycopg.connect(reader_conninfo(port), options="-c statement_timeout=3000") as conn:
                started = time.monotonic()
                assert conn.execute("SELECT count(*) FROM silver.aspect_state").fetchone()[0] > 0
                waits.append(time.monotonic() - started)
        syncing.join()
    finally:
        idle.close()
    assert waits and max(waits) < 3
    assert {r.table_key: r.mode for r in synced}["silver.aspect_state"] == "rewrite"


def test_a_table_whose_columns_changed_waits_for_its_readers_and_is_switched_in_once_they_end(replica):
    from pipelines.bi.server import replica_status, sync_line

    settings, port, _ = replica
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        # As a replica made by an earlier release would be: only a new table switched in can apply it.
        conn.execute("ALTER TABLE gold.openmetadata_change_events DROP COLUMN entity")
    reader = psycopg.connect(reader_conninfo(port))
    try:
        reader.execute("SELECT count(*) FROM gold.openmetadata_change_events").fetchone()
        results = sync_replica(settings)
        synced = {r.table_key: r for r in results}
        assert synced["gold.openmetadata_change_events"].mode == "deferred"
        assert {r.mode for k, r in synced.items() if k != "gold.openmetadata_change_events"} <= {"none"}
        assert "deferred" in sync_line(results, 1.0) and "gold.openmetadata_change_events" in sync_line(results, 1.0)
        behind = {t["table"]: t for t in replica_status(settings)["tables"]}["gold.openmetadata_change_events"]
        assert behind["versions_behind"] > 0
        assert reader.execute("SELECT count(*) FROM gold.openmetadata_change_events").fetchone()[0] > 0
    finally:
        reader.close()
    assert {r.table_key: r.mode for r in sync_replica(settings)}["gold.openmetadata_change_events"] == "swap"
    delta_rows = DeltaTable(str(table_location(settings, "gold.openmetadata_change_events"))).count()
    with psycopg.connect(reader_conninfo(port)) as conn:
        assert conn.execute("SELECT count(*) FROM gold.openmetadata_change_events").fetchone()[0] == delta_rows
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'gold' "
            "AND table_name = 'openmetadata_change_events' AND column_name = 'entity'"
        ).fetchone()[0] == 1  # fmt: skip
