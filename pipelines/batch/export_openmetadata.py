"""Export gold ChangeEvents as OpenMetadata ChangeEvent JSON lines.

Each line is one ChangeEvent with the spec's keys only (`conf/schemas/openmetadata-change-event.schema.json`):
null optional keys are left out, changeDescription is never written for entityCreated and entityDeleted,
entity only for entityCreated. Lines come in (timestamp, entityId, version order) order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from conf.settings import Settings
from conf.tables import OPENMETADATA_CHANGE_EVENTS
from gold.openmetadata import event_filter_predicate, to_change_event_json
from pipelines.privacy.display import json_lines_with_identities
from pipelines.runtime.io import read_time_window, write_lines

CHANGE_EVENTS_TABLE = OPENMETADATA_CHANGE_EVENTS


def select_change_events(
    spark: SparkSession,
    settings: Settings,
    since_ms: int | None = None,
    until_ms: int | None = None,
    event_filter: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The ChangeEvents with since_ms <= timestamp < until_ms that `event_filter` selects, in export order.

    Raises:
        InputError: when since_ms is after until_ms.
        RequestError: for an eventFilter the spec does not allow (naming the key and value).
    """
    predicate = event_filter_predicate(event_filter)
    events_df = read_time_window(spark, settings, CHANGE_EVENTS_TABLE, "timestamp", since_ms, until_ms)
    return events_df.filter(predicate).orderBy("timestamp", "entity_id", "entity_sequence", "id")


def write_openmetadata_jsonl(
    spark: SparkSession,
    settings: Settings,
    out: Path,
    since_ms: int | None = None,
    until_ms: int | None = None,
    event_filter: Mapping[str, Any] | None = None,
) -> int:
    """Write the ChangeEvents of [since_ms, until_ms) that `event_filter` selects to `out`, one per line.

    The file is written beside `out` and renamed into place, so a killed export never leaves half a file.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        out: the file to write (its folder is created).
        since_ms: first timestamp included (epoch ms); None: from the first event.
        until_ms: first timestamp excluded; None: to the last event.
        event_filter: an OpenMetadata eventFilter `{eventType, entities}`; None: every event.

    Returns:
        The number of events written.

    Raises:
        InputError: when since_ms is after until_ms, or `out` cannot be written.
        RequestError: for an eventFilter the spec does not allow.
    """
    lines_df = to_change_event_json(select_change_events(spark, settings, since_ms, until_ms, event_filter))
    # The exporting operator runs with the home's key store: people are written as who they are.
    return write_lines(Path(out), json_lines_with_identities(settings, (row.value for row in lines_df.toLocalIterator())))
