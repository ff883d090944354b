"""Export silver change events as DataHub Entity Change Event V1 JSON lines.

Each line is one event in the catalog's shape: entityUrn, entityType, category, operation, modifier
(when set), parameters (when any; `nullable` a JSON boolean, `decommissionTime` a number, every other
value a string, the JSON-valued ones as JSON text), version (always 0: DataHub's classes require it)
and auditStamp {actor, time}. DataHub's own consumer class (`EntityChangeEvent.from_json` of
acryl-datahub-actions) reads every line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from conf.settings import Settings
from conf.tables import ENTITY_CHANGE_EVENTS
from gold.ece_documents import ece_document
from pipelines.privacy.display import json_lines_with_identities
from pipelines.runtime.io import read_time_window, write_lines

EVENTS_TABLE = ENTITY_CHANGE_EVENTS


def select_events(
    spark: SparkSession, settings: Settings, since_ms: int | None = None, until_ms: int | None = None
) -> DataFrame:
    """The change events with since_ms <= event time < until_ms, in event time order (stable)."""
    events_df = read_time_window(spark, settings, EVENTS_TABLE, "event_time", since_ms, until_ms)
    return events_df.orderBy("event_time", "source_order_key", "event_id")


def iter_ece_lines(events_df: DataFrame) -> Iterator[str]:
    """Compact JSON text of each event row, one per event."""
    columns = ["entity_urn", "entity_type", "category", "operation", "modifier", "parameters", "version", "actor", "event_time"]
    for row in events_df.select(*columns).toLocalIterator():
        yield json.dumps(ece_document(row.asDict()), separators=(",", ":"), ensure_ascii=False)


def write_ece_jsonl(
    spark: SparkSession,
    settings: Settings,
    out: Path,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> int:
    """Write the change events of [since_ms, until_ms) to `out` as ECE V1 JSON lines.

    The file is written beside `out` and renamed into place, so a killed export never leaves half a file.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        out: the file to write (its folder is created).
        since_ms: first event time included (epoch ms); None: from the first event.
        until_ms: first event time excluded; None: to the last event.

    Returns:
        The number of events written.

    Raises:
        InputError: when since_ms is after until_ms, or `out` cannot be written.
    """
    lines = iter_ece_lines(select_events(spark, settings, since_ms, until_ms))
    # The exporting operator runs with the home's key store: people are written as who they are.
    return write_lines(Path(out), json_lines_with_identities(settings, lines))
