"""DataHub's database for the backfill tests: a real PostgreSQL and a real MariaDB, started by the tests as
their Debian packages' unprivileged users, `metadata_aspect_v2` created with DataHub's own DDL (the CREATE
TABLE statements of its docker/postgres-setup/init.sql and docker/mysql-setup/init.sql:
pipelines.bench.databases.DATAHUB_POSTGRES_DDL and DATAHUB_MYSQL_DDL name the commits)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipelines.bench.databases import DATAHUB_MYSQL_DDL, DATAHUB_POSTGRES_DDL, LocalDatabase, local_mariadb, local_postgres

ENGINES = ("postgres", "mariadb")


@pytest.fixture(scope="package")
def databases() -> Iterator[dict[str, LocalDatabase]]:
    """Both servers, running for the package's tests."""
    root = Path(tempfile.mkdtemp(prefix="lakehouse-backfill-"))
    root.chmod(0o755)
    try:
        with local_postgres(root / "postgres", DATAHUB_POSTGRES_DDL) as postgres:
            with local_mariadb(root / "mariadb", DATAHUB_MYSQL_DDL) as mariadb:
                yield {"postgres": postgres, "mariadb": mariadb}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def createdon(millis: int) -> datetime:
    """DataHub's `createdon` for an audit stamp's time: a timestamp without time zone, in UTC."""
    return datetime(1970, 1, 1) + timedelta(milliseconds=millis)


def write_version(conn, engine: str, urn: str, aspect: str, metadata: str, system_metadata: str | None,
                  time_ms: int, actor: str) -> None:  # fmt: skip
    """Write one new version of (urn, aspect) as DataHub's metadata service does (EbeanAspectDao's `saveAspect`):
    the current row (version 0), when there is one, is copied to the next version number, then version 0
    takes the new value, its time and actor."""
    marker = "%s"
    cursor = conn.cursor()
    cursor.execute(
        f"SELECT COALESCE(MAX(version), 0) FROM metadata_aspect_v2 WHERE urn = {marker} AND aspect = {marker}",
        (urn, aspect),
    )
    next_version = cursor.fetchone()[0] + 1
    cursor.execute(
        f"SELECT count(*) FROM metadata_aspect_v2 WHERE urn = {marker} AND aspect = {marker} AND version = 0",
        (urn, aspect),
    )
    if cursor.fetchone()[0]:
        cursor.execute(
            "INSERT INTO metadata_aspect_v2 (urn, aspect, version, metadata, systemmetadata, createdon, createdby, "
            f"createdfor) SELECT urn, aspect, {marker}, metadata, systemmetadata, createdon, createdby, createdfor "
            f"FROM metadata_aspect_v2 WHERE urn = {marker} AND aspect = {marker} AND version = 0",
            (next_version, urn, aspect),
        )
        cursor.execute(
            f"UPDATE metadata_aspect_v2 SET metadata = {marker}, systemmetadata = {marker}, createdon = {marker}, "
            f"createdby = {marker} WHERE urn = {marker} AND aspect = {marker} AND version = 0",
            (metadata, system_metadata, createdon(time_ms), actor, urn, aspect),
        )
    else:
        cursor.execute(
            "INSERT INTO metadata_aspect_v2 (urn, aspect, version, metadata, systemmetadata, createdon, createdby) "
            f"VALUES ({marker}, {marker}, 0, {marker}, {marker}, {marker}, {marker})",
            (urn, aspect, metadata, system_metadata, createdon(time_ms), actor),
        )
    conn.commit()


def write_history(database: LocalDatabase, mcl_lines: list[str]) -> None:
    """Write MCL lines' versions (UPSERTs, in time order) into the database's metadata_aspect_v2, one by one."""
    records = [json.loads(line) for line in mcl_lines]
    records.sort(key=lambda r: r["created"]["time"])
    with database.admin_connection() as conn:
        for record in records:
            write_version(
                conn, database.engine, record["entityUrn"], record["aspectName"], record["aspect"]["value"],
                json.dumps(record.get("systemMetadata")) if record.get("systemMetadata") else None,
                record["created"]["time"], record["created"]["actor"],
            )  # fmt: skip


def clear(database: LocalDatabase) -> None:
    """Remove every row of metadata_aspect_v2."""
    with database.admin_connection() as conn:
        conn.cursor().execute("DELETE FROM metadata_aspect_v2")
        conn.commit()


def upsert_history(source: Path) -> list[str]:
    """The MCL lines of the entities whose history holds no DELETE: what a database's rows still show."""
    lines = source.read_text().splitlines()
    deleted = {json.loads(line)["entityUrn"] for line in lines if json.loads(line)["changeType"] == "DELETE"}
    return [line for line in lines if json.loads(line)["entityUrn"] not in deleted]
