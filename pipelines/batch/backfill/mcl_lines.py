"""Rows of `metadata_aspect_v2` as MetadataChangeLog JSON lines, built column-wise in Arrow (no loop over rows).

Each row becomes the MCL that DataHub emitted for that version: `changeType` UPSERT, `aspect.value` the
row's `metadata` text, `systemMetadata` its `systemmetadata` text (kept as it is), `created` = {time:
`createdon` in ms, actor: `createdby`}. The provenance rides in `headers` (database, table, version,
createdon in µs), which landing keeps in a quarantined record's raw text; a landed row's source is the
window (`windows.window_source`) and its line. Text values are written as JSON strings, so a row whose
metadata is not JSON lands in quarantine with landing's own reason instead of breaking the line.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# JSON escapes of the characters a JSON string may not hold as they are (besides the rare others below).
_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\b", "\\b"), ("\f", "\\f"))
_OTHER_CONTROLS = r"[\x00-\x1f]"


def json_strings(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each text value as a JSON string literal (quotes included), null as `null`."""
    original = pc.cast(column, pa.large_string())
    if isinstance(original, pa.ChunkedArray):
        original = original.combine_chunks()
    text = original
    for raw, escaped in _ESCAPES:
        text = pc.replace_substring(text, raw, escaped)
    controls = pc.match_substring_regex(text, _OTHER_CONTROLS)
    if pc.any(controls).as_py():
        # Control characters other than \n\r\t\b\f are rare: those values only are escaped in Python.
        values = text.to_pylist()
        for index in np.flatnonzero(controls.fill_null(False).to_numpy(zero_copy_only=False)):
            values[index] = json.dumps(original[int(index)].as_py())[1:-1]
        text = pa.array(values, pa.large_string())
    quote = pa.scalar('"', pa.large_string())
    quoted = pc.binary_join_element_wise(quote, text, quote, pa.scalar("", pa.large_string()))
    return pc.fill_null(quoted, pa.scalar("null", pa.large_string()))


def mcl_lines(window: pa.Table, database: str, table: str, line_numbers: np.ndarray | None = None) -> pa.Array:
    """The window's rows as numbered MCL lines: `<line>\\t<MCL JSON>\\n`.

    Args:
        window: rows with the reader's COLUMNS.
        database: the provenance name of the database (settings' `provenance`).
        table: the table read.
        line_numbers: each row's line number; None: counted from 1.
    """
    count = window.num_rows
    if line_numbers is None:
        line_numbers = np.arange(1, count + 1, dtype=np.int64)
    numbers = pc.cast(pa.array(line_numbers, pa.int64()), pa.large_string())
    created_ms = pc.cast(pc.divide(window.column("createdon_us"), 1000), pa.large_string())
    provenance = json.dumps(database)[1:-1]
    table_name = json.dumps(table)[1:-1]
    pieces = [
        numbers,
        '\t{"entityUrn":',
        json_strings(window.column("urn")),
        ',"changeType":"UPSERT","aspectName":',
        json_strings(window.column("aspect")),
        ',"aspect":{"value":',
        json_strings(window.column("metadata")),
        ',"contentType":"application/json"},"systemMetadata":',
        json_strings(window.column("systemmetadata")),
        ',"created":{"time":',
        pc.fill_null(created_ms, pa.scalar("null", pa.large_string())),
        ',"actor":',
        json_strings(window.column("createdby")),
        f'}},"headers":{{"database":"{provenance}","table":"{table_name}","version":"',
        pc.cast(window.column("version"), pa.large_string()),
        '","createdon":"',
        pc.cast(window.column("createdon_us"), pa.large_string()),
        '"}}\n',
    ]
    return pc.binary_join_element_wise(*[_combined(p) for p in pieces], _combined(""))


def _combined(piece):
    if isinstance(piece, str):
        return pa.scalar(piece, pa.large_string())
    return piece.combine_chunks() if isinstance(piece, pa.ChunkedArray) else piece


def numbered_copy(window: pa.Table, database: str, table: str, line_numbers: np.ndarray | None = None) -> bytes:
    """The window's numbered MCL lines (`mcl_lines`) as the bytes of a numbered copy."""
    lines = mcl_lines(window, database, table, line_numbers)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]].tobytes()

