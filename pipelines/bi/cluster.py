"""The PostgreSQL cluster `lakehouse sql-server` runs under the home: initdb, start, stop, how to reach it.

PostgreSQL refuses to run as root. Started by root, the cluster belongs to an unprivileged system user
(`bi.run_as`, created with useradd when missing) and the server runs as that user; started by anyone
else, it runs as the caller.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conf.errors import ConfigError, SourceUnavailable
from conf.settings import Settings

ADMIN_ROLE = "lakehouse_admin"
DATABASE = "lakehouse"
STATE_FILE = "bi/server.json"
ADMIN_PASSWORD_FILE = "bi/admin.password"
LOG_FILE = "bi/postgres.log"
DEBIAN_PREFIX = Path("/usr/lib/postgresql")
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
# The replica is rebuilt from Delta at will: no WAL beyond what crash safety of the catalog needs, no
# waiting for it at commit, and room for index builds of the initial copy.
SERVER_OPTIONS = {
    "password_encryption": "scram-sha-256",
    "unix_socket_directories": "",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "synchronous_commit": "off",
    "maintenance_work_mem": "256MB",
    "max_parallel_maintenance_workers": "2",
    "timezone": "UTC",
}


@dataclass(frozen=True)
class ServiceUser:
    """The system user the server runs as (root starting it)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Tls:
    """A certificate and its private key (PEM files) for the server."""

    cert: Path
    key: Path


def postgres_bindir() -> Path:
    """Return the folder holding `initdb` and `postgres`: the one on PATH, else Debian's newest.

    Raises:
        ConfigError: when no PostgreSQL server is installed.
    """
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = [p.parent for p in DEBIAN_PREFIX.glob("*/bin/initdb") if p.parent.parent.name.isdigit()]
    if not versions:
        raise ConfigError("postgresql: initdb not found (Debian's `postgresql` package; `make postgres` installs it)")
    return max(versions, key=lambda b: int(b.parent.name))


def service_user(name: str) -> ServiceUser | None:
    """Return the user the server runs as when this process is root (created when missing), else None.

    Raises:
        ConfigError: when the user does not exist and cannot be created.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        created = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
            capture_output=True, text=True,
        )  # fmt: skip
        if created.returncode != 0:
            raise ConfigError(f"bi.run_as: could not create system user {name!r}: {created.stderr.strip()}") from None
        entry = pwd.getpwnam(name)
    return ServiceUser(name, entry.pw_uid, entry.pw_gid)


def check_searchable(folder: Path, user: ServiceUser) -> None:
    """Check that `user` may reach `folder` (search permission on every existing ancestor).

    Raises:
        ConfigError: naming the first folder on the way that the user cannot enter.
    """
    for ancestor in reversed(folder.parents):
        if not ancestor.exists():
            break
        mode = ancestor.stat()
        allowed = (
            (mode.st_uid == user.uid and mode.st_mode & 0o100)
            or (mode.st_gid == user.gid and mode.st_mode & 0o010)
            or mode.st_mode & 0o001
        )
        if not allowed:
            raise ConfigError(
                f"bi.data_dir: {ancestor} is not searchable by {user.name!r}, the user PostgreSQL runs as "
                f"(it refuses root); allow it (chmod o+x {ancestor}) or use a home that user can reach"
            )


def data_dir(settings: Settings) -> Path:
    """The cluster's folder."""
    return settings.secret_path(settings.bi.data_dir)


def ensure_cluster(settings: Settings, user: ServiceUser | None) -> Path:
    """Create the cluster with initdb (SCRAM logins, superuser `lakehouse_admin`) when it does not exist.

    The superuser's password is generated and kept in `<home>/bi/admin.password` (mode 0600).

    Returns:
        The cluster's folder.

    Raises:
        ConfigError: when initdb fails (with its message) or the user cannot reach the folder.
    """
    folder = data_dir(settings)
    if (folder / "PG_VERSION").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    if user:
        check_searchable(folder, user)
        os.chown(folder, user.uid, user.gid)
    password = secrets.token_urlsafe(32)
    _write_private(settings.secret_path(ADMIN_PASSWORD_FILE), password)
    # initdb reads the password from a file its (unprivileged) user can open; removed right after.
    password_file = folder.parent / f".initdb-{secrets.token_hex(8)}"
    _write_owned(password_file, password + "\n", user)
    try:
        initdb = subprocess.run(
            [str(postgres_bindir() / "initdb"), "-D", str(folder), "-U", ADMIN_ROLE, "--auth=scram-sha-256",
             f"--pwfile={password_file}", "--encoding=UTF8", "--no-locale", "--no-instructions"],
            capture_output=True, text=True, **_as_user(user),
        )  # fmt: skip
    finally:
        password_file.unlink(missing_ok=True)
    if initdb.returncode != 0:
        raise ConfigError(f"bi.data_dir: initdb {folder} failed: {initdb.stderr.strip() or initdb.stdout.strip()}")
    return folder


