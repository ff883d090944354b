"""A batch's staged rows (bronze.batches): duplicates within the batch and against landed rows, quarantine rows."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from bronze.batches import (
    drop_batch_duplicates,
    drop_landed_duplicates,
    filter_out_lines,
    to_duplicate_hashes,
    to_quarantine_rows,
    to_repeated_lines,
)

pytestmark = pytest.mark.pure


def test_duplicates_keep_the_first_occurrence_and_landed_ones_are_dropped(pure_spark):
    rows = [
        (1, 5, "h1"),
        (0, 9, "h1"),
        (0, 2, "h2"),
        (0, 4, "h1"),
        (1, 1, "h3"),
    ]
    landable_df = pure_spark.createDataFrame(rows, "file_index int, line_number bigint, record_hash string")
    assert sorted(r.record_hash for r in to_duplicate_hashes(landable_df).collect()) == ["h1"]
    first = {(r.file_index, r.line_number, r.record_hash) for r in drop_batch_duplicates(landable_df).collect()}
    assert first == {(0, 4, "h1"), (0, 2, "h2"), (1, 1, "h3")}
    repeated = sorted((r.file_index, r.line_number, r.record_hash) for r in to_repeated_lines(landable_df).collect())
    assert repeated == [(0, 9, "h1"), (1, 5, "h1")]
    repeated_df = to_repeated_lines(landable_df)
    listed = {(r.file_index, r.line_number, r.record_hash) for r in filter_out_lines(landable_df, repeated_df).collect()}
    assert listed == first
    assert filter_out_lines(landable_df, repeated_df.limit(0)).count() == 5
    unnumbered_df = pure_spark.createDataFrame([(0, None, "h4")], "file_index int, line_number bigint, record_hash string")
    assert filter_out_lines(landable_df.unionByName(unnumbered_df), repeated_df).count() == 4
    # Two records of one line (the aspects of one MCE): only the repeated one goes.
    sibling_df = pure_spark.createDataFrame([(0, 9, "h5")], "file_index int, line_number bigint, record_hash string")
    kept_df = filter_out_lines(landable_df.unionByName(sibling_df), repeated_df, shared_lines=True)
    assert {r.record_hash for r in kept_df.collect()} == {"h1", "h2", "h3", "h5"} and kept_df.count() == 4
    # Without shared lines the line alone names a row (the sibling goes too: no file shares lines then).
    assert filter_out_lines(landable_df.unionByName(sibling_df), repeated_df).count() == 3
    landed_df = pure_spark.createDataFrame([("h2", 1), ("h9", 2)], "record_hash string, other int")
    left = sorted(r.record_hash for r in drop_landed_duplicates(landable_df, landed_df).collect())
    assert left == ["h1", "h1", "h1", "h3"]


def test_quarantine_rows_name_the_field_and_carry_the_batch(pure_spark):
    rejected_df = pure_spark.createDataFrame(
        [("{x", "a.json", 3, "file-sink", "record: malformed JSON in the file-sink array"),
         ('{"a": 1}', "b.jsonl", 8, "mcl", "created.time: 'x' is not an integer epoch-ms")],
        "raw_text string, source_file string, line_number bigint, source_kind string, reason string",
    )
    at = datetime(2026, 1, 2, 23, 59, tzinfo=timezone.utc)
    rows = to_quarantine_rows(rejected_df, "b-7", at).orderBy("line_number").collect()
    assert [r.field for r in rows] == ["record", "created.time"]
    assert [r.kind for r in rows] == ["file-sink", "mcl"]
    assert {(r.batch_id, r.land_date) for r in rows} == {("b-7", date(2026, 1, 2))}
    # Timestamps come back as naive local times of this process.
    assert rows[0].quarantined_at == at.astimezone().replace(tzinfo=None)
