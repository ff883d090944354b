"""Searches over the compacted layout: days sorted by time in small row groups, page rows read by row group."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest

from conf.errors import InputError
from gold.scroll_ids import ScrollSigner
from gold.search_request import SearchRequest
from pipelines.batch.publish_audit import optimize_audit_events, publish_audit
from pipelines.serving.engine import InProcessEngine, SparkEngine
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

NOW = int(time.time() * 1000)
MINUTE = 60_000
ROW_GROUP_ROWS = 4
ACTORS = ("urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:carol")
# 40 events half an hour apart, the newest 5 minutes ago; two more at the time of event 5.
TIMES = [NOW - 5 * MINUTE - i * 30 * MINUTE for i in range(40)]


def _history() -> list[dict]:
    rows = [usage_event("LogInEvent" if i % 2 else "FailedLogInEvent", ACTORS[i % 3], ts, "lay-1", trace_id=f"t{i}")
            for i, ts in enumerate(TIMES)]  # fmt: skip
    rows += [usage_event("CreateUserEvent", actor, TIMES[5], "lay-1") for actor in ACTORS[:2]]
    return rows


@pytest.fixture(scope="module")
def engines(spark, lakehouse):
    land_refined_batch(spark, lakehouse, "lay-1", usage=_history())
    publish_audit(spark, lakehouse)
    optimize_audit_events(spark, lakehouse, row_group_rows=ROW_GROUP_ROWS)
    return {"inprocess": InProcessEngine(lakehouse), "spark": SparkEngine(lakehouse, spark)}


SIGNER = ScrollSigner(b"k" * 32)


def _search(engine, params=None, body=None):
    return engine.search(SearchRequest.parse(params or {}, body, signer=SIGNER), now_ms=NOW)


def test_compaction_sorts_each_day_by_time_into_small_row_groups(engines):
    snapshot = engines["inprocess"].snapshots.latest()
    assert sum(len(f.index.row_group_starts) for f in snapshot.files) >= 42 // ROW_GROUP_ROWS
    for data_file in snapshot.files:
        footer = pq.read_metadata(data_file.path)
        assert all(footer.row_group(g).num_rows <= ROW_GROUP_ROWS for g in range(footer.num_row_groups))
        times = pq.read_table(data_file.path, columns=["timestamp"]).column(0).to_pylist()
        assert times == sorted(times)
        column = footer.schema.names.index("timestamp")
        assert "DELTA_BINARY_PACKED" in footer.row_group(0).column(column).encodings
    assert sum(f.index.size for f in snapshot.files) == 42


def test_optimize_refuses_a_row_group_size_below_one(spark, lakehouse, engines):
    with pytest.raises(InputError, match="row_group_rows: 0"):
        optimize_audit_events(spark, lakehouse, row_group_rows=0)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, 42),  # the default window (the last day) holds all of them
        ({"startTime": TIMES[10], "endTime": TIMES[3] + 1}, 10),  # events 3..10, plus the two at event 5's time
        ({"startTime": TIMES[10] + 1, "endTime": TIMES[3]}, 8),  # events 4..9 plus the two: both edges exclusive
        ({"startTime": TIMES[5], "endTime": TIMES[5] + 1}, 3),  # one instant inside one span
        ({"startTime": TIMES[39], "endTime": TIMES[0] + 1}, 42),
        ({"startTime": TIMES[0] + 1, "endTime": NOW + 1}, 0),  # after the newest event
        ({"startTime": TIMES[20] - 1, "endTime": TIMES[20]}, 0),  # 1 ms just before an event
    ],
)
def test_unfiltered_totals_are_exact_wherever_the_window_cuts_the_row_groups(engines, params, expected):
    for engine in engines.values():
        result = _search(engine, {**params, "size": 10000})
        assert (result["total"], result["count"]) == (expected, expected), engine.name


def test_page_rows_are_read_from_the_row_groups_that_hold_them_and_cached(engines):
    engine = engines["inprocess"]
    first = _search(engine, {"startTime": TIMES[12], "endTime": TIMES[9] + 1, "includeRaw": "false"})
    assert [e["timestamp"] for e in first["usageEvents"]] == [TIMES[9], TIMES[10], TIMES[11], TIMES[12]]
    cached = engine.rows.bytes
    assert cached > 0
    again = _search(engine, {"startTime": TIMES[12], "endTime": TIMES[9] + 1, "includeRaw": "false"})
    assert again == first and engine.rows.bytes == cached


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"startTime": TIMES[30] + 7, "endTime": TIMES[2] - 3, "includeRaw": "false"},
        {"startTime": TIMES[10], "endTime": TIMES[3] + 1},
    ],
)
def test_pages_read_by_row_group_match_spark_page_by_page(engines, params):
    single = _search(engines["spark"], {**params, "size": 10000})
    for size in (1, 3, 4, 10):
        events, scroll, totals = [], None, set()
        while True:
            page = _search(engines["inprocess"], {**params, "size": size, **({"scrollId": scroll} if scroll else {})})
            events += page["usageEvents"]
            totals.add(page["total"])
            scroll = page.get("nextScrollId")
            if scroll is None:
                break
        assert events == single["usageEvents"] and totals == {single["total"]}, size
    assert single["total"] > 0


def test_filtered_searches_agree_with_spark(engines):
    bodies = ({"actorUrns": [ACTORS[1]]}, {"eventTypes": ["CreateUserEvent"]},
              {"eventTypes": ["LogInEvent"], "actorUrns": [ACTORS[0]]})  # fmt: skip
    for body in bodies:
        params = {"startTime": TIMES[25] + 1, "endTime": NOW, "size": 10000}
        assert _search(engines["inprocess"], params, body) == _search(engines["spark"], params, body), body
