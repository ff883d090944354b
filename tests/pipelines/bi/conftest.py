"""The package's one `lakehouse sql-server`: a published home served over TLS on a free loopback port.

Package-scoped so every module of the BI tests reads the same server: the pipeline publishes half of the
shared DataHub fixture's entities into a home, `lakehouse sql-server` (Debian's PostgreSQL, initdb'd under
the home) copies it; the other half is left for a test to publish.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg.conninfo
import pytest

from conf.settings import Settings, load_settings
from pipelines.orchestration.jobs import run_job
from pipelines.bi.cluster import postgres_bindir
from pipelines.bi.replica import replicated_tables
from pipelines.runtime.engine_servers import free_loopback_port
from tests.conftest import FIXTURES, register_fresh_tables
from tests.pipelines.cli.test_cli import LAKEHOUSE

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
PASSWORD = "reader-secret-1"
START_TIMEOUT = 90.0


def _split_by_entity(source: Path, first: Path, second: Path) -> None:
    """Write the source's lines of half of its entities to `first`, the rest to `second` (same days in both)."""
    with first.open("w") as one, second.open("w") as two:
        for line in source.read_text().splitlines():
            urn = json.loads(line)["entityUrn"]
            (one if hashlib.sha256(urn.encode()).digest()[0] % 2 == 0 else two).write(line + "\n")


def half_published_home(spark, tmp_path_factory, prefix: str, settings_overrides: list[str]) -> tuple[Path, Settings, Path]:
    """Publish half of the shared fixture's entities into a new home a server's unprivileged user can reach.

    Returns:
        (the root to remove afterwards, the home's settings, the folder holding `second.jsonl`: the other half).
    """
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    settings = load_settings("local", home=root / "home", env={}, overrides=settings_overrides)
    inputs = tmp_path_factory.mktemp(f"{prefix}inputs")
    _split_by_entity(FIXTURES / "history-small.mcl.jsonl", inputs / "first.jsonl", inputs / "second.jsonl")
    register_fresh_tables(spark, settings)
    run_job(settings, paths=[inputs / "first.jsonl"], spark=spark)
    return root, settings, inputs


def sql_server_process(settings: Settings, settings_overrides: list[str], *options: str) -> subprocess.Popen:
    """Start `lakehouse sql-server` on the home (no inherited lakehouse or engine variables), its output piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "SPARK_REMOTE", "SPARK_CONNECT_MODE"))}
    env["LAKEHOUSE_BI_PASSWORD"] = PASSWORD
    command = [LAKEHOUSE, "--home", str(settings.home), *[a for o in settings_overrides for a in ("--set", o)],
               "sql-server", *options]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def overrides(port: int) -> list[str]:
    return ["mlflow.enabled=false", f"bi.port={port}", "bi.sync_on_publish=true", "bi.sync_interval_seconds=0"]


def reader_conninfo(port: int, password: str = PASSWORD) -> str:
    return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=port, dbname="lakehouse", user="bi_reader",
                                          password=password, connect_timeout=5)  # fmt: skip


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


def _wait_for_replica(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"sql-server exited {process.returncode}: {process.stdout.read()}")
        try:
            with psycopg.connect(reader_conninfo(port)) as conn:
                synced = conn.execute("SELECT count(*) FROM lakehouse_sync.table_versions").fetchone()[0]
            if synced == len(replicated_tables()):
                return
        except psycopg.Error:
            pass
        time.sleep(0.2)
    raise AssertionError("sql-server did not serve the replica in time")


@pytest.fixture(scope="package")
def replica(spark, tmp_path_factory) -> Iterator[tuple[Settings, int, Path]]:
    """A published home, `lakehouse sql-server` serving it over TLS on a free loopback port; yields (settings, port, batch 2)."""
    assert JDBC_JAR.exists() and shutil.which("javac"), "Debian's libpostgresql-jdbc-java and javac: `make postgres`"
    postgres_bindir()  # raises when Debian's postgresql is missing
    # The server runs as an unprivileged user when the tests run as root: its home must be reachable.
    port = free_loopback_port()
    root, settings, inputs = half_published_home(spark, tmp_path_factory, "lakehouse-bi-", overrides(port))
    cert, key = _self_signed(inputs)
    process = sql_server_process(settings, overrides(port), "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        _wait_for_replica(port, process)
        yield settings, port, inputs / "second.jsonl"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
