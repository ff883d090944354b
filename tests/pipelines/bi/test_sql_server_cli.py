"""`lakehouse sql-server` refuses what it cannot serve before it starts anything."""

from __future__ import annotations

import pytest

from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow


def test_a_first_start_without_a_password_stops_before_creating_the_cluster(tmp_path):
    result = run_cli("sql-server", "--once", home=tmp_path, check=False)
    assert result.returncode == 2
    assert "--password-file" in result.stderr and "LAKEHOUSE_BI_PASSWORD" in result.stderr
    assert not (tmp_path / "bi" / "postgres").exists()


def test_a_certificate_without_its_key_is_refused(tmp_path):
    cert = tmp_path / "server.crt"
    cert.write_text("not used")
    result = run_cli("sql-server", "--tls-cert", str(cert), home=tmp_path, env={"LAKEHOUSE_BI_PASSWORD": "x"}, check=False)
    assert result.returncode == 2
    assert "--tls-cert / --tls-key: give both or neither" in result.stderr
