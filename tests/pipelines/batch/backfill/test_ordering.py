"""DataHub's version order made on the client, a createdon range at a time, from rows read in any order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipelines.batch.backfill.ordering import in_version_order, range_of, ranges_in_version_order
from pipelines.batch.backfill.reader import COLUMNS


def shuffled_rows(count: int, seed: int = 7) -> pa.Table:
    """Rows of a few entities, several versions sharing each createdon, in a random order."""
    rng = np.random.default_rng(seed)
    createdon = rng.integers(0, count // 4, count) * 1000
    table = pa.table({
        "urn": pa.array([f"urn:li:corpuser:u{i % 13}" for i in range(count)], pa.large_string()),
        "aspect": pa.array(["status" if i % 3 else "ownership" for i in range(count)], pa.large_string()),
        "version": pa.array(rng.integers(0, 4, count), pa.int64()),
        "metadata": pa.array([f'{{"n": {i}}}' for i in range(count)], pa.large_string()),
        "systemmetadata": pa.array([None] * count, pa.large_string()),
        "createdon_us": pa.array(createdon, pa.int64()),
        "createdby": pa.array(["urn:li:corpuser:x"] * count, pa.large_string()),
    })  # fmt: skip
    return table.select(list(COLUMNS))


def test_version_order_is_by_createdon_then_archived_versions_before_version_0():
    table = pa.table({
        "urn": ["b", "a", "c", "a", "c", "c"], "aspect": ["s"] * 6, "version": [0, 0, 2, 1, 1, 0],
        "metadata": ["{}"] * 6, "systemmetadata": [None] * 6, "createdon_us": [2, 2, 2, 1, 1, 3], "createdby": ["x"] * 6,
    })  # fmt: skip
    ordered = in_version_order(table)
    got = list(zip(ordered.column("urn").to_pylist(), ordered.column("version").to_pylist()))
    assert got == [("a", 1), ("c", 1), ("c", 2), ("a", 0), ("b", 0), ("c", 0)]


def test_a_range_holds_every_row_of_its_createdon_values():
    bounds = np.array([10, 20])
    assert range_of(bounds, np.array([0, 10, 11, 20, 21, 99])).tolist() == [0, 0, 1, 1, 2, 2]


def test_rows_in_any_order_come_out_in_version_order_range_by_range():
    table = shuffled_rows(5000)
    bounds = np.unique(np.sort(table.column("createdon_us").to_numpy())[::700])
    batches = table.to_batches(max_chunksize=333)
    out = pa.Table.from_batches(list(ranges_in_version_order(batches, bounds)))
    assert out.equals(in_version_order(table))
    # Rows after the last bound (written after the bounds were read) come last, in order too.
    late = pa.Table.from_batches(list(ranges_in_version_order(batches, bounds[:2])))
    assert late.equals(in_version_order(table))


def test_no_rows_give_no_batches():
    assert list(ranges_in_version_order([], np.array([5]))) == []
