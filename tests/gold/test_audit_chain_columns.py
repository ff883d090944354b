"""The chain's row hashes and batch digests computed by the engine equal the documented Python definition."""

from __future__ import annotations

import hashlib
from datetime import date
from decimal import Decimal

import pytest

from conf.errors import InputError
from gold.audit_chain import canonical_json, row_hash
from gold.audit_chain_columns import (
    EMPTY_ROW_HASHES_DIGEST,
    canonical_json_column,
    is_row_hashes_digest,
    row_hashes_digest,
    to_batch_digests,
)

SCHEMA = (
    "event_id STRING, text STRING, n BIGINT, v INT, event_date DATE, version DECIMAL(10,1), major BOOLEAN, "
    "parameters MAP<STRING, STRING>, batch_id STRING"
)
COLUMNS = ["event_id", "text", "n", "v", "event_date", "version", "major", "parameters", "batch_id"]
# Every character JSON escapes, non-ASCII (a combining letter, an emoji, U+2028), DEL, empty and null values.
ROWS = [
    ("e2", 'say "hi"\n\t\\ \x00\x01\x08\x0c\x0b\x1f\x7f zoe\u0308 \U0001f600 \u2028', 1700000000500, 3,
     date(2023, 11, 14), Decimal("1.0"), True, {"b": 'x"', "a": None, "\u00e9": "1", "Z": "\r"}, "b-1"),
    ("e1", None, None, None, None, None, None, None, "b-1"),
    ("e3", "", -5, -2, date(1999, 1, 2), Decimal("0.2"), False, {}, "b-2"),
    ("e10", "urn:li:corpuser:zo\u00eb", 0, 0, date(2024, 2, 29), Decimal("12.5"), False, {"k": "v"}, "b-1"),
]  # fmt: skip


def as_dict(row: tuple) -> dict:
    return dict(zip(COLUMNS, row))


def test_each_row_s_canonical_json_is_the_python_canonical_form(spark):
    rows_df = spark.createDataFrame(ROWS, SCHEMA)
    got = {r.event_id: r.text for r in rows_df.select("event_id", canonical_json_column(rows_df.schema.fields).alias("text")).collect()}
    assert got == {row[0]: canonical_json(as_dict(row)) for row in ROWS}


@pytest.mark.pure  # JVM Spark too: the digest hashes the canonical JSON, so this checks that text as well
def test_batch_digests_are_the_row_hashes_of_the_batch_in_key_order(pure_spark):
    rows_df = pure_spark.createDataFrame(ROWS, SCHEMA)
    got = {r.batch_id: (r.row_count, r.batch_digest) for r in to_batch_digests(rows_df, "event_id").collect()}
    expected = {}
    for batch in ("b-1", "b-2"):
        # "e10" sorts before "e2": by code point, not as a number.
        batch_rows = sorted((row for row in ROWS if row[-1] == batch), key=lambda row: row[0])
        expected[batch] = (len(batch_rows), row_hashes_digest(row_hash(as_dict(row)) for row in batch_rows))
    assert got == expected


def test_the_row_hashes_digest_is_sha256_over_hex_lines():
    hashes = ["ab" * 32, "cd" * 32]
    assert row_hashes_digest(hashes) == "rows-sha256:" + hashlib.sha256(f"{hashes[0]}\n{hashes[1]}\n".encode()).hexdigest()
    assert EMPTY_ROW_HASHES_DIGEST == "rows-sha256:" + hashlib.sha256(b"").hexdigest()
    assert is_row_hashes_digest(EMPTY_ROW_HASHES_DIGEST) and not is_row_hashes_digest("0" * 64)


def test_a_column_without_canonical_form_is_refused_by_name(spark):
    rows_df = spark.createDataFrame([("e1", 1.5, "b")], "event_id STRING, score DOUBLE, batch_id STRING")
    with pytest.raises(InputError, match="score: column type double"):
        to_batch_digests(rows_df, "event_id")


def test_a_missing_key_column_is_refused_by_name(spark):
    rows_df = spark.createDataFrame([("e1", "b")], "id STRING, batch_id STRING")
    with pytest.raises(InputError, match="key_column: 'event_id'"):
        to_batch_digests(rows_df, "event_id")
