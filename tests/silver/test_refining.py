"""One batch refined by the one composition of the silver steps (silver.refining.refine_batch)."""

from __future__ import annotations

from silver.refining import refine_batch
from silver.state import to_empty_state
from tests.silver.bronze_rows import bronze_df, mcl, to_bronze_rows
from tests.silver.test_patching import URN, T, add_tag, patch, tags


def test_a_patch_in_the_batch_is_applied_before_the_events_and_the_state(spark):
    records = [mcl(URN, "globalTags", tags("a"), version=None, time=T), patch(URN, add_tag("b"), T + 1)]
    batch_df = bronze_df(spark, to_bronze_rows(records, "b1"))
    staged = []

    refined = refine_batch(batch_df, to_empty_state(batch_df), "OWNER", stage=lambda df, step: staged.append(step) or df)

    assert refined.patched and staged == ["sequenced", "patched", "schema_fields", "events", "skipped", "entity_status"]
    events = {(e.category, e.operation, e.modifier) for e in refined.events_df.collect()}
    assert events == {("TAG", "ADD", "urn:li:tag:a"), ("TAG", "ADD", "urn:li:tag:b")}
    (state_row,) = refined.state_rows_df.collect()
    assert '"urn:li:tag:b"' in state_row.aspect_json and state_row.change_type == "PATCH"


def test_a_batch_without_patches_skips_the_patch_step(spark):
    batch_df = bronze_df(spark, to_bronze_rows([mcl(URN, "globalTags", tags("a"), time=T)], "b1"))
    staged = []

    refined = refine_batch(batch_df, to_empty_state(batch_df), "OWNER", stage=lambda df, step: staged.append(step) or df)

    assert not refined.patched and "patched" not in staged
    assert [(e.category, e.operation, e.modifier) for e in refined.events_df.collect()] == [("TAG", "ADD", "urn:li:tag:a")]
