"""PATCH records in a sequenced batch (silver.patching) on both engines, and the state reverted past a patch."""

from __future__ import annotations

import json

from pyspark.sql import functions as F

from conf.tables import table_spec
from silver.patching import REJECTED, to_patched_aspects, to_rejected_patches, with_patches_applied
from silver.sequencing import ACCEPTED, to_pairs, to_sequenced_batch, to_skipped_snapshots
from silver.state import to_empty_state, to_entity_status, to_pre_batch_state, to_state_rows
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
OTHER = "urn:li:dataset:(urn:li:dataPlatform:hive,db.other,PROD)"
T = 1700000000000


def tags(*names: str) -> dict:
    return {"tags": [{"tag": f"urn:li:tag:{name}"} for name in names]}


def add_tag(name: str) -> list[dict]:
    return [{"op": "add", "path": f"/tags/urn:li:tag:{name}", "value": {"tag": f"urn:li:tag:{name}"}}]


def patch(urn: str, operations, time: int) -> dict:
    return mcl(urn, "globalTags", operations, version=None, time=time, change_type="PATCH")


def applied(spark, records, pre_state=None, batch_id="b1", batch_index=0):
    batch_df = bronze_df(spark, to_bronze_rows(records, batch_id, batch_index=batch_index))
    pre_state_df = pre_state if pre_state is not None else to_empty_state(batch_df)
    return with_patches_applied(to_sequenced_batch(batch_df, pre_state_df)), pre_state_df


def test_patches_apply_in_order_to_the_record_before_them_and_other_keys_are_left_alone(spark):
    records = [
        mcl(URN, "globalTags", tags("a"), version=None, time=T),
        patch(URN, add_tag("b"), T + 1),
        # The same time as the patch before: still a version of its own, applied after it.
        patch(URN, [{"op": "remove", "path": "/tags/urn:li:tag:a"}], T + 1),
        patch(URN, [{"op": "replace", "path": "/tags/urn:li:tag:zzz/tag", "value": "x"}], T + 2),
        mcl(OTHER, "globalTags", tags("c"), version=None, time=T),
    ]
    patched_df, _ = applied(spark, records)
    rows = sorted(patched_df.collect(), key=lambda r: (r.entity_urn, r.order_key))
    mine = [r for r in rows if r.entity_urn == URN]
    assert [(r.change_type, r.disposition, r.is_last) for r in mine] == [
        ("UPSERT", ACCEPTED, False), ("PATCH", ACCEPTED, False), ("PATCH", ACCEPTED, True), ("PATCH", REJECTED, False)]
    assert [json.loads(r.new_json) for r in mine[:3]] == [tags("a"), tags("a", "b"), tags("b")]
    assert [json.loads(r.prev_json) if r.prev_json else None for r in mine[:3]] == [None, tags("a"), tags("a", "b")]
    assert mine[3].patch_error == "aspect.value.patch[0].path: '/tags/urn:li:tag:zzz/tag' does not exist"
    (other,) = [r for r in rows if r.entity_urn == OTHER]
    assert (other.disposition, other.is_last, json.loads(other.new_json), other.patch_error) == (ACCEPTED, True, tags("c"), None)
    # The rejected patch is no pair, no skipped snapshot, no state row: it goes to quarantine.
    assert to_pairs(patched_df).filter(F.col("disposition") == REJECTED).count() == 0
    assert to_skipped_snapshots(patched_df).count() == 0
    (rejected,) = to_rejected_patches(patched_df).collect()
    assert rejected.reason == mine[3].patch_error and json.loads(rejected.raw_text)["changeType"] == "PATCH"
    produced = sorted(to_patched_aspects(patched_df).collect(), key=lambda r: r.order_key)
    assert [json.loads(r.aspect_json) for r in produced] == [tags("a", "b"), tags("b")]


def test_reverting_a_batch_takes_a_patched_predecessor_from_the_patched_aspects(spark):
    state_columns = table_spec("silver.aspect_state").column_names

    def state_of(patched_df, pre_state_df):
        status_df = to_entity_status(patched_df, pre_state_df)
        state_df = to_state_rows(patched_df, status_df).withColumn("updated_at", F.current_timestamp()).select(*state_columns)
        # As refine stages it: rows, not the plan that made them (each step reads its input twice).
        return spark.createDataFrame(state_df.collect(), state_df.schema)

    first = [mcl(URN, "globalTags", tags("a"), version=None, time=T), patch(URN, add_tag("b"), T + 1)]
    first_df, empty_df = applied(spark, first)
    state_b1_df = state_of(first_df, empty_df)
    assert json.loads(state_b1_df.first().aspect_json) == tags("a", "b")
    bronze_b1_df = bronze_df(spark, to_bronze_rows(first, "b1"))
    second_records = [mcl(URN, "globalTags", tags("c"), version=None, time=T + 5)]
    second_df, pre_df = applied(spark, second_records, to_pre_batch_state(state_b1_df, "b2", bronze_b1_df.limit(0)), "b2", 1)
    state_b2_df = state_of(second_df, pre_df)
    patched_aspects_df = to_patched_aspects(first_df)
    (reverted,) = to_pre_batch_state(state_b2_df, "b2", bronze_b1_df, patched_aspects_df).collect()
    assert (reverted.change_type, json.loads(reverted.aspect_json)) == ("PATCH", tags("a", "b"))
