"""Landing records a batch's identities in requests whose size does not grow with the people in the batch."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from conf.tables import IDENTITIES, table_location
from datagen.history import generate_usage_events
from pipelines.orchestration.jobs import run_job
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.privacy.people import pseudonymised

pytestmark = pytest.mark.slow

FEW, MANY = 20, 400
# What the largest request may differ by: the input's paths and batch ids, not the people.
SLACK_BYTES = 2048


def _landed(spark, plan_sizes, folder, people: int) -> tuple[int, int]:
    """Land 2 usage events per person (each with a source IP and user agent); return land's largest request and the identities."""
    settings = pseudonymised(make_settings(folder / "home"))
    register_fresh_tables(spark, settings)
    now = int(time.time() * 1000)
    generate_usage_events(folder / "in", events=2 * people, seed=5, start_ms=now - 86_400_000, end_ms=now,
                          actors=[f"urn:li:corpuser:person{i:05d}" for i in range(people)], overwrite=True)  # fmt: skip
    plan_sizes.clear()
    run_job(settings, ("land",), paths=[folder / "in" / "usage"], spark=spark, deliver=False)
    return plan_sizes.largest_by_step()["land"], DeltaTable(str(table_location(settings, IDENTITIES))).count()


def test_landing_sends_the_same_plan_sizes_for_20x_the_people(spark, plan_sizes, tmp_path_factory):
    few_bytes, few_identities = _landed(spark, plan_sizes, tmp_path_factory.mktemp("few"), FEW)
    many_bytes, many_identities = _landed(spark, plan_sizes, tmp_path_factory.mktemp("many"), MANY)
    assert many_identities > 10 * few_identities >= 10 * FEW
    assert many_bytes <= few_bytes + SLACK_BYTES, (few_bytes, many_bytes)
