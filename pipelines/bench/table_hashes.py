"""Two homes compared by their tables' content: per table, the SHA-256 of its sorted identity rows.

The identity columns are those that identify a table's rows whatever the cut into batches and whatever
engine wrote them (batch ids, write times and the state's prev_* columns depend on the cut). `bench life`
compares a life of batches with one run; `bench silver` compares each engine's home with the first's.
The rows travel as Arrow and are sorted there, so 10M rows hash in seconds instead of minutes of
Python row objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import (
    ACTOR_ACTIVITY_DAILY,
    ASPECT_SNAPSHOTS,
    ASPECT_STATE,
    AUDIT_EVENTS,
    ENTITY_CHANGE_EVENTS,
    OPENMETADATA_CHANGE_EVENTS,
    USAGE_EVENTS,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

IDENTITY_COLUMNS = {
    ASPECT_SNAPSHOTS: ("record_hash",),
    USAGE_EVENTS: ("record_hash",),
    ASPECT_STATE: ("entity_urn", "aspect_name", "version", "record_hash", "deleted", "entity_deleted"),
    ENTITY_CHANGE_EVENTS: ("event_id", "category", "operation", "actor", "event_time", "version"),
    AUDIT_EVENTS: ("event_id", "event_type", "timestamp", "actor_urn", "entity_urn", "aspect_name", "origin", "source_id"),
    OPENMETADATA_CHANGE_EVENTS: ("id", "event_type", "entity_urn", "timestamp", "user_name"),
    ACTOR_ACTIVITY_DAILY: ("actor_urn", "activity_date", "events_total", "events_by_type", "changes_by_category"),
}
# Rows hashed per slice of the sorted column: bounds the Python strings alive at once.
_SLICE_ROWS = 1_000_000
_FIELD, _ROW, _NULL = "\x1f", "\x1e", "\x00"


def identity_hashes(
    spark: SparkSession, settings: Settings, tables: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per compared table: its row count and the SHA-256 of its sorted identity rows.

    The state is read as its readers see it, with the log of small batches applied (`read_state`).

    Args:
        spark: the session (tables registered).
        settings: the home's settings.
        tables: the table keys to hash (default: every key of IDENTITY_COLUMNS).

    Returns:
        `{table key: {"rows": count, "sha256": hex digest}}`.

    Raises:
        InputError: naming `tables` and the key for a table with no identity columns.
    """
    from pipelines.runtime.io import read_table
    from pipelines.runtime.state_store import STATE_TABLE, read_state

    wanted = list(IDENTITY_COLUMNS) if tables is None else list(tables)
    unknown = [key for key in wanted if key not in IDENTITY_COLUMNS]
    if unknown:
        raise InputError(f"tables: {unknown[0]!r} has no identity columns (one of {', '.join(IDENTITY_COLUMNS)})")
    hashes = {}
    for key in wanted:
        table_df = read_state(spark, settings) if key == STATE_TABLE else read_table(spark, settings, key)
        hashes[key] = sorted_rows_hash(identity_rows(table_df, IDENTITY_COLUMNS[key]))
    return hashes


def identity_rows(table_df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """One `row` column: the identity columns as text joined by a unit separator (nulls as NUL)."""
    from pyspark.sql import functions as F

    return table_df.select(
        F.concat_ws(_FIELD, *(F.coalesce(_as_text(table_df, name), F.lit(_NULL)) for name in columns)).alias("row")
    )


def _as_text(table_df: DataFrame, name: str) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    column = F.col(name)
    if isinstance(table_df.schema[name].dataType, (ArrayType, MapType, StructType)):
        return F.to_json(column)
    return column.cast("string")


def sorted_rows_hash(rows_df: DataFrame, slice_rows: int = _SLICE_ROWS) -> dict[str, Any]:
    """The row count and SHA-256 of a one-column (`row`) DataFrame's values, sorted, joined by a record separator.

    Args:
        rows_df: the rows (`identity_rows`).
        slice_rows: rows turned into Python strings at a time (the digest does not depend on it).
    """
    import pyarrow.compute as pc

    rows = rows_df.toArrow().column("row")
    ordered = rows.take(pc.sort_indices(rows))
    digest = hashlib.sha256()
    for start in range(0, len(ordered), slice_rows):
        if start:
            digest.update(_ROW.encode())
        digest.update(_ROW.join(ordered.slice(start, slice_rows).to_pylist()).encode())
    return {"rows": len(ordered), "sha256": digest.hexdigest()}
