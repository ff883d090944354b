"""Tables compared by the hashes of their sorted identity rows: the order of rows does not matter, a value does."""

from __future__ import annotations

import hashlib

import pytest

from conf.errors import InputError
from pipelines.bench.table_hashes import identity_hashes, identity_rows, sorted_rows_hash
from tests.conftest import make_settings

SCHEMA = "event_id string, version bigint, flags array<string>, extra string"
ROWS = [("e2", 2, ["b"], "x"), ("e1", None, None, "y"), ("e3", 3, ["a", "c"], None)]


def _hash(spark, rows, **options):
    return sorted_rows_hash(identity_rows(spark.createDataFrame(rows, SCHEMA), ("event_id", "version", "flags")), **options)


def test_the_hash_is_of_the_sorted_rows_whatever_their_order(spark):
    expected_rows = sorted(["e1\x1f\x00\x1f\x00", "e2\x1f2\x1f[\"b\"]", "e3\x1f3\x1f[\"a\",\"c\"]"])
    expected = hashlib.sha256("\x1e".join(expected_rows).encode()).hexdigest()
    assert _hash(spark, ROWS) == {"rows": 3, "sha256": expected}
    assert _hash(spark, list(reversed(ROWS))) == _hash(spark, ROWS) == _hash(spark, ROWS, slice_rows=2)


def test_a_changed_value_a_null_or_a_missing_row_changes_it_and_other_columns_do_not(spark):
    reference = _hash(spark, ROWS)
    assert _hash(spark, [("e2", 2, ["b"], "changed"), *ROWS[1:]]) == reference  # not an identity column
    for rows in ([("e2", 4, ["b"], "x"), *ROWS[1:]], [("e2", None, ["b"], "x"), *ROWS[1:]], ROWS[:2], [*ROWS, ROWS[0]]):
        assert _hash(spark, rows) != reference


def test_a_table_without_identity_columns_is_refused_naming_it(spark, tmp_path):
    # Refused before any table is read: the home is never opened.
    with pytest.raises(InputError, match=r"tables: 'silver.skipped_snapshots' has no identity columns"):
        identity_hashes(spark, make_settings(tmp_path / "home"), ["silver.skipped_snapshots"])
