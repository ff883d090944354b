"""Input kinds, kind detection and the streaming file-sink JSON array reader (pure Python)."""

from __future__ import annotations

import json

import pytest

from bronze.formats import (
    EMPTY,
    FILE_SINK,
    KINDS,
    MCL,
    MCP,
    USAGE,
    USAGE_EVENT_TYPES,
    check_kind,
    detect_kind,
    iter_json_array,
    to_json_line,
)
from conf.errors import InputError
from tests.conftest import FIXTURES

MCL_LINE = json.dumps({"entityUrn": "urn:li:corpuser:a", "aspectName": "status", "created": {"time": 1}})
MCP_LINE = json.dumps({"entityUrn": "urn:li:corpuser:a", "aspectName": "status", "changeType": "UPSERT"})
USAGE_LINE = json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1})


def chunks_of(text: str, size: int):
    return (text[i : i + size] for i in range(0, len(text), size))


def test_the_kinds_and_the_usage_event_types():
    assert KINDS == ("mcl", "mcp", "file-sink", "usage", "mce")
    # The 13 types of the audit search spec plus DeletePolicyEvent, each once.
    assert len(USAGE_EVENT_TYPES) == len(set(USAGE_EVENT_TYPES)) == 14
    assert {"LogInEvent", "FailedLogInEvent", "DeletePolicyEvent", "UpdateAspectEvent"} <= set(USAGE_EVENT_TYPES)


def test_check_kind_names_the_argument_and_the_value():
    assert check_kind(None) is None
    assert check_kind("mcp", "--kind") == "mcp"
    with pytest.raises(InputError, match=r"--kind: 'jsonl' is not one of mcl, mcp, file-sink, usage"):
        check_kind("jsonl", "--kind")


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([MCL_LINE], MCL),
        ([MCP_LINE], MCP),
        ([USAGE_LINE], USAGE),
        (["  [", "{", '"entityUrn": "x"'], FILE_SINK),
        (["\ufeff[]"], FILE_SINK),
        (["", "   ", "\n"], EMPTY),
        ([], EMPTY),
        # A malformed first record does not decide: the next good line does.
        (['{"entityUrn": "urn:li:corpuser:a", "creat', "not json", "[1, 2]", "{}", MCL_LINE], MCL),
        # A pretty-printed single JSON document (e.g. a manifest) reveals no kind.
        (["{", '  "generator": "x",', '  "files": []', "}"], None),
        (["hello", "world"], None),
    ],
)
def test_detect_kind_from_the_first_lines(lines, expected):
    assert detect_kind(lines) == expected


def test_detect_kind_on_the_fixture_files():
    for name, kind in (("mcl.jsonl", MCL), ("mcp.jsonl", MCP), ("file-sink.json", FILE_SINK)):
        with open(FIXTURES / f"history-small.{name}") as handle:
            assert detect_kind([handle.readline() for _ in range(5)]) == kind, name


def test_to_json_line_turns_the_file_sink_aspect_into_the_mcl_value_string():
    element = {
        "entityUrn": "urn:li:corpuser:a",
        "aspect": {"json": {"b": [1, {"c": "é"}], "a": None}},
        "systemMetadata": {"lastObserved": 5},
    }
    record = json.loads(to_json_line(element))
    # Key order and DataHub's default separators are kept: the text equals what json.dumps gives.
    assert record["aspect"] == {"value": '{"b": [1, {"c": "\\u00e9"}], "a": null}', "contentType": "application/json"}
    assert record["systemMetadata"] == {"lastObserved": 5}
    assert to_json_line([1, 2]) == "[1, 2]"
    assert json.loads(to_json_line({"aspect": {"value": "{}"}})) == {"aspect": {"value": "{}"}}


@pytest.mark.parametrize("chunk_size", [1, 7, 4096, 1 << 22])
def test_the_fixture_array_streams_in_any_chunk_size(chunk_size):
    text = (FIXTURES / "history-small.file-sink.json").read_text()
    items = list(iter_json_array(chunks_of(text, chunk_size), max_element_chars=1 << 20))
    assert len(items) == 362
    assert all(item.reason is None for item in items)
    # Each element's line is where its `{` stands in the file.
    lines = text.split("\n")
    assert all(lines[item.line - 1] == "{" for item in items)
    assert items[0].line == 2


def test_file_sink_aspects_equal_the_mcl_aspect_values_of_the_same_writes():
    text = (FIXTURES / "history-small.file-sink.json").read_text()
    sink = [json.loads(i.text) for i in iter_json_array(chunks_of(text, 4096), max_element_chars=1 << 20)]
    mcl = [json.loads(line) for line in (FIXTURES / "history-small.mcl.jsonl").read_text().splitlines()]
    mcl_values = {
        (r["entityUrn"], r["aspectName"], r["systemMetadata"]["lastObserved"]): r["aspect"]["value"]
        for r in mcl
        if "aspect" in r
    }
    assert len(sink) == len(mcl_values) == 362
    for record in sink:
        key = (record["entityUrn"], record["aspectName"], record["systemMetadata"]["lastObserved"])
        assert record["aspect"]["value"] == mcl_values[key]


def test_a_malformed_element_is_reported_and_reading_resumes_at_the_next_element():
    text = '[\n{\n    "a": 1,,\n    "b": 2\n},\n{\n    "a": 3\n},\n{"x": [1, 2\n'
    items = list(iter_json_array(chunks_of(text, 3), max_element_chars=1000))
    assert [(i.line, i.reason is None) for i in items] == [(2, False), (6, True), (9, False)]
    assert items[0].text == '{\n    "a": 1,,\n    "b": 2\n}'
    assert items[0].reason.startswith("record: malformed JSON in the file-sink array")
    assert items[0].reason.endswith("starting at line 2")
    assert items[1].text == '{"a": 3}'
    assert items[2].text == '{"x": [1, 2'


def test_a_number_cut_between_chunks_is_read_whole():
    items = list(iter_json_array(chunks_of("[123456, 7]", 2), max_element_chars=100))
    assert [i.text for i in items] == ["123456", "7"]


def test_text_after_the_array_and_a_missing_bracket_are_reported():
    after = list(iter_json_array(["[1]\n\n tail"], max_element_chars=100))
    assert [(i.line, i.text, i.reason) for i in after] == [
        (1, "1", None),
        (3, "tail", "record: text after the end of the JSON array at line 3"),
    ]
    cut = list(iter_json_array(['[{"a": 1},\n'], max_element_chars=100))
    assert [i.reason for i in cut] == [None, "record: the JSON array ends without its closing ']'"]
    assert list(iter_json_array([" [ ] "], max_element_chars=100)) == []


def test_an_element_longer_than_the_limit_is_not_buffered_whole():
    text = '[\n{"a": "' + "x" * 5000 + '"},\n{"b": 1}\n]'
    items = list(iter_json_array(chunks_of(text, 100), max_element_chars=1000))
    assert items[0].reason == "record: a file-sink element longer than 1000 characters starting at line 2"
    assert items[1].text == '{"b": 1}' and items[1].line == 3


def test_text_that_is_not_an_array_is_an_input_error():
    with pytest.raises(InputError, match=r"file-sink: the text starts with '\{\"a\": 1\}', not a JSON array"):
        list(iter_json_array(['{"a": 1}'], max_element_chars=100))
