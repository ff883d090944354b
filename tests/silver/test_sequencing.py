"""Sequencing (silver.sequencing): copies of a version, late snapshots and the key each lost against."""

from __future__ import annotations

import json

import pytest

from silver.sequencing import ACCEPTED, DUPLICATE, to_sequenced_batch, to_skipped_snapshots
from silver.state import to_empty_state, to_entity_status, to_state_rows
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"


def tags(*names: str) -> dict:
    return {"tags": [{"tag": f"urn:li:tag:{name}"} for name in names]}


def sequenced(spark, records):
    batch_df = bronze_df(spark, to_bronze_rows(records, "b1"))
    rows = to_sequenced_batch(batch_df, to_empty_state(batch_df)).orderBy("line_number").collect()
    return [r.asDict() for r in rows]


@pytest.mark.pure
def test_a_later_copy_of_a_version_is_a_duplicate_and_the_first_landed_copy_is_the_predecessor(pure_spark):
    rows = sequenced(
        pure_spark,
        [
            mcl(URN, "globalTags", tags("a"), version=1),
            mcl(URN, "globalTags", tags("b"), version=1),  # a second copy of version 1, other content
            mcl(URN, "globalTags", tags("c"), version=1),
            mcl(URN, "globalTags", tags("d"), version=2),
        ],
    )
    assert [r["disposition"] for r in rows] == [ACCEPTED, DUPLICATE, DUPLICATE, ACCEPTED]
    assert json.loads(rows[3]["prev_json"]) == tags("a")
    assert [r["is_last"] for r in rows] == [False, False, False, True]


@pytest.mark.pure
def test_a_skipped_snapshot_records_the_key_it_lost_against(pure_spark):
    first_df = bronze_df(pure_spark, to_bronze_rows([mcl(URN, "globalTags", tags("a"), version=3)], "b1"))
    first = to_sequenced_batch(first_df, to_empty_state(first_df))
    state_df = to_state_rows(first, to_entity_status(first, to_empty_state(first_df)))
    records = [
        mcl(URN, "globalTags", tags("b"), version=4),
        mcl(URN, "globalTags", tags("b"), version=4),  # a second copy within the batch
        mcl(URN, "globalTags", tags("c"), version=2),  # older than the state
        mcl(URN, "globalTags", tags("a"), version=3),  # the state's own version
    ]
    second_df = bronze_df(pure_spark, to_bronze_rows(records, "b2"))
    skipped = to_skipped_snapshots(to_sequenced_batch(second_df, state_df)).orderBy("line_number").collect()
    key = {1: "v0000000000000000004.0", 2: "v0000000000000000002.0", 3: "v0000000000000000003.0"}
    assert [(s.line_number, s.reason, s.order_key, s.state_order_key) for s in skipped] == [
        (2, "DUPLICATE", key[1], key[1]),
        (3, "LATE", key[2], key[3]),
        (4, "DUPLICATE", key[3], key[3]),
    ]


@pytest.mark.pure
def test_the_newest_version_landed_again_gives_the_state_its_first_copy_paired_past_the_copies(pure_spark):
    rows = sequenced(
        pure_spark,
        [
            mcl(URN, "globalTags", tags("a"), version=1),
            mcl(URN, "globalTags", tags("b"), version=2),
            mcl(URN, "globalTags", tags("x"), version=2),
            mcl(URN, "globalTags", tags("y"), version=2),
        ],
    )
    assert [r["disposition"] for r in rows] == [ACCEPTED, ACCEPTED, DUPLICATE, DUPLICATE]
    assert [r["is_last"] for r in rows] == [False, True, False, False]
    assert json.loads(rows[1]["new_json"]) == tags("b")
    # Sorted by arrival newest first, the later copies lie between version 2 and version 1.
    assert json.loads(rows[1]["prev_json"]) == tags("a")
