"""The two serving engines (in-process DuckDB over delta-rs, and Spark SQL) answer every search alike."""

from __future__ import annotations

import itertools
import time

import pytest

from gold.scroll_ids import ScrollSigner
from gold.search_request import SearchRequest
from pipelines.batch.publish_audit import publish_audit
from pipelines.serving.engine import InProcessEngine, SparkEngine, open_engine
from tests.pipelines.audit_inputs import land_refined_batch, usage_event

NOW = int(time.time() * 1000)
MINUTE = 60_000
HOUR = 60 * MINUTE
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
DASHBOARD = "urn:li:dashboard:(looker,sales)"
ALICE, BOB, TRICKY = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:o'brien"
TIE = NOW - 2 * HOUR


def _history() -> list[dict]:
    """60 events 45 minutes apart (newest 10 minutes ago), cycling actors and kinds, plus 3 at one instant."""
    rows = []
    for i in range(60):
        actor = (ALICE, BOB, TRICKY)[i % 3]
        ts = NOW - 10 * MINUTE - i * 45 * MINUTE
        kind = i % 4
        if kind == 0:
            rows.append(usage_event("LogInEvent", actor, ts, "eq-1", login_source="passwordLogin", trace_id=f"t{i}"))
        elif kind == 1:
            rows.append(usage_event("FailedLogInEvent", actor, ts, "eq-1", login_source="SSO_LOGIN"))
        elif kind == 2:
            rows.append(usage_event("EntityEvent", actor, ts, "eq-1", entity_urn=DASHBOARD, entity_type="dashboard",
                                    aspect_name="dashboardInfo"))  # fmt: skip
        else:
            rows.append(usage_event("UpdateAspectEvent", actor, ts, "eq-1", entity_urn=DATASET, entity_type="dataset",
                                    aspect_name="ownership"))  # fmt: skip
    rows += [usage_event("LogInEvent", a, TIE, "eq-1") for a in (BOB, ALICE)]
    rows.append(usage_event("EntityEvent", ALICE, TIE, "eq-1", entity_urn=DATASET, entity_type="dataset"))
    return rows


@pytest.fixture(scope="module")
def engines(spark, lakehouse):
    land_refined_batch(spark, lakehouse, "eq-1", usage=_history())
    publish_audit(spark, lakehouse)
    return {"inprocess": InProcessEngine(lakehouse), "spark": SparkEngine(lakehouse, spark)}


SIGNER = ScrollSigner(b"k" * 32)


def _search(engine, params=None, body=None):
    return engine.search(SearchRequest.parse(params or {}, body, signer=SIGNER), now_ms=NOW)


def _without_scroll(result):
    return {k: v for k, v in result.items() if k != "nextScrollId"}


def _page_through(engine, params, body, size):
    events, scroll, totals = [], None, set()
    while True:
        result = _search(engine, {**params, "size": size, **({"scrollId": scroll} if scroll else {})}, body)
        events += result["usageEvents"]
        totals.add(result["total"])
        scroll = result.get("nextScrollId")
        if scroll is None:
            return events, totals


@pytest.mark.parametrize(
    ("params", "body", "expected"),
    [
        ({}, {}, 35),  # events 0..31 are within the last day (10 + 45 * 31 < 1440 minutes), plus the 3 ties
        ({}, {"actorUrns": [ALICE]}, 13),  # i % 3 == 0 for i <= 31: 11, plus 2 ties
        ({}, {"eventTypes": ["LogInEvent"]}, 10),  # i % 4 == 0 for i <= 31: 8, plus 2 ties
        ({}, {"actorUrns": [ALICE], "eventTypes": ["LogInEvent"]}, 4),  # i = 0, 12, 24, plus 1 tie
        ({"startTime": 0, "endTime": NOW + 1}, {"entityTypes": ["dataset"]}, 16),  # i = 3, 7, ..., 59, plus 1 tie
        ({"startTime": TIE, "endTime": TIE + 1}, {}, 3),  # start inclusive: exactly the ties
        ({"startTime": TIE - 1, "endTime": TIE}, {}, 0),  # end exclusive: no event 1 ms before the ties
        ({"startTime": 0, "endTime": NOW + 1}, {"aspectTypes": ["dashboardInfo"], "actorUrns": [BOB, TRICKY]}, 10),
    ],
)
def test_hand_counted_totals_on_both_engines(engines, params, body, expected):
    for engine in engines.values():
        result = _search(engine, {**params, "size": 10000}, body)
        assert (result["total"], result["count"]) == (expected, expected), engine.name


def test_every_filter_combination_returns_the_same_rows_in_the_same_order(engines):
    windows = [{}, {"startTime": NOW - 30 * HOUR, "endTime": TIE}, {"startTime": 0, "endTime": NOW + 1}]
    combinations = itertools.product(
        windows,
        ([], [ALICE], [BOB, TRICKY]),
        ([], ["LogInEvent", "FailedLogInEvent"], ["UpdateAspectEvent", "EntityEvent"]),
        ([], ["dataset"]),
        ([], ["dashboardInfo"]),
    )
    nonempty = 0
    for index, (window, actors, event_types, entity_types, aspects) in enumerate(combinations):
        body = {"actorUrns": actors, "eventTypes": event_types, "entityTypes": entity_types, "aspectTypes": aspects}
        params = {**window, "size": 10000, "includeRaw": "true" if index % 2 else "false"}
        inprocess = _search(engines["inprocess"], params, body)
        spark = _search(engines["spark"], params, body)
        assert inprocess == spark, (window, body)
        nonempty += inprocess["total"] > 0
    assert nonempty >= 40  # the combinations are not all empty: they compare rows, not nothing


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({}, {}),
        ({"startTime": 0, "endTime": NOW + 1, "includeRaw": "false"}, {"actorUrns": [ALICE, TRICKY]}),
        ({"startTime": 0, "endTime": NOW + 1}, {"eventTypes": ["LogInEvent", "EntityEvent"]}),
    ],
)
def test_paging_to_the_end_matches_the_single_page_on_both_engines(engines, params, body):
    single = _without_scroll(_search(engines["spark"], {**params, "size": 10000}, body))
    for engine in engines.values():
        events, totals = _page_through(engine, params, body, size=4)
        assert events == single["usageEvents"] and totals == {single["total"]}, engine.name


def test_pages_and_scroll_ids_agree_except_the_pinned_version(engines):
    params = {"startTime": 0, "endTime": NOW + 1, "size": 7}
    first = {name: _search(engine, params) for name, engine in engines.items()}
    assert _without_scroll(first["inprocess"]) == _without_scroll(first["spark"])
    pinned = SearchRequest.parse({**params, "scrollId": first["inprocess"]["nextScrollId"]}, signer=SIGNER).scroll
    unpinned = SearchRequest.parse({**params, "scrollId": first["spark"]["nextScrollId"]}, signer=SIGNER).scroll
    assert pinned.table_version == engines["inprocess"].snapshots.latest().version and unpinned.table_version == -1
    assert (pinned.timestamp, pinned.event_id) == (unpinned.timestamp, unpinned.event_id)


def test_open_engine_follows_the_setting(spark, lakehouse, engines):
    import dataclasses

    spark_settings = dataclasses.replace(lakehouse, serve=dataclasses.replace(lakehouse.serve, engine="spark"))
    assert open_engine(spark_settings, spark).name == "spark"
    assert open_engine(lakehouse).name == "inprocess"
