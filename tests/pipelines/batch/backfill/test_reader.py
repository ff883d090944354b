"""Reading metadata_aspect_v2 in DataHub's version order, as Arrow, from a real PostgreSQL and MariaDB."""

from __future__ import annotations

import pyarrow as pa
import pytest

from conf.settings import load_settings
from pipelines.batch.backfill.reader import COLUMNS, version_batches
from tests.pipelines.batch.backfill.conftest import ENGINES, clear, createdon

pytestmark = pytest.mark.slow

# (urn, version, createdon ms): inserted in this order, which is not DataHub's.
ROWS = [
    ("urn:li:corpuser:b", 0, 2000),
    ("urn:li:corpuser:a", 0, 2000),
    ("urn:li:corpuser:c", 2, 2000),
    ("urn:li:corpuser:a", 1, 1000),
    ("urn:li:corpuser:c", 1, 1000),
    ("urn:li:corpuser:c", 0, 3000),
]
# DataHub's `datahub` source (VersionOrderer): by createdon; for one createdon the archived versions
# first, the version 0 rows last.
DATAHUB_ORDER = [
    ("urn:li:corpuser:a", 1, 1000),
    ("urn:li:corpuser:c", 1, 1000),
    ("urn:li:corpuser:c", 2, 2000),
    ("urn:li:corpuser:a", 0, 2000),
    ("urn:li:corpuser:b", 0, 2000),
    ("urn:li:corpuser:c", 0, 3000),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_rows_come_in_datahubs_version_order_with_createdon_in_microseconds(databases, engine):
    database = databases[engine]
    clear(database)
    with database.admin_connection() as conn:
        cursor = conn.cursor()
        for urn, version, millis in ROWS:
            cursor.execute(
                "INSERT INTO metadata_aspect_v2 (urn, aspect, version, metadata, systemmetadata, createdon, createdby) "
                "VALUES (%s, 'status', %s, '{\"removed\": false}', NULL, %s, 'urn:li:corpuser:x')",
                (urn, version, createdon(millis)),
            )
        conn.commit()
    backfill = load_settings("local", env={}, overrides=database.settings_overrides()).ingest.backfill
    with version_batches(backfill, database.reader_password, None) as batches:
        table = pa.Table.from_batches(list(batches))
    assert table.column_names == list(COLUMNS)
    got = list(zip(table.column("urn").to_pylist(), table.column("version").to_pylist(),
                   table.column("createdon_us").to_pylist()))  # fmt: skip
    assert got == [(urn, version, millis * 1000) for urn, version, millis in DATAHUB_ORDER]
    with version_batches(backfill, database.reader_password, 2000 * 1000) as batches:
        after = pa.Table.from_batches(list(batches))
    assert after.column("urn").to_pylist() == ["urn:li:corpuser:c"]
