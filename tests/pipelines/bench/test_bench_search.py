"""`lakehouse bench search`, run as a real subprocess on a small table: both engines measured in one run."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from conf.tables import table_location
from tests.conftest import make_settings
from tests.pipelines.cli.test_cli import run_cli


@pytest.mark.slow
def test_one_run_measures_both_engines_and_a_kept_home_is_reused(tmp_path):
    home, out = tmp_path / "home", tmp_path / "out"
    args = ["--events", "2000", "--duration", "1", "--warmup", "1", "--requests", "3", "--days", "2", "--actors", "20",
            "--work-dir", str(home), "--out", str(out)]  # fmt: skip
    run_cli("bench", "search", *args, timeout=600)
    (path,) = out.glob("search-*.json")
    result = json.loads(path.read_text())
    assert result["reused"] is False and result["rows"] == 2000 and result["engines"] == ["inprocess", "spark"]
    for engine in ("inprocess", "spark"):
        figures = result[engine]
        for phase, clients in (("load_1_client", 1), ("load_16_clients", 16)):
            assert figures[phase]["clients"] == clients and figures[phase]["requests"] > 0
            assert figures[phase]["errors"] == 0 and figures[phase]["p50_ms"] <= figures[phase]["p95_ms"]
        # The warm-up ran at the load phase's clients, after the start's files were flushed.
        assert figures["warmup"]["clients"] == 16 and figures["warmup"]["requests"] > 0 and figures["start_flush_s"] >= 0
        assert figures["new_version_visible"]["visible"] == figures["new_version_visible"]["probes"] == 5
        assert figures["server_peak_rss_bytes"] > 0
        assert set(figures["target"]["measured"]) == {"load_rps", "load_p95_ms", "single_p95_ms", "rss_bytes",
                                                      "visible_s", "errors"}  # fmt: skip
    # Each visibility probe committed one version of one event: 2,000 loaded + 5 probes per engine.
    location = table_location(make_settings(home), "gold.audit_events")
    assert DeltaTable(str(location)).to_pyarrow_dataset().count_rows() == 2010

    run_cli("bench", "search", *args[:-2], "--out", str(tmp_path / "again"), "--engine", "inprocess", "--mix", "contract",
            timeout=600)  # fmt: skip
    (again,) = (tmp_path / "again").glob("search-*.json")
    reused = json.loads(again.read_text())
    assert reused["reused"] is True and reused["rows"] == 2010 and reused["engines"] == ["inprocess"]
    assert "spark" not in reused and "generate" not in reused
    # The contract mix: its twelve kinds one at a time, the throughput ratio, the memory of every server process.
    figures = reused["inprocess"]
    assert reused["mix"] == "contract" and len(figures["latency"]) == 13  # 12 kinds and the 10-deep paging
    assert all(kind["errors"] == 0 for kind in figures["latency"].values())
    assert figures["load_ratio"] == round(figures["load_16_clients"]["throughput_rps"]
                                          / figures["load_1_client"]["throughput_rps"], 2)  # fmt: skip
    assert figures["load_16_clients"]["server_cpu_ms_per_request"] > 0
    assert figures["server_memory"]["processes"] >= 2  # the parent and its workers
    assert "load_ratio" in figures["target"]["measured"] and figures["target"]["targets"]["mix"] == "contract"
