"""The state around a batch (silver.state): reverting a batch's own rows, the state with its change log applied."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from chispa import assert_df_equality

from conf.tables import table_spec
from silver.sequencing import to_sequenced_batch
from silver.state import to_current_state, to_empty_state, to_entity_status, to_pre_batch_state, to_state_rows
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows
from tests.silver.state_log_rows import logged_state

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"


def tags(*names: str) -> dict:
    return {"tags": [{"tag": f"urn:li:tag:{name}"} for name in names]}


def test_reverting_a_batch_takes_the_replaced_json_from_the_bronze_snapshot_it_names(spark):
    first = to_bronze_rows([mcl(URN, "globalTags", tags("a"), version=1)], "b1")
    second = to_bronze_rows([mcl(URN, "globalTags", tags("b"), version=2)], "b2", batch_index=1)
    first_df = bronze_df(spark, first)
    state_columns = table_spec("silver.aspect_state").column_names

    def state_after(batch_df, pre_state_df):
        seq_df = to_sequenced_batch(batch_df, pre_state_df)
        return to_state_rows(seq_df, to_entity_status(seq_df, pre_state_df)).withColumn("updated_at", F.current_timestamp()).select(*state_columns)

    state_b1_df = state_after(first_df, to_empty_state(first_df))
    # The state after b2 holds only b2's row: b1's row and its JSON live on through prev_* and bronze.
    state_b2_df = state_after(bronze_df(spark, second), to_pre_batch_state(state_b1_df, "b2", first_df.limit(0)))
    assert state_b2_df.select("prev_batch_id", "prev_record_hash").collect()[0] == (
        "b1",
        first[0]["record_hash"],
    )

    reverted = to_pre_batch_state(state_b2_df, "b2", bronze_df(spark, first + second)).collect()
    assert [(r.batch_id, r.version, json.loads(r.aspect_json)) for r in reverted] == [("b1", 1, tags("a"))]
    assert to_pre_batch_state(state_b1_df, "b1", first_df).count() == 0  # b1 inserted its row: nothing before


@pytest.mark.pure
def test_the_current_state_applies_logged_rows_as_a_merge_of_each_batch_in_turn_would(pure_spark):
    state_df, log_df, expected_df = logged_state(pure_spark)
    current_df = to_current_state(state_df, log_df)
    assert current_df.columns == state_df.columns
    assert_df_equality(
        current_df.select(*expected_df.columns), expected_df, ignore_row_order=True, ignore_nullable=True
    )
