"""Throwaway PostgreSQL and MariaDB servers on loopback, each in its own folder, for `bench backfill` and its tests.

Each runs as the system user its Debian package created (`postgres`, `mysql`) when started by root, on a
free port, with a superuser (`admin`) and a read-only user (`reader`, SELECT on the database alone), as
docs/onboarding.md tells an operator to create one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conf.errors import ConfigError
from pipelines.bi.cluster import postgres_bindir
from pipelines.runtime.engine_servers import free_loopback_port, stop_process

# metadata_aspect_v2 as DataHub creates it: the CREATE TABLE statements of github.com/datahub-project/datahub's
# docker/postgres-setup/init.sql (commit fb13cdf513f92354031c53380d406fee0b0c18b0) and
# docker/mysql-setup/init.sql (commit df9e07fda24b87bf1e64e637566af7b7d5d70a0b), as they are there.
DATAHUB_POSTGRES_DDL = """\
CREATE TABLE IF NOT EXISTS metadata_aspect_v2 (
  urn                           varchar(500) not null,
  aspect                        varchar(200) not null,
  version                       bigint not null,
  metadata                      text not null,
  systemmetadata                text,
  createdon                     timestamp not null,
  createdby                     varchar(255) not null,
  createdfor                    varchar(255),
  CONSTRAINT pk_metadata_aspect_v2 PRIMARY KEY (urn, aspect, version)
);
"""
DATAHUB_MYSQL_DDL = """\
create table if not exists metadata_aspect_v2 (
  urn                           varchar(500) not null,
  aspect                        varchar(200) not null,
  version                       bigint(20) not null,
  metadata                      longtext not null,
  systemmetadata                longtext,
  createdon                     datetime(6) not null,
  createdby                     varchar(255) not null,
  createdfor                    varchar(255),
  constraint pk_metadata_aspect_v2 primary key (urn,aspect,version)
);
"""

ADMIN, READER = "admin", "reader"
DATABASE = "datahub"
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class LocalDatabase:
    """A running server: its engine, port and the passwords of its two users."""

    engine: str
    port: int
    admin_password: str
    reader_password: str
    ca_file: Path | None = None  # the certificate the server presents, when it serves TLS

    def settings_overrides(self) -> list[str]:
        """`--set` values that point `ingest.backfill` at this server as the read-only user."""
        return [
            f"ingest.backfill.engine={self.engine}",
            "ingest.backfill.host=127.0.0.1",
            f"ingest.backfill.port={self.port}",
            f"ingest.backfill.database={DATABASE}",
            f"ingest.backfill.user={READER}",
            "ingest.backfill.tls_mode=disable",
        ]

    def admin_connection(self):
        """A DB-API connection as the superuser, autocommit off."""
        if self.engine == "postgres":
            import psycopg

            return psycopg.connect(host="127.0.0.1", port=self.port, dbname=DATABASE, user=ADMIN,
                                   password=self.admin_password)  # fmt: skip
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, database=DATABASE, user=ADMIN,
                               password=self.admin_password, charset="utf8mb4",
                               ssl={"ca": str(self.ca_file)} if self.ca_file else None)  # fmt: skip


def _run_as(name: str) -> dict:
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(name)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _chown(folder: Path, name: str) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(name)
        shutil.chown(folder, entry.pw_uid, entry.pw_gid)


def _server_folders(folder: Path, names: tuple[str, ...], owner: str) -> list[Path]:
    """Create `folder` (readable by the server's user) and the new folders `names` in it, owned by `owner`."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    made = [folder / name for name in names]
    for path in made:
        path.mkdir()
        _chown(path, owner)
    return made


def _server_tls(tls: tuple[Path, Path], folder: Path, owner: str) -> tuple[Path, Path]:
    """Copy a certificate and its key into `folder` for the server (the key readable by `owner` alone)."""
    cert, key = folder / "server.crt", folder / "server.key"
    shutil.copyfile(tls[0], cert)
    shutil.copyfile(tls[1], key)
    key.chmod(0o600)
    for path in (cert, key):
        _chown(path, owner)
    return cert, key


def _wait(connect, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ConfigError(f"database server exited {process.returncode}: {log.read_text(errors='replace')[-800:]}")
        try:
            connect().close()
            return
        except Exception as exc:  # the server's client errors while it starts
            last = exc
            time.sleep(0.2)
    raise ConfigError(f"database server did not answer in {START_TIMEOUT:.0f} s: {last}")


@contextmanager
def local_postgres(
    folder: Path, ddl: str = DATAHUB_POSTGRES_DDL, tls: tuple[Path, Path] | None = None
) -> Iterator[LocalDatabase]:
    """Run Debian's PostgreSQL in `folder` (created) with database `datahub` and `ddl` executed in it.

    Args:
        folder: where its data, socket and log go.
        ddl: statements run in `datahub` before the read-only user is granted SELECT on metadata_aspect_v2.
        tls: a certificate and its key (PEM) to serve TLS with (copied into `folder`), the only way in over
            TCP; None: no TLS.
    """
    import psycopg

    bindir = postgres_bindir()
    data, socket_dir = _server_folders(folder, ("pgdata", "pgsocket"), "postgres")
    user = _run_as("postgres")
    admin_password, reader_password = "admin-secret-1", "reader-secret-1"
    pwfile = folder / "pwfile"
    pwfile.write_text(admin_password + "\n")
    _chown(pwfile, "postgres")
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", ADMIN, "--pwfile", str(pwfile), "-A", "scram-sha-256",
                    "-E", "UTF8", "--no-sync"], check=True, capture_output=True, **user)  # fmt: skip
    tls_options: list[str] = []
    if tls is not None:
        cert, key = _server_tls(tls, folder, "postgres")
        tls_options = ["-c", "ssl=on", "-c", f"ssl_cert_file={cert}", "-c", f"ssl_key_file={key}"]
        # TCP logins over TLS only: a client that does not ask for it is refused.
        (data / "pg_hba.conf").write_text("local all all scram-sha-256\nhostssl all all 127.0.0.1/32 scram-sha-256\n")
    port = free_loopback_port()
    log = folder / "postgres.log"
    with log.open("w") as out:
        _chown(log, "postgres")
        process = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(socket_dir),
             "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off", *tls_options],
            stdout=out, stderr=subprocess.STDOUT, **user,
        )  # fmt: skip
    try:
        connect = lambda db="postgres": psycopg.connect(host="127.0.0.1", port=port, dbname=db, user=ADMIN,  # noqa: E731
                                                        password=admin_password, autocommit=True)  # fmt: skip
        _wait(connect, process, log)
        with connect() as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with connect(DATABASE) as conn:
            conn.execute(ddl)
            conn.execute(f"CREATE ROLE {READER} LOGIN PASSWORD '{reader_password}'")
            conn.execute(f"GRANT CONNECT ON DATABASE {DATABASE} TO {READER}")
            conn.execute(f"GRANT SELECT ON metadata_aspect_v2 TO {READER}")
        yield LocalDatabase("postgres", port, admin_password, reader_password, tls[0] if tls else None)
    finally:
        stop_process(process)


