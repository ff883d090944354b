"""A watcher the tests drive in-process, one micro-batch at a time, on the test session."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pyspark.sql import SparkSession

from conf.settings import Settings
from pipelines.orchestration.watch import Watcher
from pipelines.orchestration.watch_process import StopSignal
from tests.conftest import make_settings, register_fresh_tables


def in_process_watcher(
    spark: SparkSession, home: Path, **sections: dict[str, Any]
) -> tuple[Settings, Watcher, SimpleNamespace]:
    """A watcher of a new home at `home`, MLflow off, each named settings section given the values in `sections`.

    Returns:
        (settings, watcher, session): `session` hands the test session to `Watcher._micro_batch` in
        place of the watcher's own.
    """
    settings = make_settings(home)
    changed = {name: dataclasses.replace(getattr(settings, name), **values) for name, values in sections.items()}
    settings = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False), **changed)
    register_fresh_tables(spark, settings)
    return settings, Watcher(settings, StopSignal()), SimpleNamespace(spark=spark)
