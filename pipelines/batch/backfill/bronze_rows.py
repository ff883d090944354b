"""Rows of `metadata_aspect_v2` as staged bronze rows, built from their Arrow columns: no MCL text to parse.

A row becomes exactly the staged row landing makes of the MCL line `mcl_lines` writes for it: the same
typed columns, record hash and provenance (the window's source name, the row's line in the window). The
checks landing makes of an MCL are made column-wise: names, urns and sizes with pyarrow.compute; JSON
syntax by Arrow's JSON reader over blocks of rows (orjson row by row for a block it refuses, and for the
rows it would read otherwise than landing: line breaks, NaN or Infinity); the system metadata's runId and
version by that reader too; the aspect fields landing checks (bronze.aspects) from the text around their
one key. A row these checks cannot pass for certain (a check fails, or a form two JSON readers may read
apart: a repeated key, a value of another type, a record near the size limit) is left to landing as its
MCL line, so it lands, or is quarantined with landing's own reason, as every row did before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from bronze.aspects import checked_fields
from bronze.formats import MCL, URN_PATTERN

# The staged rows' columns as landing stages an MCL (bronze.records: STAGED_COLUMNS, then SNAPSHOT_FIELDS).
STAGED_SCHEMA = pa.schema(
    [
        ("file_index", pa.int32()),
        ("source_file", pa.large_string()),
        ("mid", pa.int64()),
        ("line_crc", pa.int64()),
        ("line_bytes", pa.int64()),
        ("line_number", pa.int64()),
        ("blank", pa.bool_()),
        ("record_hash", pa.large_string()),
        ("reason", pa.large_string()),
        ("raw_text", pa.large_string()),
        ("entity_urn", pa.large_string()),
        ("entity_type", pa.large_string()),
        ("aspect_name", pa.large_string()),
        ("change_type", pa.large_string()),
        ("aspect_json", pa.large_string()),
        ("version", pa.int64()),
        ("created_time", pa.int64()),
        ("created_actor", pa.large_string()),
        ("system_metadata", pa.large_string()),
        ("run_id", pa.large_string()),
        ("source_kind", pa.large_string()),
    ]
)
UPSERT = "UPSERT"
# Bytes of an MCL line besides its text values (keys, numbers, provenance headers), with room to spare.
_LINE_BYTES_BESIDES_VALUES = 1024
# A JSON string holds a character as at most 6 bytes (`\u001f`): the line's size bound from its values'.
_MOST_BYTES_PER_BYTE = 6
_ASPECT_NAME = r"^[A-Za-z][A-Za-z0-9_]*$"
_WHOLE_NUMBER = r"^[0-9]{1,18}$"
# Rows Arrow's JSON reader is not asked about: it ends a record at a line break, and takes NaN and Infinity.
_NOT_FOR_ARROW = r"[\r\n]|[:\[,][ \t]*-?(NaN|Inf)"
# Rows per block read by Arrow's JSON reader: a block it refuses is checked again row by row.
_BLOCK_ROWS = 16_384
# How the text after a checked field's key starts, per kind, for a value landing takes (JSON null too).
_END = r"[ \t\r\n]*[,}]"
_SHAPES = {
    "ARRAY": r"\[",
    "BOOLEAN": f"(true|false){_END}",
    "BIGINT": f"-?[0-9]{{1,18}}{_END}",
}
_SYSTEM_FIELDS = pa.schema([("runId", pa.large_string()), ("version", pa.large_string())])


@dataclass(frozen=True)
class StagedWindow:
    """A window's rows split between staged bronze rows and the rows left to landing's MCL path.

    Attributes:
        rows: staged rows (STAGED_SCHEMA) of the rows that land as they are.
        fallback: positions in the window (from 0) of the other rows, in order.
    """

    rows: pa.Table
    fallback: np.ndarray


def to_staged_rows(window: pa.Table, source: str, max_record_bytes: int, provenance_bytes: int) -> StagedWindow:
    """Stage the window's rows that certainly land as their MCL lines would; name the others.

    Args:
        window: rows with the reader's COLUMNS, in version order.
        source: the window's source name (bronze's `source_file`).
        max_record_bytes: the landing limit (settings' `ingest.max_record_bytes`).
        provenance_bytes: bytes of the database and table names the MCL headers carry.

    Returns:
        The staged rows and the positions left to landing's MCL path.
    """
    window = pa.table({name: _as_array(window.column(name)) for name in window.column_names})
    passed = _passes_column_checks(window, max_record_bytes, provenance_bytes)
    passed &= _checked_fields_pass(window)
    passed &= _json_objects(window.column("metadata"), passed)
    run_ids, version_texts, system_passed = _system_fields(window.column("systemmetadata"), passed)
    passed &= system_passed
    positions = np.flatnonzero(passed)
    if len(positions) == window.num_rows:
        rows = window
    else:
        chosen = pa.array(positions, pa.int64())
        rows, run_ids, version_texts = window.take(chosen), run_ids.take(chosen), version_texts.take(chosen)
    count = rows.num_rows
    versions = pc.cast(version_texts, pa.int64())
    created_ms = pc.divide(rows.column("createdon_us"), 1000)
    entity_types = pc.struct_field(pc.extract_regex(rows.column("urn"), r"^urn:li:(?P<t>[^:]+):"), [0])
    hashed = [MCL, rows.column("urn"), entity_types, rows.column("aspect"), UPSERT, rows.column("metadata"), versions,
              created_ms, rows.column("createdby")]  # fmt: skip
    columns = {
        "file_index": pa.array(np.zeros(count, dtype=np.int32)),
        "source_file": pa.array([source] * count, pa.large_string()),
        "mid": pa.nulls(count, pa.int64()),
        "line_crc": pa.nulls(count, pa.int64()),
        "line_bytes": pa.nulls(count, pa.int64()),
        "line_number": pa.array(positions + 1, pa.int64()),
        "blank": pa.array(np.zeros(count, dtype=bool)),
        "record_hash": record_hashes(hashed),
        "reason": pa.nulls(count, pa.large_string()),
        "raw_text": pa.nulls(count, pa.large_string()),
        "entity_urn": rows.column("urn"),
        "entity_type": entity_types,
        "aspect_name": rows.column("aspect"),
        "change_type": pa.array([UPSERT] * count, pa.large_string()),
        "aspect_json": rows.column("metadata"),
        "version": versions,
        "created_time": created_ms,
        "created_actor": rows.column("createdby"),
        "system_metadata": rows.column("systemmetadata"),
        "run_id": run_ids,
        "source_kind": pa.array([MCL] * count, pa.large_string()),
    }
    arrays = [_as_type(columns[f.name], f.type) for f in STAGED_SCHEMA]
    staged = pa.Table.from_arrays(arrays, schema=STAGED_SCHEMA)
    return StagedWindow(staged, np.flatnonzero(~passed))


def record_hashes(values: list) -> pa.Array:
    """bronze.records.record_hash of records whose fields are `values` (columns, or one text for every record).

    The text hashed is built in Arrow; only the SHA-256 of each is taken in Python.
    """
    parts = []
    for value in values:
        if isinstance(value, str):
            parts.append(pa.scalar(f"={value}", pa.large_string()))
            continue
        joined = pc.binary_join_element_wise(_text("="), pc.cast(_as_array(value), pa.large_string()), _text(""))
        parts.append(pc.fill_null(joined, pa.scalar("-", pa.large_string())))
    texts = pc.binary_join_element_wise(*parts, _text("\u001f"))
    offsets, data = _offsets_and_data(texts)
    bounds = offsets.tolist()
    sha256 = hashlib.sha256
    return pa.array([sha256(data[start:end]).hexdigest() for start, end in zip(bounds, bounds[1:])], pa.large_string())


def _text(value: str) -> pa.Scalar:
    return pa.scalar(value, pa.large_string())


def _offsets_and_data(texts: pa.Array) -> tuple[np.ndarray, memoryview]:
    """The value offsets and the data of a large_string array, for slicing each value's bytes."""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = texts.buffers()[2]
    return offsets, memoryview(data) if data is not None else memoryview(b"")


def _as_array(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _as_type(column, wanted: pa.DataType):
    column = _as_array(column)
    return column if column.type == wanted else pc.cast(column, wanted)


def _mask(array) -> np.ndarray:
    return pc.fill_null(array, False).to_numpy(zero_copy_only=False)


def _passes_column_checks(window: pa.Table, max_record_bytes: int, provenance_bytes: int) -> np.ndarray:
    """Which rows pass landing's checks that need no JSON parsing (urns, names, presence, size), as a mask."""

    def urn_like(name: str) -> pa.Array:
        column = window.column(name)
        return pc.and_(pc.match_substring_regex(column, URN_PATTERN), pc.invert(pc.match_substring_regex(column, "[\r\n]")))

    text_bytes = None
    for name in ("urn", "aspect", "metadata", "systemmetadata", "createdby"):
        length = pc.fill_null(pc.binary_length(window.column(name)), 4)
        text_bytes = length if text_bytes is None else pc.add(text_bytes, length)
    line_bound = pc.add(pc.multiply(text_bytes, _MOST_BYTES_PER_BYTE), _LINE_BYTES_BESIDES_VALUES + 6 * provenance_bytes)
    checks = [
        urn_like("urn"),
        urn_like("createdby"),
        pc.match_substring_regex(window.column("aspect"), _ASPECT_NAME),
        pc.is_valid(window.column("metadata")),
        pc.is_valid(window.column("createdon_us")),
        pc.less_equal(line_bound, max_record_bytes),
    ]
    passed = _mask(checks[0])
    for check in checks[1:]:
        passed &= _mask(check)
    return passed


def _checked_fields_pass(window: pa.Table) -> np.ndarray:
    """Which rows' aspects have each field landing checks (bronze.aspects) certainly of its kind, as a mask.

    Such a key appears once, followed by a value of the kind, or not at all: landing then finds the
    field of that kind, or absent (a key met once may be a nested one). A repeated key is left to landing,
    whose lookup takes the first where JSON readers take the last.
    """
    passed = np.ones(window.num_rows, dtype=bool)
    aspects, metadata = window.column("aspect"), window.column("metadata")
    for aspect, fields in checked_fields().items():
        rows = np.flatnonzero(_mask(pc.equal(aspects, aspect)))
        if not len(rows):
            continue
        texts = metadata.take(pa.array(rows, pa.int64()))
        rows_pass = np.ones(len(rows), dtype=bool)
        for field, kind in fields:
            key = f'"{field}"'
            keys = pc.fill_null(pc.count_substring(texts, key), 2).to_numpy(zero_copy_only=False)
            shaped = _mask(pc.match_substring_regex(texts, f"{key}[ \t\r\n]*:[ \t\r\n]*({_SHAPES[kind]}|null{_END})"))
            rows_pass &= (keys == 0) | ((keys == 1) & shaped)
        passed[rows] &= rows_pass
    return passed


def _json_objects(texts: pa.Array, candidates: np.ndarray) -> np.ndarray:
    """Which of the candidate rows' texts are JSON objects landing reads as valid JSON, as a mask."""
    texts = _as_array(texts)
    passed = np.zeros(len(texts), dtype=bool)
    for rows, table in _read_blocks(texts, candidates, pa.schema([])):
        if table is not None:
            passed[rows] = True
            continue
        for row in rows:
            try:
                passed[row] = type(orjson.loads(texts[int(row)].as_py())) is dict
            except orjson.JSONDecodeError:
                pass
    return passed


def _system_fields(texts: pa.Array, candidates: np.ndarray) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """The runId and version text landing reads from each system metadata (null for none), and which it reads for certain.

    Returns:
        runId, version text (null when absent), and the mask of rows whose values are certain, with a
        version that is a whole number; rows not among `candidates` are not read.
    """
    count = len(texts)
    objects = pc.fill_null(_as_array(texts), pa.scalar("{}", pa.large_string()))
    read_rows: list[np.ndarray] = []
    read_tables: list[pa.Table] = []
    for rows, table in _read_blocks(objects, candidates, _SYSTEM_FIELDS):
        if table is None:
            rows, table = _system_fields_one_by_one(objects, rows)
        read_rows.append(rows)
        read_tables.append(table)
    # Each row's place among the rows read (-1: not read), to put the values read back in row order.
    place = np.full(count, -1, dtype=np.int64)
    if read_rows:
        rows = np.concatenate(read_rows)
        place[rows] = np.arange(len(rows))
    read = pa.concat_tables(read_tables) if read_tables else _SYSTEM_FIELDS.empty_table()
    indices = pa.array(place, mask=place < 0)
    run_ids, version_texts = (read.column(name).combine_chunks().take(indices) for name in ("runId", "version"))
    passed = place >= 0
    passed &= _mask(pc.or_kleene(pc.is_null(version_texts), pc.match_substring_regex(version_texts, _WHOLE_NUMBER)))
    return run_ids, version_texts, passed


def _system_fields_one_by_one(objects: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, pa.Table]:
    """The rows whose runId and version orjson reads as text or absent, and those values (landing's reader and
    orjson match keys by case and take the last of a repeated key)."""
    certain, run_ids, versions = [], [], []
    for row in rows.tolist():
        try:
            system = orjson.loads(objects[row].as_py())
        except orjson.JSONDecodeError:
            continue
        if type(system) is not dict:
            continue
        run_id, version = system.get("runId"), system.get("version")
        if all(value is None or type(value) is str for value in (run_id, version)):
            certain.append(row)
            run_ids.append(run_id)
            versions.append(version)
    table = pa.table({"runId": pa.array(run_ids, pa.large_string()), "version": pa.array(versions, pa.large_string())})
    return np.array(certain, dtype=np.int64), table


def _read_blocks(texts: pa.Array, candidates: np.ndarray, schema: pa.Schema):
    """Read the candidate rows' texts with Arrow's JSON reader, a block at a time.

    Yields:
        (rows, table): a block's row positions and the fields of `schema` read from them; table is None for
        a block the reader refused and for the rows it is not asked about (`_NOT_FOR_ARROW`), which the
        caller checks row by row.
    """
    texts = pc.cast(_as_array(texts), pa.large_string())
    readable = candidates & _mask(pc.invert(pc.match_substring_regex(texts, _NOT_FOR_ARROW)))
    readable &= pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False) > 0
    rest = np.flatnonzero(candidates & ~readable)
    if len(rest):
        yield rest, None
    rows = np.flatnonzero(readable)
    for start in range(0, len(rows), _BLOCK_ROWS):
        block_rows = rows[start : start + _BLOCK_ROWS]
        lines = pc.binary_join_element_wise(texts.take(pa.array(block_rows, pa.int64())), _text("\n"), _text(""))
        offsets, _ = _offsets_and_data(lines)
        longest = int(np.max(np.diff(offsets)))
        options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        read = pa_json.ReadOptions(block_size=max(1 << 22, 2 * longest + 1))
        block = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        try:
            table = pa_json.read_json(pa.BufferReader(block), read_options=read, parse_options=options)
        except pa.ArrowInvalid:
            table = None
        if table is not None and table.num_rows != len(block_rows):
            table = None
        yield block_rows, table
