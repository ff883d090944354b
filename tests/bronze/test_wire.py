"""Kafka message values as landing lines: hand-written values and what each must give."""

from __future__ import annotations

import json

import pytest

from bronze.wire import json_line, raw_text, record_line, split_wire_format, to_json_form
from conf.errors import InputError


def test_a_one_line_json_value_is_its_own_text():
    assert json_line(b'{"a": 1,  "b": "x"}') == '{"a": 1,  "b": "x"}'


def test_a_value_over_several_lines_is_made_compact_without_changing_its_strings():
    assert json_line(b'{\n  "a": 1,\n  "b": "two\\nlines"\n}') == '{"a":1,"b":"two\\nlines"}'


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "value: empty (a tombstone) is not a record"),
        (b"", "value: empty (a tombstone) is not a record"),
        (b"\xff\xfe{}", "value: not UTF-8 (invalid start byte at byte 0)"),
        (b"{\n broken", "value: '{\\n broken' is not valid JSON"),
    ],
)
def test_values_that_cannot_be_a_line_give_the_reason(value, reason):
    with pytest.raises(InputError) as caught:
        json_line(value)
    assert str(caught.value) == reason


def test_the_wire_format_header_gives_the_schema_id_and_the_body():
    assert split_wire_format(b"\x00\x00\x00\x01\x02body") == (258, b"body")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x00\x00\x01", "value: 3 bytes is shorter than the Confluent wire format's 5-byte header"),
        (b'{"a":1}', "value: magic byte 123 is not 0, so it is not in the Confluent wire format"),
        (None, "value: empty (a tombstone) is not a record"),
    ],
)
def test_values_outside_the_wire_format_give_the_reason(value, reason):
    with pytest.raises(InputError) as caught:
        split_wire_format(value)
    assert str(caught.value) == reason


def test_an_avro_record_becomes_datahub_json_with_aspect_bytes_as_text_and_nulls_left_out():
    record = {"entityUrn": None, "aspect": {"value": b'{"removed": false}', "contentType": "application/json"},
              "changeType": "UPSERT"}  # fmt: skip
    assert json.loads(record_line(record)) == {
        "aspect": {"value": '{"removed": false}', "contentType": "application/json"},
        "changeType": "UPSERT",
    }


def test_aspect_bytes_that_are_not_utf8_are_refused():
    with pytest.raises(InputError, match=r"^aspect.value: not UTF-8"):
        to_json_form({"aspect": {"value": b"\xff"}})


def test_raw_text_keeps_text_as_is_and_other_bytes_as_base64():
    assert raw_text(b"plain") == "plain"
    assert raw_text(b"\x00\xff") == "base64:AP8="
    assert raw_text(None) == ""