@contextmanager
def local_mariadb(
    folder: Path, ddl: str = DATAHUB_MYSQL_DDL, tls: tuple[Path, Path] | None = None
) -> Iterator[LocalDatabase]:
    """Run Debian's MariaDB in `folder` (created) with database `datahub` and `ddl` executed in it.

    Args:
        folder: where its data, socket and log go.
        ddl: statements run in `datahub` before the read-only user is granted SELECT on metadata_aspect_v2.
        tls: a certificate and its key (PEM) to serve TLS with (copied into `folder`), the only way in over
            TCP; None: no TLS.
    """
    import pymysql

    if not shutil.which("mariadbd") and not Path("/usr/sbin/mariadbd").exists():
        raise ConfigError("mariadb: mariadbd not found (Debian's `mariadb-server` package; `make mariadb` installs it)")
    data, run = _server_folders(folder, ("mariadb", "mariadb-run"), "mysql")
    socket = run / "mariadb.sock"
    run_user = ["--user=mysql"] if os.geteuid() == 0 else []
    subprocess.run(["mariadb-install-db", f"--datadir={data}", "--auth-root-authentication-method=socket",
                    "--skip-test-db", *run_user], check=True, capture_output=True)  # fmt: skip
    tls_options: list[str] = []
    if tls is not None:
        cert, key = _server_tls(tls, run, "mysql")
        tls_options = [f"--ssl-cert={cert}", f"--ssl-key={key}", "--require-secure-transport=ON"]
    port = free_loopback_port()
    log = run / "mariadb.log"
    process = subprocess.Popen(
        ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={data}", f"--port={port}", "--bind-address=127.0.0.1",
         f"--socket={socket}", f"--log-error={log}", f"--pid-file={run / 'mariadb.pid'}",
         "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin", *tls_options, *run_user],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    admin_password, reader_password = "admin-secret-1", "reader-secret-1"
    try:
        root = lambda: pymysql.connect(unix_socket=str(socket), user="root", autocommit=True)  # noqa: E731
        _wait(root, process, log)
        with root() as conn, conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            for name, password in ((ADMIN, admin_password), (READER, reader_password)):
                cursor.execute(f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY '{password}'")
            cursor.execute(f"GRANT ALL ON {DATABASE}.* TO '{ADMIN}'@'127.0.0.1'")
            cursor.execute(f"USE {DATABASE}")
            cursor.execute(ddl)
            cursor.execute(f"GRANT SELECT ON {DATABASE}.metadata_aspect_v2 TO '{READER}'@'127.0.0.1'")
        yield LocalDatabase("mariadb", port, admin_password, reader_password, tls[0] if tls else None)
    finally:
        stop_process(process)
