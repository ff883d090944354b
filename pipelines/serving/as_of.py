"""An entity's aspects as they were at a time, read in-process (delta-rs + Arrow) from bronze snapshots.

The answer of `pipelines.batch.timeline.aspects_as_of` without a Spark session: the committed snapshots of
the entity created at or before the time, sequenced as `silver.sequencing.to_sequenced_batch` sequences one
batch against an empty state (the ordering key and arrival order of `silver.order_keys`, the first
landed copy of a version counts, the newest version per aspect), with the PATCH records folded in order
by `silver.patches.fold_versions`, as `silver.patching.with_patches_applied` folds them. Only the rows of
one entity are read, so the fold runs in the API's process.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import ASPECT_SNAPSHOTS, LANDED_FILES, table_location
from pipelines.serving.explorer_data import latest_dataset
from silver.order_keys import ARRIVAL_ORDER, order_key, patch_arrival
from silver.patches import PATCH, fold_versions

SNAPSHOTS_TABLE = ASPECT_SNAPSHOTS
LANDED_TABLE = LANDED_FILES
SNAPSHOT_COLUMNS = ("aspect_name", "change_type", "aspect_json", "version", "created_time", "created_actor",
                    "source_file", "line_number", "batch_id", "landed_at")  # fmt: skip
# Of two copies of one version, the first landed counts: silver.order_keys.ARRIVAL_ORDER, with the landing
# time in epoch microseconds.
ARRIVAL_COLUMNS = tuple("landed_at_us" if column == "landed_at" else column for column in ARRIVAL_ORDER)


def row_order_key(row: dict[str, Any]) -> str:
    """The ordering key `silver.sequencing` gives a snapshot row (a PATCH's ends with where it stands in its input)."""
    arrival = patch_arrival(row["line_number"], row["source_file"])
    return order_key(row["version"], row["created_time"], str(row["change_type"]), arrival)


def _committed_batches(settings: Settings) -> list[str]:
    """The batches whose landing finished (their bronze.landed_files rows exist)."""
    dataset = latest_dataset(table_location(settings, LANDED_TABLE))
    return [] if dataset is None else pc.unique(dataset.to_table(columns=["batch_id"])["batch_id"]).to_pylist()


def _snapshot_rows(settings: Settings, urn: str, at_ms: int) -> list[dict[str, Any]]:
    """The committed snapshots of `urn` created at or before `at_ms`, with landed_at in epoch microseconds."""
    dataset = latest_dataset(table_location(settings, SNAPSHOTS_TABLE))
    batches = _committed_batches(settings)
    if dataset is None or not batches:
        return []
    condition = (
        (ds.field("entity_urn") == urn) & (ds.field("created_time") <= at_ms) & ds.field("batch_id").isin(batches)
    )
    table = dataset.to_table(columns=list(SNAPSHOT_COLUMNS), filter=condition)
    micros = pc.cast(pc.cast(table["landed_at"], pa.timestamp("us", tz="UTC")), pa.int64())
    return table.append_column("landed_at_us", micros).to_pylist()


def newest_versions(aspect_name: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The aspect's newest applied version among its snapshot rows, PATCH records folded in; None if none.

    Returns:
        The row of that version with `new_json` (the full aspect; None on DELETE).
    """
    first_copies: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: tuple(r[c] for c in ARRIVAL_COLUMNS)):
        first_copies.setdefault(row_order_key(row), row)
    versions = [(key, first_copies[key]) for key in sorted(first_copies)]
    if not versions:
        return None
    is_delete = [str(row["change_type"]).upper() == "DELETE" for _, row in versions]
    new_json = [None if deleted else row["aspect_json"] for deleted, (_, row) in zip(is_delete, versions)]
    if not any(str(row["change_type"]).upper() == PATCH for _, row in versions):
        return {**versions[-1][1], "new_json": new_json[-1]}
    folded = fold_versions(aspect_name, None, [
        {"order_key": key, "change_type": row["change_type"], "json": json_text, "created_time": row["created_time"]}
        for (key, row), json_text in zip(versions, new_json)
    ])  # fmt: skip
    last = [index for index, entry in enumerate(folded) if entry["is_last"]]
    if not last:
        return None
    return {**versions[last[0]][1], "new_json": folded[last[0]]["new_json"]}


def read_aspects_as_of(settings: Settings, urn: str, at_ms: int) -> list[dict[str, Any]]:
    """Every aspect of `urn` as it was at `at_ms`, in the shape of `pipelines.batch.timeline.aspects_as_of`.

    Returns:
        One dict per aspect, sorted by name: aspect_name, version, change_type, created_time,
        created_actor, deleted and aspect (the parsed JSON, None if deleted).

    Raises:
        InputError: when `urn` is not a DataHub urn.
    """
    if not urn.startswith("urn:li:"):
        raise InputError(f"urn: {urn!r} is not a DataHub urn (urn:li:<type>:<id>)")
    by_aspect: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in _snapshot_rows(settings, urn, at_ms):
        by_aspect[row["aspect_name"]].append(row)
    aspects = []
    for aspect_name in sorted(by_aspect):
        newest = newest_versions(aspect_name, by_aspect[aspect_name])
        if newest is None:
            continue
        deleted = str(newest["change_type"]).upper() == "DELETE"
        aspects.append({
            "aspect_name": aspect_name,
            "version": newest["version"],
            "change_type": newest["change_type"],
            "created_time": newest["created_time"],
            "created_actor": newest["created_actor"],
            "deleted": deleted,
            "aspect": None if deleted or newest["new_json"] is None else json.loads(newest["new_json"]),
        })  # fmt: skip
    return aspects
