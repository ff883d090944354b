"""bench watch on a small generated home: freshness per file, micro-batches, compactions, settings passed on."""

from __future__ import annotations

import pytest

from pipelines.bench.watch import run_watch_bench


@pytest.mark.slow
def test_the_watch_bench_times_every_file_and_passes_the_watcher_its_settings(tmp_path):
    result = run_watch_bench(
        tmp_path / "home", files=2, records=3, interval=0.2, entities=11, seed=1,
        watch_settings=("watch.compact_every_batches=1",),
    )  # fmt: skip
    assert result["watch_settings"] == ["watch.compact_every_batches=1"]
    assert result["exit_codes"] == {"watch": 0, "serve": 0}
    assert 0 < result["freshness_s"]["p50"] <= result["freshness_s"]["max"] < 60
    assert sum(b["files"] for b in result["micro_batches"]) == 2
    assert sum(b["records"] for b in result["micro_batches"]) == 6
    # A round of compaction follows the first micro-batch: the state comes first.
    assert result["compactions"][0]["table"] == "silver.aspect_state"
