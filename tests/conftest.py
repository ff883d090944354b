"""Shared fixtures: one embedded (Sail) session, one JVM Spark local[2] session, per-module homes."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf.settings import Settings, load_settings
from pipelines.runtime.catalog import ensure_tables
from pipelines.runtime.engine import open_session
from pipelines.runtime.engine_servers import jvm_connect_server
from pipelines.runtime.plan_sizes import PlanSizes

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures" / "datahub"


@pytest.fixture(scope="session")
def plan_sizes() -> PlanSizes:
    """The recorder of every request the `spark` session sends (clear it before measuring)."""
    return PlanSizes()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, plan_sizes: PlanSizes) -> Iterator[SparkSession]:
    """The embedded engine: Sail in-process, PySpark Connect client; one for the whole run."""
    settings = load_settings("local", home=tmp_path_factory.mktemp("session-home"), env={})
    with open_session(settings, register_tables=False, plan_sizes=plan_sizes) as session:
        yield session


# The tests send the JVM many small queries: its optimizing compiler would spend CPU it never earns back
# (the 81 JVM tests of silver, bronze and gold: 96 CPU-s with the quick compiler only, 143 without).
TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@pytest.fixture(scope="session")
def classic_url() -> Iterator[str]:
    """The sc:// URL of JVM Spark local[2] (pyspark's own jars, no Delta) as a Spark Connect server."""
    with jvm_connect_server("local[2]", java_options=TEST_JVM_OPTIONS) as url:
        yield url


@pytest.fixture(scope="session")
def classic_spark(classic_url: str) -> Iterator[SparkSession]:
    """JVM Spark local[2] reached through Spark Connect (`classic_url`)."""
    settings = load_settings("local", env={}, overrides=("engine.kind=connect", f"engine.connect_url={classic_url}"))
    with open_session(settings, register_tables=False) as session:
        yield session


@pytest.fixture(params=["sail", "classic"])
def pure_spark(request: pytest.FixtureRequest) -> SparkSession:
    """Each engine in turn, for tests of pure transforms (mark them `pure`)."""
    return request.getfixturevalue("spark" if request.param == "sail" else "classic_spark")


def make_settings(home: Path, **overrides) -> Settings:
    """Local-profile settings rooted at `home`, with top-level fields replaced by `overrides`."""
    settings = load_settings("local", home=home, env={})
    return dataclasses.replace(settings, **overrides) if overrides else settings


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A fresh lakehouse home for one test module, its tables created and registered in `spark`."""
    settings = make_settings(tmp_path_factory.mktemp("lakehouse"))
    register_fresh_tables(spark, settings)
    return settings


def register_fresh_tables(spark: SparkSession, settings: Settings) -> None:
    """Point the session's table names at `settings.home`, dropping earlier registrations first."""
    from conf.tables import TABLES, table_name

    for key in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {table_name(settings, key)}")
    ensure_tables(spark, settings)


def delta_log_actions(location: Path) -> list[dict]:
    """Every action of the Delta table at `location`, in commit order (one dict per line of its JSON commits)."""
    commits = sorted((location / "_delta_log").glob("*.json"))
    return [json.loads(line) for commit in commits for line in commit.read_text().splitlines()]


# A test of a pure transform runs on JVM Spark too when its id names the `classic` engine (`pure_spark`).
ON_JVM = re.compile(r"[\[-]classic[\]-]")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the run: the JVM tests first, then the files named in tests/longest_first.txt in its order.

    The rest keep their order. Under `make test` each worker takes a file at a time, and the JVM tests
    of every file go to one worker (`pytest_xdist_make_scheduler`), so one JVM starts, not two.
    """
    listed = (REPO / "tests" / "longest_first.txt").read_text().splitlines()
    rank = {name: index for index, name in enumerate(line for line in listed if line and not line.startswith("#"))}
    items.sort(key=lambda item: (not ON_JVM.search(item.nodeid), rank.get(item.nodeid.split("::")[0], len(rank))))


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist loadfile`: a file at a time per worker, and every JVM test in one unit of its own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrJvmScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "JVM Spark" if ON_JVM.search(nodeid) else super()._split_scope(nodeid)

    return FileOrJvmScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With SUITE_CPU_REPORT=<folder>, add each test's CPU seconds to a file per worker there.

    A line per test: its id, this process's CPU seconds (the embedded engine runs in it) and those of
    the children it waited for (CLI and server subprocesses): where a run's CPU goes, which wall times
    on a busy machine do not tell.
    """
    import os

    folder = os.environ.get("SUITE_CPU_REPORT")
    if not folder:
        return (yield)
    import resource

    def seconds(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    own, children = seconds(resource.RUSAGE_SELF), seconds(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = {"test": item.nodeid, "own_cpu_s": round(seconds(resource.RUSAGE_SELF) - own, 2),
                "children_cpu_s": round(seconds(resource.RUSAGE_CHILDREN) - children, 2)}  # fmt: skip
        with (Path(folder) / f"cpu-{worker}.jsonl").open("a") as out:
            out.write(json.dumps(line) + "\n")
