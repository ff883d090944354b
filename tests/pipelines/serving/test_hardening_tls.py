"""`lakehouse serve --tls-cert --tls-key`: HTTPS with a certificate made in the test, and HSTS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import subprocess
import time

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pipelines.bench.watch import LAKEHOUSE, child_env, free_port, stop


def _self_signed(directory) -> tuple:
    """A certificate for 127.0.0.1 signed by its own key, as PEM files: (cert, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.slow
def test_serve_over_tls_sends_hsts(tmp_path):
    cert, key = _self_signed(tmp_path)
    port = free_port()
    command = [LAKEHOUSE, "--home", str(tmp_path / "home"), "--set", "mlflow.enabled=false", "serve", "--port", str(port),
               "--tls-cert", str(cert), "--tls-key", str(key)]  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=child_env())
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"https://127.0.0.1:{port}/health", verify=str(cert), timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert answer.status_code == 200 and answer.json() == {"status": "ok"}
        assert answer.headers["strict-transport-security"].startswith("max-age=31536000")
        assert "https://127.0.0.1" in log.read_text()
        with pytest.raises(httpx.TransportError):  # no plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        stop(server)


def test_a_certificate_without_its_key_is_refused(tmp_path):
    from conf.errors import ConfigError
    from pipelines.serving.hardening import tls_options
    from tests.conftest import make_settings

    cert, key = _self_signed(tmp_path)
    settings = make_settings(tmp_path / "home")
    assert tls_options(settings) == {}
    assert tls_options(settings, cert, key) == {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    with pytest.raises(ConfigError, match="--tls-key: None must be given together"):
        tls_options(settings, cert)
    with pytest.raises(ConfigError, match="--tls-key: .* is not a readable file"):
        tls_options(settings, cert, tmp_path / "missing.key")
