"""The ordering key and a PATCH's arrival: the Python rendering equals the Spark columns, row by row."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql import functions as F

from silver import order_keys
from silver.sequencing import order_key, patch_arrival

LANDED = datetime.datetime(2026, 11, 28, 8, 0, 0, 123456, tzinfo=datetime.timezone.utc)
LANDED_US = 1795852800123456
ROWS = [
    # version, created_time, change_type, line_number, source_file
    (7, 1795000000000, "UPSERT", 3, "a.mcl.jsonl"),
    (7, 1795000000000, "delete", 4, "a.mcl.jsonl"),
    (None, 1795000000000, "UPSERT", 5, "b.jsonl"),
    (None, None, "DELETE", 6, "b.jsonl"),
    (2, 1795000000001, "PATCH", 7, "s3://bucket/landing/patches.mcp.jsonl"),
    (None, 1795000000002, "patch", 8, "ünïcode.json"),
    (12345678901234567890123, 5, "UPSERT", 9, "long.json"),  # wider than the key: cut, as Spark's lpad cuts
]


def test_the_python_keys_are_the_spark_keys(spark):
    assert int(LANDED.timestamp() * 1_000_000) == LANDED_US
    rows_df = spark.createDataFrame(
        [(str(v) if v is not None else None, t, c, LANDED, n, f) for v, t, c, n, f in ROWS],
        "version string, created_time bigint, change_type string, landed_at timestamp, line_number bigint, source_file string",
    ).withColumn("version", F.col("version").cast("decimal(38,0)"))
    keyed = rows_df.select(order_key(F.col("version"), F.col("created_time"), F.col("change_type"), patch_arrival()).alias("key"),
                           "line_number").orderBy("line_number").collect()  # fmt: skip
    expected = [order_keys.order_key(v, t, c, order_keys.patch_arrival(n, f)) for v, t, c, n, f in ROWS]
    assert [r.key for r in keyed] == expected


@pytest.mark.parametrize(
    ("arguments", "key"),
    [
        ((7, 1, "UPSERT", None), "v0000000000000000007.0"),
        ((7, 1, "DELETE", None), "v0000000000000000007.1"),
        ((None, 42, "UPSERT", None), "t0000000000000000042.0"),
        ((None, None, "UPSERT", None), "t0000000000000000000.0"),
        ((3, 1, "UPSERT", "x"), "v0000000000000000003.0"),  # only a PATCH carries its arrival
        ((3, 1, "Patch", "x"), "v0000000000000000003.0.x"),
    ],
)
def test_order_key(arguments, key):
    assert order_keys.order_key(*arguments) == key


def test_patch_arrival_pads_each_part():
    assert order_keys.patch_arrival(3, "") == "0000000000000000003.0000000000"


def test_a_patch_s_key_does_not_depend_on_when_it_landed(spark):
    """A life of batches must end with the event ids of one run: nothing of the landing in a PATCH's key."""
    rows_df = spark.createDataFrame(
        [(None, 1795000000001, "PATCH", landed, 7, "patches.mcp.jsonl") for landed in (LANDED, LANDED + datetime.timedelta(days=1))],
        "version string, created_time bigint, change_type string, landed_at timestamp, line_number bigint, source_file string",
    ).withColumn("version", F.col("version").cast("decimal(38,0)"))
    keys = rows_df.select(order_key(F.col("version"), F.col("created_time"), F.col("change_type"), patch_arrival()).alias("k"))
    assert len({r.k for r in keys.collect()}) == 1
