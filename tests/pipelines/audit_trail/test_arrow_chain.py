"""Chain links appended with delta-rs by processes without a session, as the API's workers append them."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from conf.tables import table_location
from gold.audit_chain import GENESIS_DIGEST, first_broken_link
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
