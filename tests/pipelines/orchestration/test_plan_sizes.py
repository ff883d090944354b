"""The requests a run sends do not grow with the data: every step's largest plan at 200k versions is that at 10k.

A plan that carried rows, key lists or per-file literals from the driver grew with the batch until it met
the server's 4 MiB message limit (docs/scaling.md). Both sizes are cut into the same files, so only the
rows differ; the session's recorder files each request under the step that sent it.
"""

from __future__ import annotations

import pytest

from pipelines.bench.harness import bench_settings
from pipelines.bench.plans import generate_cut_history, run_recorded
from tests.conftest import register_fresh_tables

pytestmark = pytest.mark.slow

SMALL, LARGE = 10_000, 200_000
# What a step's largest request may differ by between the sizes: the input's paths are named in land's
# reads, and a longer folder name or a batch id of another length is not growth.
SLACK_BYTES = 2048


def recorded_run(spark, plan_sizes, tmp_path_factory, versions: int) -> dict:
    inputs = generate_cut_history(tmp_path_factory.mktemp(f"plans-in-{versions}"), versions, seed=54)
    settings = bench_settings(tmp_path_factory.mktemp(f"plans-home-{versions}"))
    register_fresh_tables(spark, settings)
    return run_recorded(plan_sizes, settings, inputs, spark)


def test_every_step_sends_the_same_plan_sizes_at_20x_the_versions(spark, plan_sizes, tmp_path_factory):
    small = recorded_run(spark, plan_sizes, tmp_path_factory, SMALL)["largest_bytes"]
    large = recorded_run(spark, plan_sizes, tmp_path_factory, LARGE)["largest_bytes"]
    assert {"land", "refine.events", "refine.state", "publish.audit_events", "publish.openmetadata"} <= set(small)
    assert set(large) == set(small), "the two sizes ran different steps"
    grown = {step: (small[step], large[step]) for step in small if large[step] > small[step] + SLACK_BYTES}
    assert not grown, f"requests that grew with the data (bytes at {SMALL}, at {LARGE}): {grown}"
