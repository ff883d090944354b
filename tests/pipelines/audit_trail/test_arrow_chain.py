"""Chain links appended with delta-rs by processes without a session, as the API's workers append them."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from conf.tables import table_location
from gold.audit_chain import GENESIS_DIGEST, first_broken_link, new_link
from pipelines.audit_trail.arrow_chain import ArrowChainLinker
from pipelines.audit_trail.chain_keys import CHAIN_TABLE, chain_key
from pipelines.serving.access_log import arrow_schema
from tests.conftest import make_settings


def _batch(access_id: str) -> pa.Table:
    return pa.Table.from_pylist([{"access_id": access_id, "method": "POST", "status": 200}], schema=arrow_schema())


def test_linkers_taking_turns_each_link_onto_the_head_the_other_wrote(tmp_path):
    settings = make_settings(tmp_path)
    first, second = ArrowChainLinker(settings), ArrowChainLinker(settings)
    written = [(first if turn % 2 == 0 else second).link("ops.access_log", f"b-{turn}", _batch(f"a-{turn}"), turn)
               for turn in range(7)]  # fmt: skip
    links = sorted(DeltaTable(str(table_location(settings, CHAIN_TABLE))).to_pyarrow_table().to_pylist(), key=lambda link: link["seq"])
    assert [link["seq"] for link in links] == list(range(7))
    assert [link["batch_id"] for link in links] == [f"b-{turn}" for turn in range(7)]
    assert links[0]["prev_digest"] == GENESIS_DIGEST
    assert all(later["prev_digest"] == earlier["link_digest"] for earlier, later in zip(links, links[1:], strict=False))
    assert first_broken_link(links, chain_key(settings)) is None
    assert [link["link_digest"] for link in written] == [link["link_digest"] for link in links]


def test_the_engine_and_the_session_free_linker_both_put_the_next_link_after_the_greatest_seq(spark, tmp_path):
    from deltalake import write_deltalake

    from pipelines.batch.audit_chain import head_digest, link_batches
    from pipelines.serving.report import chain_head
    from tests.conftest import register_fresh_tables

    settings = make_settings(tmp_path)
    register_fresh_tables(spark, settings)
    location = str(table_location(settings, CHAIN_TABLE))
    linker = ArrowChainLinker(settings)
    for turn in range(2):
        linker.link("ops.access_log", f"b-{turn}", _batch(f"a-{turn}"), turn)
    written = DeltaTable(location).to_pyarrow_table()
    # A link with seq 3 after seq 1: three links, the greatest seq 3, so len(chain) and max(seq) + 1 differ.
    last = max(written.to_pylist(), key=lambda link: link["seq"])
    gap = new_link(3, "ops.access_log", "b-3", 3, 1, last["batch_digest"], last["link_digest"], 0, chain_key(settings))
    write_deltalake(location, pa.Table.from_pylist([gap], schema=written.schema), mode="append")
    access_rows = pa.Table.from_pylist([{"access_id": "a-engine", "method": "GET", "status": 200, "batch_id": "b-engine"}],
                                       schema=arrow_schema())  # fmt: skip
    write_deltalake(str(table_location(settings, "ops.access_log")), access_rows, mode="append")

    assert link_batches(spark, settings, ["ops.access_log"], ["b-engine"], appended=True) == 1
    ArrowChainLinker(settings).link("ops.access_log", "b-arrow", _batch("a-arrow"), 5)

    links = sorted(DeltaTable(location).to_pyarrow_table().to_pylist(), key=lambda link: link["seq"])
    assert [(link["seq"], link["batch_id"]) for link in links] == [(0, "b-0"), (1, "b-1"), (3, "b-3"), (4, "b-engine"), (5, "b-arrow")]
    assert links[3]["prev_digest"] == links[2]["link_digest"]
    assert head_digest(spark, settings) == chain_head(settings) == links[-1]["link_digest"]
