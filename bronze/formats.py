"""Input kinds bronze lands, how a file's kind is detected, and the DataHub file-sink JSON array reader.

Pure Python: no Spark, no file system. The landing pipeline feeds these functions the first lines of a
file (detection) or its text in chunks (file-sink), and decides what to do with the results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from bronze.snapshots import is_snapshot_record, snapshot_proposals
from conf.errors import InputError

MCL = "mcl"
MCP = "mcp"
FILE_SINK = "file-sink"
USAGE = "usage"
# JSON lines of DataHub MetadataChangeEvents (`proposedSnapshot`): each aspect lands as an MCP record.
MCE = "mce"

# Every kind a file can be landed as; `--kind` takes one of these.
KINDS = (MCL, MCP, FILE_SINK, USAGE, MCE)
# Kinds whose records are DataHub aspect snapshots (action requests included: they are MCL/MCP records
# of entity type `actionRequest`) and land in bronze.aspect_snapshots.
SNAPSHOT_KINDS = (MCL, MCP, FILE_SINK, MCE)
# The ledger's kind for a file with no record at all (nothing to detect).
EMPTY = "empty"

# The fields a record cannot land without, per family (usage vs aspect snapshots).
SNAPSHOT_REQUIRED_FIELDS = ("entityUrn", "aspectName", "changeType")
USAGE_REQUIRED_FIELDS = ("type", "actorUrn", "timestamp")

# DataHub's ChangeType enum (com.linkedin.events.metadata.ChangeType).
CHANGE_TYPES = ("UPSERT", "CREATE", "CREATE_ENTITY", "UPDATE", "DELETE", "PATCH", "RESTATE")
DELETE = "DELETE"
PATCH = "PATCH"

# The 13 event types of the Audit Events Search API, plus DeletePolicyEvent, which DataHub also emits.
USAGE_EVENT_TYPES = (
    "EntityEvent",
    "CreateUserEvent",
    "UpdateUserEvent",
    "CreateAccessTokenEvent",
    "RevokeAccessTokenEvent",
    "CreatePolicyEvent",
    "UpdatePolicyEvent",
    "DeletePolicyEvent",
    "CreateIngestionSourceEvent",
    "UpdateIngestionSourceEvent",
    "DeleteEntityEvent",
    "UpdateAspectEvent",
    "LogInEvent",
    "FailedLogInEvent",
)

# Action requests (proposals) are aspect snapshots of this entity type; silver reads their
# `actionRequestInfo` aspect. Bronze lands them like any other MCL/MCP record.
ACTION_REQUEST_ENTITY_TYPE = "actionRequest"
ACTION_REQUEST_ASPECTS = ("actionRequestInfo", "actionRequestStatus")
# The `actionRequestInfo.type` values of DataHub's proposals.
ACTION_REQUEST_TYPES = (
    "DOMAIN_ASSOCIATION",
    "OWNER_ASSOCIATION",
    "TAG_ASSOCIATION",
    "CREATE_GLOSSARY_TERM",
    "TERM_ASSOCIATION",
    "UPDATE_DESCRIPTION",
    "STRUCTURED_PROPERTY_ASSOCIATION",
)

# `urn:li:<entity type>:<id>`: the type is an identifier, the id anything non-empty on one line.
URN_PATTERN = r"^urn:li:[A-Za-z][A-Za-z0-9_]*:.+$"

# How many leading lines detection looks at for a record that tells the kind.
DETECTION_LINES = 200

_WHITESPACE = " \t\r\n"
_BOM = "\ufeff"


def check_kind(kind: str | None, name: str = "kind") -> str | None:
    """Return `kind` when it is None or a known kind.

    Args:
        kind: a kind name, or None for auto-detection.
        name: the argument's name in the error message (e.g. `--kind`).

    Raises:
        InputError: naming the argument, the value and the known kinds.
    """
    if kind is not None and kind not in KINDS:
        raise InputError(f"{name}: {kind!r} is not one of {', '.join(KINDS)}")
    return kind


def kind_of_record(record: Any) -> str | None:
    """Return the kind one parsed JSON record reveals, or None when it reveals none.

    An object with `type` and `actorUrn` is a usage event; with `proposedSnapshot` an MCE; with `created`
    an MCL record; otherwise an object with `aspectName` or `entityUrn` is an MCP record.
    """
    if not isinstance(record, dict):
        return None
    if is_snapshot_record(record):
        return MCE
    if "type" in record and "actorUrn" in record:
        return USAGE
    if "created" in record:
        return MCL
    if "aspectName" in record or "entityUrn" in record:
        return MCP
    return None


def detect_kind(head_lines: Iterable[str]) -> str | None:
    """Return the kind of a file from its first lines, EMPTY for a file without content, or None.

    A file whose first non-blank character is `[` is a file-sink JSON array. Otherwise the first line
    that parses as a JSON object revealing a kind (see `kind_of_record`) decides; lines that do not
    parse (a malformed first record) are passed over.

    Args:
        head_lines: the file's first lines (at most DETECTION_LINES are looked at), decompressed; an
            iterator is read no further than the line that decides.

    Returns:
        A kind of KINDS, EMPTY when every given line is blank, None when no line reveals the kind.
    """
    seen_content = False
    for index, line in enumerate(islice(head_lines, DETECTION_LINES)):
        text = line.lstrip(_BOM + _WHITESPACE) if index == 0 else line.strip(_WHITESPACE)
        if not text:
            continue
        if not seen_content and text.startswith("["):
            return FILE_SINK
        seen_content = True
        try:
            record = json.loads(text)
        except ValueError:
            continue
        kind = kind_of_record(record)
        if kind is not None:
            return kind
    return None if seen_content else EMPTY


@dataclass(frozen=True)
class ArrayItem:
    """One element of a file-sink JSON array, or the text of one that could not be read.

    Attributes:
        line: 1-based line of the file where the element starts.
        text: for a good element, the record as one JSON line in MCP form (see `to_json_line`);
            for a bad one, the element's raw text.
        reason: None for a good element; else why it is quarantined, naming the field.
    """

    line: int
    text: str
    reason: str | None = None


def to_json_line(element: Any) -> str:
    """Serialize one file-sink element as one JSON line, with its aspect in MCL/MCP form.

    The file sink writes the aspect as `{"json": {...}}`; MCL and MCP lines carry the aspect as a string
    in `{"value": "<json>"}`. The string is made with `json.dumps` default separators (what DataHub's
    own Python classes produce), so the same aspect lands with the same text from all three forms.
    """
    if isinstance(element, dict):
        aspect = element.get("aspect")
        if isinstance(aspect, dict) and "json" in aspect:
            converted = {k: v for k, v in aspect.items() if k != "json"}
            converted["value"] = json.dumps(aspect["json"])
            converted.setdefault("contentType", "application/json")
            element = {**element, "aspect": converted}
    return json.dumps(element)


def to_json_lines(element: Any) -> list[tuple[str, str | None]]:
    """The records one file-sink element lands as: (JSON line, None), or (raw text, reason) for a part that cannot.

    An MCE (`proposedSnapshot`) gives one MCP line per aspect (`bronze.snapshots.snapshot_proposals`);
    any other element is one record (`to_json_line`).
    """
    if is_snapshot_record(element):
        return snapshot_proposals(element)
    return [(to_json_line(element), None)]


def iter_json_array(chunks: Iterable[str], *, max_element_chars: int) -> Iterator[ArrayItem]:
    """Stream the elements of a JSON array given as text chunks, with the line each starts on.

    Reads only as much text as the current element needs, so a large file is never held whole. A
    malformed element is reported (reason set) and reading resumes at the next line that starts with
    `{` (where the file sink's indented output starts each element); without one, the rest is reported.

    Args:
        chunks: the file's text in pieces (any sizes).
        max_element_chars: an element still unparsed after this many characters is reported as
            malformed or oversized instead of being buffered further.

    Yields:
        One ArrayItem per record, in file order: one per element, one per aspect of an MCE element (all
        with the element's line).

    Raises:
        InputError: when the text does not start with `[` (it is not a JSON array).
    """
    reader = _ArrayReader(iter(chunks), max_element_chars)
    yield from reader.items()


class _ArrayReader:
    """The state of one streaming pass over a JSON array: buffer, position and line counter."""

    def __init__(self, chunks: Iterator[str], max_element_chars: int):
        self._chunks = chunks
        self._limit = max(1, max_element_chars)
        self._decoder = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._line = 1  # line number of self._buf[self._pos]
        self._eof = False
        self._reported_to_end = False

    def items(self) -> Iterator[ArrayItem]:
        self._skip_whitespace(first=True)
        if not self._peek() == "[":
            found = self._buf[self._pos : self._pos + 40]
            raise InputError(f"file-sink: the text starts with {found!r}, not a JSON array '['")
        self._advance(1)
        self._skip_whitespace()
        if self._peek() == "]":
            self._advance(1)
            yield from self._trailing()
            return
        while True:
            self._skip_whitespace()
            if self._peek() == "":
                # Reported once: after a malformed element that ran to the end, nothing is left to say.
                if not self._reported_to_end:
                    yield ArrayItem(self._line, "", "record: the JSON array ends without its closing ']'")
                return
            start_line = self._line
            parsed = self._decode()
            if isinstance(parsed, str):
                yield self._resync(start_line, parsed)
                continue
            element, end = parsed
            self._advance(end - self._pos)
            for text, reason in to_json_lines(element):
                yield ArrayItem(start_line, text, reason)
            self._skip_whitespace()
            following = self._peek()
            if following == ",":
                self._advance(1)
                continue
            if following == "]":
                self._advance(1)
                yield from self._trailing()
                return
            if following == "":
                yield ArrayItem(self._line, "", "record: the JSON array ends without its closing ']'")
                return
            yield self._resync(self._line, f"record: expected ',' or ']' after an element, found {following!r}")

    def _decode(self) -> tuple[Any, int] | str:
        """Parse the element at the position, reading more text as needed; a reason when it cannot."""
        while True:
            error = None
            try:
                element, end = self._decoder.raw_decode(self._buf, self._pos)
            except ValueError as exc:
                element, end, error = None, -1, exc
            # An element that ends exactly at the buffer's end may continue (a number cut in two).
            if end != -1 and (end < len(self._buf) or self._eof):
                return element, end
            if self._eof or (error is not None and not self._may_be_cut(error)):
                return f"record: malformed JSON in the file-sink array ({error.msg if error else 'incomplete'})"
            if len(self._buf) - self._pos > self._limit:
                return f"record: a file-sink element longer than {self._limit} characters"
            self._read_more()

    def _may_be_cut(self, error: json.JSONDecodeError) -> bool:
        """Tell whether a parse error may only mean the buffer ends inside the element."""
        # Errors at the very end of the text, or a string still open, go away with more text;
        # any other error is in the element itself.
        return error.pos >= len(self._buf) - 6 or error.msg.startswith("Unterminated string")

    def _resync(self, start_line: int, reason: str) -> ArrayItem:
        """Report the text from the position up to the next line starting with `{`, and skip it."""
        while True:
            found = self._buf.find("\n{", self._pos + 1)
            if found != -1 or self._eof:
                break
            self._read_more()
        end = len(self._buf) if found == -1 else found + 1
        self._reported_to_end = found == -1
        raw = self._buf[self._pos : end].rstrip(_WHITESPACE).rstrip(",]").rstrip(_WHITESPACE)
        self._advance(end - self._pos)
        return ArrayItem(start_line, raw, f"{reason} starting at line {start_line}")

    def _trailing(self) -> Iterator[ArrayItem]:
        self._skip_whitespace()
        if self._peek() != "":
            line = self._line
            while not self._eof:
                self._read_more()
            raw = self._buf[self._pos :].strip(_WHITESPACE)
            self._advance(len(self._buf) - self._pos)
            yield ArrayItem(line, raw, f"record: text after the end of the JSON array at line {line}")

    def _peek(self) -> str:
        while self._pos >= len(self._buf) and not self._eof:
            self._read_more()
        return self._buf[self._pos] if self._pos < len(self._buf) else ""

    def _skip_whitespace(self, first: bool = False) -> None:
        skip = _WHITESPACE + (_BOM if first else "")
        while True:
            while self._pos < len(self._buf) and self._buf[self._pos] in skip:
                self._advance(1)
            if self._pos < len(self._buf) or self._eof:
                return
            self._read_more()

    def _advance(self, count: int) -> None:
        self._line += self._buf.count("\n", self._pos, self._pos + count)
        self._pos += count

    def _read_more(self) -> None:
        chunk = next(self._chunks, None)
        if chunk is None:
            self._eof = True
            return
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
