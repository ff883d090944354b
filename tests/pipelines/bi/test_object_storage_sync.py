"""A home on object storage (moto's S3 server) replicated incrementally: its commits read through the storage layer."""

from __future__ import annotations

import dataclasses
from datetime import date

import psycopg
import psycopg.conninfo
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from conf.tables import table_location, table_spec
from pipelines.bi.cluster import writer_conninfo
from pipelines.bi.sync import sync_replica
from pipelines.runtime.home import home_of
from tests.pipelines.runtime.test_object_storage import BUCKET, s3  # noqa: F401 - the module's S3 server fixture

pytestmark = pytest.mark.slow

ARROW_TYPES = {"STRING": pa.string(), "BIGINT": pa.int64(), "DATE": pa.date32()}


def _audit_rows(first: int, count: int) -> pa.Table:
    """`count` audit events numbered from `first`, with the registry's columns."""
    spec = table_spec("gold.audit_events")
    schema = pa.schema([(name, ARROW_TYPES[kind.upper()]) for name, kind in spec.column_types])
    values = {"event_id": [f"e{i}" for i in range(first, first + count)], "timestamp": list(range(first, first + count)),
              "event_type": ["UpdateAspectEvent"] * count, "actor_urn": ["urn:li:corpuser:s3"] * count,
              "event_date": [date(2026, 11, 1 + i % 3) for i in range(first, first + count)]}  # fmt: skip
    return pa.table({f.name: pa.array(values.get(f.name, [None] * count), f.type) for f in schema}, schema=schema)


def test_an_s3_home_is_synced_by_its_new_commits_not_copied_again(replica, s3, tmp_path):  # noqa: F811
    settings, _, _ = replica
    admin = writer_conninfo(settings)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS s3_home")
        conn.execute("CREATE DATABASE s3_home")
    on_s3 = s3.settings(f"s3://{BUCKET}/bi-home", tmp_path)
    on_s3 = dataclasses.replace(on_s3, bi=dataclasses.replace(on_s3.bi, dsn=psycopg.conninfo.make_conninfo(admin, dbname="s3_home")))
    home_of(on_s3)  # resolving the home registers its storage options for its bucket
    location = str(table_location(on_s3, "gold.audit_events"))
    write_deltalake(location, _audit_rows(0, 50), partition_by=["event_date"], storage_options=s3.options)
    first = {r.table_key: r for r in sync_replica(on_s3)}
    assert first["gold.audit_events"].mode == "swap" and first["gold.audit_events"].rows == 50
    write_deltalake(location, _audit_rows(50, 7), mode="append", storage_options=s3.options)
    second = {r.table_key: r for r in sync_replica(on_s3)}
    assert second["gold.audit_events"].mode == "append" and second["gold.audit_events"].rows == 7
    assert set(second["gold.audit_events"].phases) >= {"open", "plan", "read", "copy", "commit"}
    expected = sorted(DeltaTable(location, storage_options=s3.options).to_pyarrow_table(columns=["event_id"])["event_id"].to_pylist())
    with psycopg.connect(on_s3.bi.dsn) as conn:
        replica_ids = sorted(r[0] for r in conn.execute("SELECT event_id FROM gold.audit_events"))
        version = conn.execute("SELECT delta_version FROM lakehouse_sync.table_versions WHERE table_key = 'gold.audit_events'").fetchone()[0]
    assert replica_ids == expected and len(expected) == 57
    assert version == DeltaTable(location, storage_options=s3.options).version() == 1
