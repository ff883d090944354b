"""The backfill's TLS settings reach the database drivers: a PostgreSQL and a MariaDB that take TCP logins
over TLS only, with a self-signed certificate for 127.0.0.1."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conf.errors import SourceUnavailable
from conf.settings import load_settings
from pipelines.batch.backfill import run_backfill
from pipelines.bench.databases import LocalDatabase, local_mariadb, local_postgres
from tests.conftest import register_fresh_tables
from tests.pipelines.batch.backfill.conftest import write_version
from tests.pipelines.bi.conftest import _self_signed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls_postgres() -> Iterator[tuple[LocalDatabase, Path, Path]]:
    """PostgreSQL serving a self-signed certificate for 127.0.0.1; yields it, that certificate and another one."""
    root = Path(tempfile.mkdtemp(prefix="lakehouse-backfill-tls-"))
    root.chmod(0o755)
    (root / "ours").mkdir()
    (root / "other").mkdir()
    cert, key = _self_signed(root / "ours")
    other_cert, _ = _self_signed(root / "other")
    try:
        with local_postgres(root / "server", tls=(cert, key)) as database:
            with database.admin_connection() as conn:
                write_version(conn, "postgres", "urn:li:corpuser:tls", "status", '{"removed": false}', None,
                              1700000000000, "urn:li:corpuser:admin")  # fmt: skip
            yield database, cert, other_cert
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_mariadb() -> Iterator[LocalDatabase]:
    """MariaDB serving a self-signed certificate for 127.0.0.1, TCP logins over TLS only."""
    root = Path(tempfile.mkdtemp(prefix="lakehouse-backfill-tls-mariadb-"))
    root.chmod(0o755)
    cert, key = _self_signed(root)
    try:
        with local_mariadb(root / "server", tls=(cert, key)) as database:
            with database.admin_connection() as conn:
                write_version(conn, "mariadb", "urn:li:corpuser:tls", "status", '{"removed": false}', None,
                              1700000000000, "urn:li:corpuser:admin")  # fmt: skip
            yield database
    finally:
        shutil.rmtree(root, ignore_errors=True)


def settings_for(home, database, monkeypatch, tls_mode, ca_file):
    monkeypatch.setenv("LAKEHOUSE_BACKFILL_PASSWORD", database.reader_password)
    overrides = [*database.settings_overrides(), "mlflow.enabled=false", f"ingest.backfill.tls_mode={tls_mode}"]
    if ca_file:
        overrides.append(f"ingest.backfill.tls_ca_file={ca_file}")
    return load_settings("local", home=home, env={}, overrides=overrides)


def test_verify_full_with_the_servers_ca_reads_over_tls(spark, tls_postgres, tmp_path, monkeypatch):
    database, cert, _ = tls_postgres
    settings = settings_for(tmp_path, database, monkeypatch, "verify-full", cert)
    register_fresh_tables(spark, settings)
    assert run_backfill(spark, settings).totals["records_landed"] == 1


@pytest.mark.parametrize("tls_mode, ca", [("disable", None), ("verify-full", "other")])
def test_without_tls_or_with_another_ca_the_database_is_unavailable(spark, tls_postgres, tmp_path, monkeypatch,
                                                                   tls_mode, ca):  # fmt: skip
    database, _, other_cert = tls_postgres
    settings = settings_for(tmp_path, database, monkeypatch, tls_mode, other_cert if ca else None)
    register_fresh_tables(spark, settings)
    with pytest.raises(SourceUnavailable) as raised:
        run_backfill(spark, settings)
    assert f"127.0.0.1:{database.port}" in str(raised.value)
    assert database.reader_password not in str(raised.value)


def test_mariadb_verify_ca_with_the_servers_certificate_reads_over_tls(spark, tls_mariadb, tmp_path, monkeypatch):
    # A refusal is not tested here: connectorx's pool tries a refused login again for 30 s before it reports it.
    settings = settings_for(tmp_path, tls_mariadb, monkeypatch, "verify-ca", tls_mariadb.ca_file)
    register_fresh_tables(spark, settings)
    assert run_backfill(spark, settings).totals["records_landed"] == 1