def write_access_rules(folder: Path, user: ServiceUser | None, tls: Tls | None) -> None:
    """Write pg_hba.conf: password (SCRAM) logins from any address, over TLS only when TLS is on."""
    kind = "hostssl" if tls else "host"
    lines = [
        "# Written by `lakehouse sql-server` at each start: SCRAM password logins only" + (", over TLS." if tls else "."),
        f"{kind} all all 0.0.0.0/0 scram-sha-256",
        f"{kind} all all ::/0 scram-sha-256",
    ]
    _write_owned(folder / "pg_hba.conf", "\n".join(lines) + "\n", user)
    if tls:
        _write_owned(folder / "server.crt", tls.cert.read_text(), user)
        _write_owned(folder / "server.key", tls.key.read_text(), user)


def start_server(settings: Settings, host: str, port: int, tls: Tls | None) -> subprocess.Popen:
    """Start the cluster's server on host:port (creating the cluster first) and wait until it takes logins.

    Raises:
        ConfigError: when another server runs on the cluster, or it does not come up (with its log's end).
    """
    user = service_user(settings.bi.run_as)
    folder = ensure_cluster(settings, user)
    running = _running_pid(folder)
    if running:
        raise ConfigError(f"bi.data_dir: a PostgreSQL server (pid {running}) already runs on {folder}")
    write_access_rules(folder, user, tls)
    options = {**SERVER_OPTIONS, "listen_addresses": host, "port": str(port)}
    if tls:
        options.update({"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key"})
    command = [str(postgres_bindir() / "postgres"), "-D", str(folder)]
    for name, value in options.items():
        command += ["-c", f"{name}={value}"]
    log_path = settings.secret_path(LOG_FILE)
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, **_as_user(user))
    _write_private(settings.secret_path(STATE_FILE), json.dumps(
        {"pid": process.pid, "host": host, "port": port, "tls": tls is not None, "started_at": time.time()}
    ))  # fmt: skip
    try:
        _wait_ready(settings, process, log_path)
    except BaseException:
        stop_server(settings, process)
        raise
    return process


def stop_server(settings: Settings, process: subprocess.Popen) -> None:
    """Stop the server (fast shutdown: open sessions are ended) and forget its address."""
    settings.secret_path(STATE_FILE).unlink(missing_ok=True)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def writer_conninfo(settings: Settings) -> str:
    """Return the connection string of the role that writes the replica.

    `bi.dsn` when set; else the running `lakehouse sql-server` of this home, as its superuser.

    Raises:
        SourceUnavailable: when no `bi.dsn` is set and no sql-server runs on this home.
    """
    import psycopg.conninfo

    if settings.bi.dsn:
        return settings.bi.dsn
    state_path = settings.secret_path(STATE_FILE)
    if not state_path.exists():
        raise SourceUnavailable(f"sql-server: not running on {settings.home} (no {state_path}); start `lakehouse sql-server`")
    state = json.loads(state_path.read_text())
    return psycopg.conninfo.make_conninfo(
        host=connect_host(state["host"]), port=state["port"], dbname=DATABASE, user=ADMIN_ROLE,
        password=settings.secret_path(ADMIN_PASSWORD_FILE).read_text().strip(), connect_timeout=5,
    )  # fmt: skip


def connect_host(listen_host: str) -> str:
    """The address to connect to a server listening on `listen_host` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "*": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(listen_host, listen_host)


def _wait_ready(settings: Settings, process: subprocess.Popen, log_path: Path) -> None:
    import psycopg
    import psycopg.conninfo

    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    # The database BI users connect to is created once the server is up.
    conninfo = psycopg.conninfo.make_conninfo(writer_conninfo(settings), dbname="postgres")
    while True:
        if process.poll() is not None:
            raise ConfigError(f"sql-server: PostgreSQL exited with {process.returncode}: {_log_tail(log_path)}")
        try:
            psycopg.connect(conninfo, connect_timeout=1).close()
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise ConfigError(f"sql-server: PostgreSQL did not accept logins within {READY_TIMEOUT_SECONDS} s: {exc}") from exc
            time.sleep(0.1)


def _running_pid(folder: Path) -> int | None:
    pid_file = folder / "postmaster.pid"
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return pid


def _as_user(user: ServiceUser | None) -> dict:
    return {"user": user.uid, "group": user.gid, "extra_groups": []} if user else {}


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def _write_owned(path: Path, text: str, user: ServiceUser | None) -> None:
    _write_private(path, text)
    if user:
        os.chown(path, user.uid, user.gid)


def _log_tail(log_path: Path, lines: int = 5) -> str:
    return " | ".join(log_path.read_text(errors="replace").splitlines()[-lines:]) if log_path.exists() else "(no log)"
