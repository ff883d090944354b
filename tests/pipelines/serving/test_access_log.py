"""An access record's filters as stored: whole when they fit, else cut, always valid JSON within the limit."""

from __future__ import annotations

import json

import pytest

from pipelines.serving.access_log import MAX_FILTER_CHARS, SCOPE_KEY, TRUNCATED_KEY, filters_json, outcome_of

SCOPE = ["domain=urn:li:domain:finance"]


def test_filters_that_fit_are_stored_whole():
    filters = {"urn": "urn:li:dataset:(urn:li:dataPlatform:hive,db.t,PROD)", "at": 1700000000000, SCOPE_KEY: SCOPE}
    assert json.loads(filters_json(filters)) == filters


@pytest.mark.parametrize(
    "filters",
    [
        {"actorUrns": ["urn:li:corpuser:" + "x" * 1000] * 8},
        {"actorUrns": ["u"] * 5000},  # many short values
        {"nested": {f"k{i}": "v" * 300 for i in range(100)}},
        {"actorUrns": ["a" * 10_000], "entityTypes": ["b" * 10_000], "aspectTypes": ["c" * 10_000]},
        {f"key{i}-{'k' * 200}": i for i in range(100)},  # long keys: only the marker fits
    ],
)
def test_too_large_filters_are_cut_to_valid_json_with_a_marker_and_the_scope_kept(filters):
    whole = json.dumps({**filters, SCOPE_KEY: SCOPE}, sort_keys=True, ensure_ascii=False)
    stored = filters_json({**filters, SCOPE_KEY: SCOPE})
    assert len(stored) <= MAX_FILTER_CHARS
    parsed = json.loads(stored)
    assert parsed[TRUNCATED_KEY] == len(whole) and parsed[SCOPE_KEY] == SCOPE


def test_a_scope_too_long_to_keep_is_dropped_never_cut():
    scope = [f"domain=urn:li:domain:{'d' * 100}{i}" for i in range(100)]
    parsed = json.loads(filters_json({SCOPE_KEY: scope, "urn": "u"}))
    assert SCOPE_KEY not in parsed and TRUNCATED_KEY in parsed


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "ok"), (204, "ok"), (307, "redirect"), (301, "redirect"), (401, "refused"), (403, "refused"),
     (404, "invalid"), (429, "busy"), (503, "busy"), (500, "error")],
)
def test_the_outcome_of_each_status(status, outcome):
    assert outcome_of(status) == outcome
