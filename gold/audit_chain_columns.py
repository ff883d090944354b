"""The audit hash chain computed by the engine: each row's canonical JSON and hash, each batch's digest.

The canonical JSON text of a row is the one `gold.audit_chain.canonical_json` writes (docs/audit-trail.md),
built from Column expressions so that it runs on the workers, not in driver Python. A batch digest of the
`rows-sha256` kind is SHA-256 over the batch's row hashes (hex, each followed by a newline) in key order:
the engine aggregates it per batch, and `row_hashes_digest` is the same definition in Python.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from json.encoder import encode_basestring

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    MapType,
    StringType,
    StructField,
)

from conf.errors import InputError

# A batch digest of the row-hash kind starts with this; a bare 64-digit hex digest is the byte-stream
# kind (`gold.audit_chain.BatchDigest`) links recorded before it.
ROW_HASHES_PREFIX = "rows-sha256:"

# What Python's JSON encoder (ensure_ascii off) writes for each character it escapes.
_ESCAPES = {'\\': '\\\\', '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_ESCAPES.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in _ESCAPES})
# A string holding none of them is written between quotes as it is (the common case skips the replaces).
_NEEDS_ESCAPE = "[\\x00-\\x1f\"\\\\]"


def row_hashes_digest(row_hashes: Iterable[str]) -> str:
    """The `rows-sha256` batch digest of row hashes given in key order (the engine's definition, in Python)."""
    digest = hashlib.sha256()
    for row_hash in row_hashes:
        digest.update(row_hash.encode("ascii") + b"\n")
    return ROW_HASHES_PREFIX + digest.hexdigest()


EMPTY_ROW_HASHES_DIGEST = row_hashes_digest(())


def is_row_hashes_digest(batch_digest: str) -> bool:
    """Whether a link's batch digest is of the row-hash kind (else the byte-stream kind)."""
    return batch_digest.startswith(ROW_HASHES_PREFIX)


def json_string(value: Column) -> Column:
    """A string column as a JSON string literal, escaped as Python's JSON encoder escapes it; null stays null."""
    escaped = value
    # The backslash first, so the backslashes the later replaces add are not doubled.
    for character, replacement in _ESCAPES.items():
        escaped = F.replace(escaped, F.lit(character), F.lit(replacement))
    body = F.when(value.rlike(_NEEDS_ESCAPE), escaped).otherwise(value)
    return F.concat(F.lit('"'), body, F.lit('"'))


def json_value(value: Column, data_type: DataType, name: str) -> Column:
    """A column's canonical JSON text (`canonical_value` then JSON), `null` for null.

    Raises:
        InputError: naming the column whose type has no canonical form (floating point, binary, ...).
    """
    if isinstance(data_type, StringType):
        text = json_string(value)
    elif isinstance(data_type, (IntegralType, BooleanType)):
        text = value.cast("string")
    elif isinstance(data_type, (DateType, DecimalType)):
        text = json_string(value.cast("string"))
    elif isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        entries = F.array_sort(F.map_entries(value))
        pairs = F.transform(
            entries, lambda e: F.concat(json_string(e["key"]), F.lit(":"), json_value(e["value"], data_type.valueType, name))
        )
        text = F.concat(F.lit("{"), F.array_join(pairs, ","), F.lit("}"))
    else:
        raise InputError(f"{name}: column type {data_type.simpleString()} has no canonical form")
    return F.coalesce(text, F.lit("null"))


def canonical_json_column(fields: Iterable[StructField]) -> Column:
    """The canonical JSON text of each row over `fields` (keys sorted by code point, no whitespace)."""
    ordered = sorted(fields, key=lambda f: f.name)
    pieces: list[Column] = []
    for index, field in enumerate(ordered):
        pieces.append(F.lit(("{" if index == 0 else ",") + encode_basestring(field.name) + ":"))
        pieces.append(json_value(F.col(field.name), field.dataType, field.name))
    pieces.append(F.lit("}" if ordered else "{}"))
    return F.concat(*pieces)


def with_row_hash(rows_df: DataFrame) -> DataFrame:
    """Add `row_hash`: SHA-256 (hex) of each row's canonical JSON over all of `rows_df`'s columns."""
    return rows_df.withColumn("row_hash", F.sha2(canonical_json_column(rows_df.schema.fields), 256))


def to_batch_digests(rows_df: DataFrame, key_column: str) -> DataFrame:
    """Each batch's row count and `rows-sha256` digest, aggregated by the engine.

    Args:
        rows_df: a chained table's rows (every column; `batch_id` among them).
        key_column: the column that orders a batch's rows (ascending by code point; ties by row hash).

    Returns:
        batch_id, row_count, batch_digest.

    Raises:
        InputError: when `key_column` or `batch_id` is not a column of `rows_df`.
    """
    for needed in (key_column, "batch_id"):
        if needed not in rows_df.columns:
            raise InputError(f"key_column: {needed!r} is not a column of the rows ({', '.join(rows_df.columns)})")
    hashed_df = with_row_hash(rows_df).select("batch_id", F.col(key_column).alias("key"), "row_hash")
    ordered = F.array_sort(F.collect_list(F.struct("key", "row_hash")))
    stream = F.concat(F.array_join(F.transform(ordered, lambda entry: entry["row_hash"]), "\n"), F.lit("\n"))
    return hashed_df.groupBy("batch_id").agg(
        F.count(F.lit(1)).alias("row_count"),
        F.concat(F.lit(ROW_HASHES_PREFIX), F.sha2(stream, 256)).alias("batch_digest"),
    )
