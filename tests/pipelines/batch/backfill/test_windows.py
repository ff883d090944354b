"""Windows of createdon, their high-water mark, and rows written as MCL lines."""

from __future__ import annotations

import json

import pyarrow as pa

from pipelines.batch.backfill.mcl_lines import mcl_lines
from pipelines.batch.backfill.windows import createdon_windows, high_water_mark, source_prefix, window_source


def batches(createdon: list[int], size: int) -> list[pa.RecordBatch]:
    table = pa.table({"createdon_us": pa.array(createdon, pa.int64()), "row": pa.array(range(len(createdon)))})
    return table.to_batches(max_chunksize=size)


def test_a_window_ends_where_createdon_changes_and_keeps_every_row_of_its_last_createdon():
    createdon = [1, 2, 3, 3, 3, 4, 5, 5, 6, 7]
    windows = list(createdon_windows(batches(createdon, size=4), window_rows=3))
    assert [w.column("createdon_us").to_pylist() for w in windows] == [[1, 2, 3, 3, 3], [4, 5, 5], [6, 7]]
    assert sum((w.column("row").to_pylist() for w in windows), []) == list(range(10))


def test_rows_sharing_one_createdon_stay_in_one_window_however_many():
    windows = list(createdon_windows(batches([1, 1, 1, 1, 1, 2], size=2), window_rows=2))
    assert [w.column("createdon_us").to_pylist() for w in windows] == [[1, 1, 1, 1, 1], [2]]


def test_a_batch_larger_than_a_window_is_cut_into_windows():
    windows = list(createdon_windows(batches(list(range(10)), size=10), window_rows=4))
    assert [w.num_rows for w in windows] == [4, 4, 2]


def test_the_high_water_mark_is_the_last_createdon_of_the_committed_windows_of_that_table():
    window = pa.table({"createdon_us": pa.array([10, 20], pa.int64())})
    prefix = source_prefix("postgres://db:5432/datahub", "metadata_aspect_v2")
    names = [window_source("postgres://db:5432/datahub", "metadata_aspect_v2", window),
             f"{prefix}21..35", "mariadb://other:3306/datahub/metadata_aspect_v2#createdon=1..99", "/landing/a.jsonl"]  # fmt: skip
    assert names[0] == f"{prefix}10..20"
    assert high_water_mark(names, prefix) == 35
    assert high_water_mark(names[2:], prefix) is None


def test_rows_become_mcl_lines_with_quotes_backslashes_and_control_characters_kept():
    metadata = '{"description": "a \\"quoted\\" \\\\ path\\nand a tab\\t"}'
    window = pa.table({
        "urn": ['urn:li:corpuser:o"brien', "urn:li:corpuser:b"], "aspect": ["corpUserInfo", "status"],
        "version": pa.array([0, 7], pa.int64()), "metadata": [metadata, "bad \x01 text\n"],
        "systemmetadata": ['{"runId": "r-1", "lastObserved": 5}', None],
        "createdon_us": pa.array([1700000000123456, 1700000000999000], pa.int64()),
        "createdby": ["urn:li:corpuser:x", "urn:li:corpuser:y"],
    })  # fmt: skip
    lines = mcl_lines(window, "postgres://db:5432/datahub", "metadata_aspect_v2").to_pylist()
    assert [line.split("\t", 1)[0] for line in lines] == ["1", "2"]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    first, second = (json.loads(line.split("\t", 1)[1]) for line in lines)
    assert first["entityUrn"] == 'urn:li:corpuser:o"brien' and first["changeType"] == "UPSERT"
    assert first["aspect"]["value"] == metadata and json.loads(first["aspect"]["value"])
    assert json.loads(first["systemMetadata"]) == {"runId": "r-1", "lastObserved": 5}
    assert first["created"] == {"time": 1700000000123, "actor": "urn:li:corpuser:x"}
    assert first["headers"] == {"database": "postgres://db:5432/datahub", "table": "metadata_aspect_v2",
                                "version": "0", "createdon": "1700000000123456"}  # fmt: skip
    assert second["aspect"]["value"] == "bad \x01 text\n" and second["systemMetadata"] is None
