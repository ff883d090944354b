"""Audit search: request validation, the sqlglot query, scroll ids and response shaping."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import sqlglot
from sqlglot import exp

from conf.errors import RequestError
from conf.values import DAY_MS
from gold.scroll_ids import ScrollKey, ScrollSigner, decode_scroll_id, encode_scroll_id, query_binding
from gold.search import (
    build_histogram_sql,
    build_search_sql,
    choose_since,
    page_upper_bound,
    to_page,
    to_response,
)
from gold.search_request import SearchRequest

NOW = 1_700_000_000_000
INJECTIONS = [
    "x' OR '1'='1",
    "x\\' OR 1=1 --",
    "'; DROP TABLE gold.audit_events; --",
    "\\",
    "a\\'b",
    "urn:li:corpuser:o'brien",
    '") OR ("1"="1',
    "%",
    "${jndi:ldap://x}",
]
FILTER_KEYS = ["entityTypes", "aspectTypes", "actorUrns"]
SIGNER = ScrollSigner(b"k" * 32, principal="tok1")
BINDING = SearchRequest.parse({}, None).binding


def _scrolled(key: ScrollKey, params: dict | None = None) -> SearchRequest:
    """The request for the page after `key`, with the scroll id the server signed for `params`."""
    params = params or {}
    scroll_id = encode_scroll_id(key, SIGNER, SearchRequest.parse(params).binding)
    return SearchRequest.parse({**params, "scrollId": scroll_id}, signer=SIGNER)


# -- request validation -----------------------------------------------------------------------------


def test_defaults_give_the_last_day_and_ten_results_with_raw():
    request = SearchRequest.parse({}, None)
    assert (request.start_time, request.end_time, request.size, request.include_raw) == (-1, -1, 10, True)
    assert request.scroll_id is None and request.event_types == () and request.actor_urns == ()
    resolved = request.with_window(NOW)
    assert (resolved.start_time, resolved.end_time) == (NOW - DAY_MS, NOW)


def test_query_values_come_as_text_or_numbers():
    request = SearchRequest.parse(
        {"startTime": "1000", "endTime": 5000, "size": "25", "includeRaw": "false", "other": "ignored"},
        {"eventTypes": ["LogInEvent"], "actorUrns": ["urn:li:corpuser:a", "urn:li:corpuser:a"]},
    )
    assert (request.start_time, request.end_time, request.size, request.include_raw) == (1000, 5000, 25, False)
    assert request.event_types == ("LogInEvent",)
    assert request.actor_urns == ("urn:li:corpuser:a",)


def test_only_end_time_gives_the_day_before_it():
    resolved = SearchRequest.parse({"endTime": "5000000000"}).with_window(NOW)
    assert (resolved.start_time, resolved.end_time) == (5_000_000_000 - DAY_MS, 5_000_000_000)


@pytest.mark.parametrize(
    ("params", "body", "named"),
    [
        ({"size": "0"}, None, "size: 0 is out of range"),
        ({"size": 10001}, None, "size: 10001 is out of range"),
        ({"size": "ten"}, None, "size: 'ten'"),
        ({"size": True}, None, "size: True"),
        ({"startTime": "20", "endTime": "10"}, None, "startTime: 20 is after endTime 10"),
        ({"startTime": "-5"}, None, "startTime: -5"),
        ({"endTime": "soon"}, None, "endTime: 'soon'"),
        ({"size": "--5"}, None, "size: '--5' is not a whole number"),
        ({"startTime": "--1"}, None, "startTime: '--1' is not a whole number"),
        ({"endTime": "\u00b2"}, None, "endTime: '\u00b2' is not a whole number"),
        ({"includeRaw": "maybe"}, None, "includeRaw: 'maybe'"),
        ({}, {"eventTypes": ["LoginEvent"]}, "unknown event type(s) ['LoginEvent']"),
        ({}, ["LogInEvent"], "body: expected a JSON object"),
        ({}, "x", "body: expected a JSON object"),
        ({}, {"eventTypes": "LogInEvent"}, "body.eventTypes: expected a list of strings"),
        ({}, {"actorUrns": [1]}, "body.actorUrns[0]: expected a string"),
        ({}, {"entityTypes": [{"a": 1}]}, "body.entityTypes[0]: expected a string"),
        ({}, {"actorUrn": ["urn:li:corpuser:a"]}, "body: unknown field(s) ['actorUrn']"),
        ({"scrollId": "not-a-scroll-id"}, None, "scrollId: 'not-a-scroll-id' is not a valid scroll id"),
    ],
)
def test_bad_requests_name_the_problem(params, body, named):
    with pytest.raises(RequestError) as caught:
        SearchRequest.parse(params, body)
    assert named in str(caught.value)


def test_start_after_end_is_also_caught_once_the_window_is_resolved():
    request = SearchRequest.parse({"startTime": str(NOW + 1)})
    with pytest.raises(RequestError, match="startTime"):
        request.with_window(NOW)


# -- scroll ids -------------------------------------------------------------------------------------


def test_scroll_id_round_trips_and_is_opaque():
    key = ScrollKey(1_699_999_999_000, "LogInEvent", "urn:li:corpuser:o'brien", "ab" * 32, NOW - DAY_MS, NOW)
    scroll_id = encode_scroll_id(key, SIGNER, BINDING)
    assert decode_scroll_id(scroll_id, SIGNER, BINDING) == key
    assert "corpuser" not in scroll_id and set(scroll_id) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )


def _unkeyed_scroll_id(fields) -> str:
    """A scroll id with the unkeyed checksum of earlier versions: what anyone can build."""
    payload = json.dumps(fields, separators=(",", ":"))
    check = hashlib.sha256(payload.encode()).hexdigest()[:32]
    return base64.urlsafe_b64encode(f"{payload}|{check}".encode()).decode()


def test_a_scroll_id_with_a_recomputed_checksum_is_rejected():
    with pytest.raises(RequestError, match="scrollId"):
        decode_scroll_id(_unkeyed_scroll_id([3, 5, "LogInEvent", "a", "id", 0, 10, 3]), SIGNER, BINDING)


@pytest.mark.parametrize(
    ("signer", "binding"),
    [
        (ScrollSigner(b"k" * 32, principal="tok2"), BINDING),  # another caller
        (ScrollSigner(b"j" * 32, principal="tok1"), BINDING),  # another server key
        (SIGNER, query_binding({"actor_urns": ("a",)}, 10, True)),  # other filters
        (SIGNER, SearchRequest.parse({"size": "11"}).binding),  # another size
        (SIGNER, SearchRequest.parse({"includeRaw": "false"}).binding),  # without raw events
        (None, BINDING),  # a server without a key
    ],
)
def test_a_scroll_id_is_bound_to_its_key_caller_and_query(signer, binding):
    scroll_id = encode_scroll_id(ScrollKey(5, "LogInEvent", "a", "id", 0, 10, table_version=3), SIGNER, BINDING)
    with pytest.raises(RequestError, match="not a valid scroll id for this caller and query"):
        decode_scroll_id(scroll_id, signer, binding)


def test_the_binding_ignores_filter_order_and_repeats():
    body = {"actorUrns": ["b", "a", "a"], "eventTypes": ["LogInEvent"]}
    same = {"eventTypes": ["LogInEvent"], "actorUrns": ["a", "b"]}
    assert SearchRequest.parse({}, body).binding == SearchRequest.parse({}, same).binding


@pytest.mark.parametrize(
    "fields",
    [
        5,
        None,
        {"timestamp": 5},
        [3, 5, "LogInEvent", "a", "id", 0, 10],
        [3, 5, "LogInEvent", "a", "id", 0, 10, 3, "extra"],
        [2, 5, "LogInEvent", "a", "id", 0, 10, 3],
        [3, 10**26, "LogInEvent", "a", "id", 0, 10, 3],
        [3, 5, "LogInEvent", "a", "id", -7, 10, 3],
        [3, 5, "LogInEvent", "a", "id", 0, 10**26, 3],
        [3, 5, "LogInEvent", "a", "id", 0, 10, -2],
        [3, 5, "LogInEvent", "a", "id", 0, 10, "3"],
        [3, 5, "LogInEvent", "a", "id", 0, 10, 1.5],
    ],
)
def test_a_signed_scroll_id_of_the_wrong_shape_is_rejected(fields):
    payload = json.dumps(fields, separators=(",", ":"))
    signed = base64.urlsafe_b64encode(f"{payload}|{SIGNER.tag(payload, BINDING)}".encode()).decode()
    with pytest.raises(RequestError, match="scrollId"):
        decode_scroll_id(signed, SIGNER, BINDING)


@pytest.mark.parametrize("mangle", ["flip", "truncate", "not-base64", "no-checksum", "bad-json"])
def test_a_tampered_scroll_id_does_not_decode(mangle):
    good = encode_scroll_id(ScrollKey(5, "LogInEvent", "a", "id", 0, 10), SIGNER, BINDING)
    if mangle == "flip":
        text = base64.urlsafe_b64decode(good + "==").decode().replace('"a"', '"b"')
        bad = base64.urlsafe_b64encode(text.encode()).decode()
    elif mangle == "truncate":
        bad = good[:-6]
    elif mangle == "not-base64":
        bad = "%%%***"
    elif mangle == "no-checksum":
        bad = base64.urlsafe_b64encode(b'[3,5,"LogInEvent","a","id",0,10,3]').decode()
    else:
        bad = base64.urlsafe_b64encode(b"{not json|0123456789abcdef").decode()
    with pytest.raises(RequestError, match="scrollId"):
        decode_scroll_id(bad, SIGNER, BINDING)


def test_later_pages_keep_the_window_of_the_first_and_refuse_another():
    key = ScrollKey(900, "LogInEvent", "a", "id", 100, 1000)
    request = SearchRequest.parse({"scrollId": encode_scroll_id(key, SIGNER, BINDING)}, signer=SIGNER)
    assert (request.start_time, request.end_time) == (100, 1000)
    assert request.with_window(NOW).end_time == 1000
    again = SearchRequest.parse({"scrollId": request.scroll_id, "startTime": "100", "endTime": "1000"}, signer=SIGNER)
    assert again.scroll == key
    with pytest.raises(RequestError, match="endTime: 2000 is not the window of the scrollId"):
        SearchRequest.parse({"scrollId": request.scroll_id, "endTime": "2000"}, signer=SIGNER)


# -- the query --------------------------------------------------------------------------------------


def _where_literals(sql: str) -> list[str]:
    tree = sqlglot.parse_one(sql, read="spark")
    return [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string]


@pytest.mark.parametrize("key", FILTER_KEYS)
@pytest.mark.parametrize("value", INJECTIONS)
def test_filter_values_stay_string_literals(key, value):
    request = SearchRequest.parse({"startTime": "0", "endTime": str(NOW)}, {key: [value]})
    for sql in (build_search_sql(request, "gold.audit_events", NOW), build_histogram_sql(request, "gold.audit_events", NOW)):
        tree = sqlglot.parse_one(sql, read="spark")
        assert _where_literals(sql).count(value) == 1
        assert not list(tree.find_all(exp.Or)) and not list(tree.find_all(exp.Drop))
        assert len(list(tree.find_all(exp.In))) == 1
        assert [t.name for t in tree.find_all(exp.Table)] == ["audit_events"]


def test_injection_in_a_scroll_key_stays_literal():
    key = ScrollKey(5, "LogInEvent", "x' OR '1'='1", "id' --", 0, 10)
    sql = build_search_sql(_scrolled(key), "t", NOW)
    literals = _where_literals(sql)
    assert "x' OR '1'='1" in literals and "id' --" in literals


def test_the_query_bounds_partitions_and_the_window():
    request = SearchRequest.parse({"startTime": "86400000", "endTime": "172800001"})
    sql = build_search_sql(request, "g.a", NOW)
    assert "event_date >= CAST('1970-01-02' AS DATE)" in sql and "event_date <= CAST('1970-01-03' AS DATE)" in sql
    assert "timestamp >= 86400000" in sql and "timestamp < 172800001" in sql
    assert "raw_event" in sql and "LIMIT 10" in sql
    assert "raw_event" not in build_search_sql(SearchRequest.parse({"includeRaw": "false"}), "g.a", NOW)
    sliced = build_search_sql(request, "g.a", NOW, since_ms=172_000_000)
    assert "timestamp >= 172000000" in sliced and "event_date >= CAST('1970-01-02' AS DATE)" in sliced
    assert "timestamp >= 86400000" in build_search_sql(request, "g.a", NOW, since_ms=5)  # never before the start
    histogram = build_histogram_sql(request, "g.a", NOW)
    assert "ORDER BY" not in histogram and "COUNT(*) AS n" in histogram and "timestamp < 172800001" in histogram


def test_the_slice_holds_the_page_from_the_upper_bound_down():
    request = SearchRequest.parse({"startTime": "0", "endTime": "1280", "size": "5"})  # 128 buckets of 10 ms
    assert choose_since({127: 9, 100: 1}, request, NOW) == 1270
    assert choose_since({127: 3, 0: 5}, request, NOW) is None  # needs the window's first bucket: no slice
    assert choose_since({126: 2, 120: 2, 90: 1, 3: 7}, request, NOW) == 900
    assert choose_since({126: 2, 120: 2, 3: 7}, request, NOW) == 30
    assert choose_since({10: 2}, request, NOW) is None
    key = ScrollKey(905, "LogInEvent", "a", "id", 0, 1280)
    paged = _scrolled(key, {"size": "5"})
    assert page_upper_bound(paged, NOW) == 906
    assert choose_since({90: 50, 89: 3, 88: 2}, paged, NOW) == 880  # bucket 90 holds the key: counted as 0


def test_page_upper_bound_follows_the_scroll_key():
    assert page_upper_bound(SearchRequest.parse({}), NOW) == NOW
    key = ScrollKey(NOW - 50, "LogInEvent", "a", "id", NOW - DAY_MS, NOW)
    assert page_upper_bound(_scrolled(key), NOW + 999) == NOW - 49


# -- the response -----------------------------------------------------------------------------------


def _row(event_type: str, timestamp: int, **extra) -> dict:
    row = {
        "event_id": f"id-{timestamp}",
        "event_type": event_type,
        "timestamp": timestamp,
        "actor_urn": "urn:li:corpuser:a",
        "source_ip": "10.0.0.1",
        "event_source": "GRAPHQL",
        "user_agent": "Mozilla/5.0",
        "telemetry_trace_id": "t-1",
        "entity_urn": None,
        "entity_type": None,
        "aspect_name": None,
        "login_source": None,
        "raw_event": json.dumps({"type": event_type, "timestamp": timestamp}),
        "total": 7,
    }
    row.update(extra)
    return row


def test_response_shapes_login_and_entity_events():
    rows = [
        _row("LogInEvent", 3, login_source="PASSWORD_LOGIN"),
        _row("UpdateAspectEvent", 2, entity_urn="urn:li:dataset:x", entity_type="dataset", aspect_name="ownership"),
    ]
    request = SearchRequest.parse({"size": "5"}).with_window(NOW)
    response = to_response(rows, 7, request)
    assert response["count"] == 2 and response["total"] == 7 and "nextScrollId" not in response
    login, update = response["usageEvents"]
    common = {"eventType", "timestamp", "actorUrn", "sourceIP", "eventSource", "userAgent", "telemetryTraceId"}
    assert set(login) == common | {"loginSource", "rawUsageEvent"}
    assert login["loginSource"] == "PASSWORD_LOGIN" and login["telemetryTraceId"] == "t-1"
    assert set(update) == common | {"entityUrn", "entityType", "aspectName", "rawUsageEvent"}
    assert (update["entityUrn"], update["entityType"], update["aspectName"]) == ("urn:li:dataset:x", "dataset", "ownership")
    assert update["rawUsageEvent"] == {"type": "UpdateAspectEvent", "timestamp": 2}


@pytest.mark.parametrize(
    "raw",
    ['{"type": "LogInEvent", "n": 123456789012345678901234567890}', '{"x": NaN}', '{"s": "\\ud800"}',
     '{"nested": [1, 2.5, {"a": null}], "u": "caf\u00e9"}', "not json", "[1, 2"],
)
def test_a_raw_event_is_the_standard_librarys_document_or_its_text(raw):
    request = SearchRequest.parse({"size": "5"}).with_window(NOW)
    (event,) = to_response([_row("LogInEvent", 3, raw_event=raw)], 1, request)["usageEvents"]
    try:
        expected = json.loads(raw)
    except ValueError:
        expected = raw
    assert repr(event["rawUsageEvent"]) == repr(expected)  # repr: NaN is not equal to itself


def test_response_without_raw_and_with_a_full_page():
    request = SearchRequest.parse({"size": "2", "includeRaw": "false"}, signer=SIGNER).with_window(NOW)
    response = to_response([_row("LogInEvent", 3), _row("FailedLogInEvent", 2)], 9, request)
    assert all("rawUsageEvent" not in e for e in response["usageEvents"])
    key = decode_scroll_id(response["nextScrollId"], SIGNER, request.binding)
    assert (key.timestamp, key.event_type, key.event_id) == (2, "FailedLogInEvent", "id-2")
    assert (key.start_time, key.end_time) == (NOW - DAY_MS, NOW)


def test_empty_page_has_a_total_and_no_scroll():
    empty = _row("LogInEvent", 1, event_id=None)
    response = to_response([empty], 0, SearchRequest.parse({"size": "1"}).with_window(NOW))
    assert response == {"count": 0, "total": 0, "usageEvents": []}


def test_a_page_of_rows_already_read_follows_the_sql_order_and_the_scroll_key():
    def row(ts, event_type, actor, event_id):
        return {"timestamp": ts, "event_type": event_type, "actor_urn": actor, "event_id": event_id}

    rows = [row(5, "LogInEvent", "b", "2"), row(9, "LogInEvent", "a", "9"), row(5, "LogInEvent", None, "3"),
            row(5, "FailedLogInEvent", "z", "4"), row(5, "LogInEvent", "b", "1"), row(1, "LogInEvent", "a", "0")]  # fmt: skip
    # Newest first; at one time by event type, then actor (null first, as ""), then event id.
    expected = ["9", "4", "3", "1", "2", "0"]
    request = SearchRequest.parse({"size": "10"}).with_window(NOW)
    assert [r["event_id"] for r in to_page(rows, request)] == expected
    assert [r["event_id"] for r in to_page(rows, SearchRequest.parse({"size": "2"}))] == expected[:2]
    after = _scrolled(ScrollKey(5, "LogInEvent", "", "3", NOW - DAY_MS, NOW), {"size": "10"})
    assert [r["event_id"] for r in to_page(rows, after)] == ["1", "2", "0"]
