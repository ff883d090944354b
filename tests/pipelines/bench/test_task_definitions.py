"""The plans a cluster runner's driver sends its workers, read from the server's own debug log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.bench.task_definitions import TASK_LOG_FILTER, log_offset, task_definition_figures
from pipelines.runtime.engine_servers import sail_connect_server
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[SparkSession, Path]]:
    folder = tmp_path_factory.mktemp("task-definitions")
    log = folder / "server.log"
    settings = make_settings(folder / "home")
    with sail_connect_server(settings, log_path=str(log), environment={"RUST_LOG": TASK_LOG_FILTER}) as url:
        session = SparkSession.builder.remote(url).create()
        try:
            yield session, log
        finally:
            session.stop()


def counted_by_group(spark: SparkSession, rows: int) -> None:
    """A grouping of `rows` rows sent from this process: they travel in the plan, to the workers too."""
    rows_df = spark.createDataFrame([(i, f"urn:li:corpuser:user{i}") for i in range(rows)], "k long, actor string")
    rows_df.groupBy((rows_df.k % 3).alias("m")).count().collect()


def test_a_plan_that_carries_rows_grows_with_them_and_one_that_reads_does_not(cluster):
    spark, log = cluster
    figures = {}
    for rows in (100, 1000):
        start = log_offset(log)
        counted_by_group(spark, rows)
        figures[rows] = task_definition_figures(log, start, log_offset(log))
    # Rows from the driver are in the plan each worker receives: ten times the rows, several times the bytes.
    assert figures[1000]["max_bytes"] > 5 * figures[100]["max_bytes"] > 0
    ranges = {}
    for rows in (100, 100_000):
        start = log_offset(log)
        spark.range(rows).selectExpr("id % 3 as m").groupBy("m").count().collect()
        ranges[rows] = task_definition_figures(log, start, log_offset(log))
    # A plan that only names its input keeps its size whatever the input holds (the bounds' few bytes aside).
    assert 0 < ranges[100]["max_bytes"] <= ranges[100_000]["max_bytes"] <= ranges[100]["max_bytes"] + 32
    for step in (*figures.values(), *ranges.values()):
        assert step["requests"] >= 2 and step["tasks"] >= step["requests"]
        assert step["total_bytes"] >= step["max_bytes"] and step["largest"]["job_id"] >= 1


def test_no_requests_between_equal_offsets_and_a_log_not_written_yet_starts_at_0(cluster, tmp_path):
    _, log = cluster
    end = log_offset(log)
    assert task_definition_figures(log, end, end) == {
        "requests": 0, "tasks": 0, "max_bytes": 0, "total_bytes": 0, "largest": None
    }  # fmt: skip
    assert log_offset(tmp_path / "no-server-wrote-this.log") == 0
