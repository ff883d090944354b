"""Kafka message values as landing lines: DataHub's JSON serialization, or Avro in the Confluent wire format.

Plain Python, no engine: each function takes one message value and gives the one-line JSON text landing
parses (`bronze.records`), or raises InputError with the reason its record is quarantined with. The
Confluent wire format is a 0 byte, the writer schema's registry id (4 bytes, big-endian) and the Avro
binary body; DataHub's Avro MetadataChangeLog carries each aspect as GenericAspect bytes holding its JSON.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from conf.errors import InputError

WIRE_HEADER_BYTES = 5
_SHOWN_CHARS = 120  # as much of a bad value as a quarantine reason quotes


def json_line(value: bytes | None) -> str:
    """The message value as one line of JSON text (its own text unless it spans several lines).

    Raises:
        InputError: for an empty value (a tombstone), bytes that are not UTF-8, or text spanning lines
            that is not JSON (it cannot be put on one line without changing it).
    """
    # A line break at the end (producers that write lines) is whitespace after the document.
    text = _text(value).rstrip("\r\n")
    if "\n" not in text and "\r" not in text:
        return text
    try:
        # Line breaks outside strings are whitespace: the compact form is the same document.
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        raise InputError(f"value: {_shown(text)} is not valid JSON") from None


def split_wire_format(value: bytes | None) -> tuple[int, bytes]:
    """The (schema id, Avro body) of a Confluent wire-format value.

    Raises:
        InputError: for an empty value, one shorter than the 5-byte header, or a first byte that is not 0.
    """
    if not value:
        raise InputError("value: empty (a tombstone) is not a record")
    if len(value) < WIRE_HEADER_BYTES:
        raise InputError(f"value: {len(value)} bytes is shorter than the Confluent wire format's 5-byte header")
    if value[0] != 0:
        raise InputError(f"value: magic byte {value[0]} is not 0, so it is not in the Confluent wire format")
    return int.from_bytes(value[1:WIRE_HEADER_BYTES], "big"), value[WIRE_HEADER_BYTES:]


def record_line(record: dict[str, Any]) -> str:
    """An Avro-decoded MetadataChangeLog record as one line of DataHub's JSON serialization.

    Raises:
        InputError: for aspect bytes that are not UTF-8 JSON text.
    """
    return json.dumps(to_json_form(record), ensure_ascii=False, separators=(",", ":"))


def to_json_form(record: Any) -> Any:
    """An Avro-decoded record in DataHub's JSON form: absent optionals left out, GenericAspect bytes as text.

    Raises:
        InputError: for bytes that are not UTF-8 (an aspect's value is JSON text).
    """
    if isinstance(record, dict):
        return {key: to_json_form(item) for key, item in record.items() if item is not None}
    if isinstance(record, list):
        return [to_json_form(item) for item in record]
    if isinstance(record, bytes):
        try:
            return record.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"aspect.value: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return record


def raw_text(value: bytes | None) -> str:
    """How a value that could not be read is kept in quarantine: its text, or `base64:` and its bytes."""
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def _text(value: bytes | None) -> str:
    if not value:
        raise InputError("value: empty (a tombstone) is not a record")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"value: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _shown(text: str) -> str:
    return repr(text[:_SHOWN_CHARS] + ("..." if len(text) > _SHOWN_CHARS else ""))
