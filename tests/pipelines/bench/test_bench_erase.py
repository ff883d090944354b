"""`lakehouse bench erase`, run as a real subprocess on a small pseudonymised home."""

from __future__ import annotations

import json

import pytest

from tests.pipelines.cli.test_cli import run_cli


@pytest.mark.slow
def test_one_run_builds_a_pseudonymised_home_and_times_each_erasure(tmp_path):
    out = tmp_path / "out"
    result = run_cli("bench", "erase", "--rows", "400", "--people", "8", "--erasures", "2", "--out", str(out), timeout=600)
    assert "erase: one person of 8 in a home of 400 usage events" in result.stdout
    (path,) = out.glob("erase-*.json")
    figures = json.loads(path.read_text())
    # Each person's key encrypted their urn and at least one source IP or user agent.
    assert len(figures["erasures"]) == 2 and all(run["identities"] >= 2 for run in figures["erasures"])
    assert figures["identity_rows"] >= 8 * 2 and figures["erase_median_s"] > 0
    assert all("load_before" in run for run in figures["erasures"])
