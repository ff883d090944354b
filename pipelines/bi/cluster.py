"""The PostgreSQL cluster `lakehouse sql-server` runs under the home: initdb, start, stop, how to reach it.

PostgreSQL refuses to run as root. Started by root, the cluster belongs to an unprivileged system user
(`bi.run_as`, created with useradd when missing) and the server runs as that user; started by anyone
else, it runs as the caller.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conf.errors import ConfigError, InputError, SourceUnavailable
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
    # No client's statement nor its error in the log: a failed `ALTER ROLE ... PASSWORD '...'` would
    # otherwise be written there verbatim, and a failed query's error quotes its values. The log keeps the
    # server's own events (start, stop, refused logins). Only superusers may change these.
    "log_statement": "none",
    "log_min_error_statement": "panic",
    "log_min_duration_statement": "-1",
    "log_min_messages": "log",
}
# The only variables PostgreSQL and initdb are started with: never the caller's secrets
# (LAKEHOUSE_BI_PASSWORD, cloud credentials, ...).
SERVER_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "TZ")


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


def reachable_below_home(folder: Path, home: Path) -> None:
    """Make the home and the folders between it and `folder` searchable by others (o+x: entered, never listed).

    The server's user must reach its cluster through them, whatever umask made them (the home's files
    and folders are for their owner by default, so search permission alone opens nothing else). Folders
    above the home are left as they are (check_searchable names the first one that user cannot enter).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    home = home.resolve()
    for ancestor in (folder.parent.resolve(), *folder.parent.resolve().parents):
        if ancestor != home and home not in ancestor.parents:
            break
        ancestor.chmod(ancestor.stat().st_mode | 0o001)


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
    if user:
        reachable_below_home(folder, settings.secret_path("."))
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
            capture_output=True, text=True, env=server_environment(), **_as_user(user),
        )  # fmt: skip
    finally:
        password_file.unlink(missing_ok=True)
    if initdb.returncode != 0:
        raise ConfigError(f"bi.data_dir: initdb {folder} failed: {initdb.stderr.strip() or initdb.stdout.strip()}")
    return folder


def server_environment() -> dict[str, str]:
    """The environment PostgreSQL runs with: SERVER_ENVIRONMENT's variables of this process, nothing else."""
    return {name: os.environ[name] for name in SERVER_ENVIRONMENT if name in os.environ}


def write_access_rules(folder: Path, user: ServiceUser | None, tls: Tls | None, open_to_readers: bool) -> None:
    """Write pg_hba.conf: password (SCRAM) logins from any address, over TLS only when TLS is on.

    Args:
        open_to_readers: every role may log in; else only the sync's superuser (until the first sync
            has put the data in place, BI users cannot log in and see empty tables).
    """
    kind = "hostssl" if tls else "host"
    roles = "all" if open_to_readers else ADMIN_ROLE
    lines = [
        "# Written by `lakehouse sql-server`: SCRAM password logins only" + (", over TLS" if tls else "")
        + ("." if open_to_readers else "; the sync's role alone until the first sync ends."),
        f"{kind} all {roles} 0.0.0.0/0 scram-sha-256",
        f"{kind} all {roles} ::/0 scram-sha-256",
    ]
    _write_owned(folder / "pg_hba.conf", "\n".join(lines) + "\n", user)
    if tls:
        _write_owned(folder / "server.crt", tls.cert.read_text(), user)
        _write_owned(folder / "server.key", tls.key.read_text(), user)


def check_port_free(host: str, port: int) -> None:
    """Check that host:port can be listened on, as PostgreSQL binds it (SO_REUSEADDR).

    Raises:
        InputError: naming the address when another process listens there.
    """
    if "," in host:  # several addresses: PostgreSQL reports which one it cannot bind
        return
    address = connect_host(host) if host in ("", "*") else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise _port_in_use(host, port) from None
            raise InputError(f"--host: cannot listen on {host}:{port}: {exc.strerror}") from None


def _port_in_use(host: str, port: int) -> InputError:
    return InputError(f"--port: {host}:{port} is in use by another process; choose another port (--port or bi.port)")


def start_server(settings: Settings, host: str, port: int, tls: Tls | None) -> subprocess.Popen:
    """Start the cluster's server on host:port (creating the cluster first) and wait until it takes logins.

    Only the sync's superuser may log in until `open_logins` (after the first sync).

    Raises:
        InputError: when host:port is in use.
        ConfigError: when another server runs on the cluster, or it does not come up (with its log's end).
    """
    check_port_free(host, port)
    user = service_user(settings.bi.run_as)
    folder = ensure_cluster(settings, user)
    running = _running_pid(folder)
    if running:
        raise ConfigError(f"bi.data_dir: a PostgreSQL server (pid {running}) already runs on {folder}")
    write_access_rules(folder, user, tls, open_to_readers=False)
    options = {**SERVER_OPTIONS, "listen_addresses": host, "port": str(port)}
    if tls:
        options.update({"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key"})
    command = [str(postgres_bindir() / "postgres"), "-D", str(folder)]
    for name, value in options.items():
        command += ["-c", f"{name}={value}"]
    log_path = settings.secret_path(LOG_FILE)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # The log names roles, databases and failed queries' errors: for the owner alone.
    descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=server_environment(),
                                   **_as_user(user))  # fmt: skip
    _write_private(settings.secret_path(STATE_FILE), json.dumps(
        {"pid": process.pid, "host": host, "port": port, "tls": tls is not None, "started_at": time.time()}
    ))  # fmt: skip
    try:
        _wait_ready(settings, process, log_path, host, port)
    except BaseException:
        stop_server(settings, process)
        raise
    return process


def open_logins(settings: Settings, tls: Tls | None) -> None:
    """Let every role log in (the first sync has put the data in place): pg_hba.conf rewritten and reloaded."""
    import psycopg

    conninfo = writer_conninfo(settings)
    write_access_rules(data_dir(settings), service_user(settings.bi.run_as), tls, open_to_readers=True)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        loaded = conn.execute("SELECT pg_conf_load_time()").fetchone()[0]
        conn.execute("SELECT pg_reload_conf()")
    # The reload is asynchronous: a new session reports a later load time once the server has read the rules.
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if conn.execute("SELECT pg_conf_load_time()").fetchone()[0] > loaded:
                return
        time.sleep(0.05)
    raise ConfigError(f"sql-server: PostgreSQL did not reload its login rules within {READY_TIMEOUT_SECONDS} s")


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


def _wait_ready(settings: Settings, process: subprocess.Popen, log_path: Path, host: str, port: int) -> None:
    import psycopg
    import psycopg.conninfo

    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    # The database BI users connect to is created once the server is up.
    conninfo = psycopg.conninfo.make_conninfo(writer_conninfo(settings), dbname="postgres")
    while True:
        if process.poll() is not None:
            tail = _log_tail(log_path)
            if "Address already in use" in tail:  # taken between the check and PostgreSQL's bind
                raise _port_in_use(host, port)
            raise ConfigError(f"sql-server: PostgreSQL exited with {process.returncode}: {tail}")
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
