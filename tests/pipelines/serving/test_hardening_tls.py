"""`lakehouse serve --tls-cert --tls-key`: HTTPS with a certificate made in the test, and HSTS."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from pipelines.bench.processes import LAKEHOUSE, child_env, free_port, stop
from tests.pipelines.serving.certificates import self_signed


@pytest.mark.slow
def test_serve_over_tls_sends_hsts(tmp_path):
    cert, key = self_signed(tmp_path)
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

    cert, key = self_signed(tmp_path)
    settings = make_settings(tmp_path / "home")
    assert tls_options(settings) == {}
    assert tls_options(settings, cert, key) == {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    with pytest.raises(ConfigError, match="--tls-key: None must be given together"):
        tls_options(settings, cert)
    with pytest.raises(ConfigError, match="--tls-key: .* is not a readable file"):
        tls_options(settings, cert, tmp_path / "missing.key")
