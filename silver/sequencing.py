"""Order aspect versions, decide what is late or a replay, and pair each new version with its predecessor:
pure DataFrame transforms over one bronze batch and the state before it.

Ordering key of one (entity_urn, aspect_name): systemMetadata.version when present, else created
time; a DELETE orders after the write of the same version (DataHub repeats the deleted value's version
on the DELETE record). The key is a sortable string `v<version, 19 digits>.<0 write | 1 delete>`
(or `t<created ms>.<0|1>` without a version), so the same (version, change type) is the same key: a
replay. Keys with a version sort after keys without one. A PATCH's key ends with where it arrived
(`order_key`): each patch is a version of its own (`silver.patching` applies them). The state rows the
accepted versions make are `silver.state`'s.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from bronze.records import SNAPSHOT_RECORD_FIELDS
from silver.order_keys import ARRIVAL_ORDER, BY_TIME, BY_VERSION, CRC_DIGITS, DELETE_RANK, KEY_DIGITS, OTHER_RANK, PATCH


# The bronze.aspect_snapshots columns the sequencing reads.
BRONZE_COLUMNS = (*SNAPSHOT_RECORD_FIELDS, "record_hash", "batch_id", "source_file", "line_number", "landed_at")


# The columns of an aspect version pair, the input of every change event generator.
PAIR_COLUMNS = (
    "entity_urn",
    "entity_type",
    "aspect_name",
    "change_type",
    "is_delete",
    "version",
    "order_key",
    "created_time",
    "created_actor",
    "record_hash",
    "batch_id",
    "source_file",
    "line_number",
    "change_set_id",
    "prev_json",
    "new_json",
    "prev_change_type",
)


ACCEPTED, LATE, DUPLICATE = "ACCEPTED", "LATE", "DUPLICATE"


# The one order of every sequencing window, as (column, descending): key, order key, then arrival
# newest first.
SEQUENCE_ORDER = (
    ("entity_urn", False),
    ("aspect_name", False),
    ("order_key", False),
    *((column, True) for column in ARRIVAL_ORDER),
)


# Hash buckets of the sequencing windows: enough for the parallelism of any cluster, few enough that
# the window operators stay cheap (one window partition per key is what they are slow at).
KEY_BUCKETS = 1024



def order_key(version: Column, created_time: Column, change_type: Column, arrival: Column | None = None) -> Column:
    """The sortable ordering key of one aspect version, as a column (`silver.order_keys` defines it).

    A PATCH is an operation, not a value: two patches of one aspect with the same time (the SDK gives
    every proposal of one builder the same systemMetadata) are both applied, in the order they arrived.
    Given `arrival` (`patch_arrival`), a PATCH's key ends with it, so each patch is a version of its own.
    """
    rank = F.when(F.upper(change_type) == "DELETE", F.lit(DELETE_RANK)).otherwise(F.lit(OTHER_RANK))
    by_version = F.concat(F.lit(BY_VERSION), F.lpad(version.cast("string"), KEY_DIGITS, "0"), F.lit("."), rank)
    by_time = F.concat(F.lit(BY_TIME), F.lpad(F.coalesce(created_time, F.lit(0)).cast("string"), KEY_DIGITS, "0"),
                       F.lit("."), rank)  # fmt: skip
    key = F.when(version.isNotNull(), by_version).otherwise(by_time)
    if arrival is None:
        return key
    return F.when(F.upper(change_type) == PATCH, F.concat(key, F.lit("."), arrival)).otherwise(key)



def patch_arrival() -> Column:
    """Where a bronze row stands in its input, as sortable text: line, then the file's CRC-32 (`silver.order_keys`)."""
    return F.concat(
        F.lpad(F.col("line_number").cast("string"), KEY_DIGITS, "0"),
        F.lit("."),
        F.lpad(F.crc32(F.col("source_file").cast("binary")).cast("string"), CRC_DIGITS, "0"),
    )



def change_set_id(entity_urn: Column, aspect_name: Column, key: Column) -> Column:
    """The id of one change set: one aspect version of one entity (deterministic)."""
    return F.sha2(F.concat_ws("\u001f", entity_urn, aspect_name, key), 256)



def key_bucket(entity_urn: Column, aspect_name: Column) -> Column:
    """The window bucket of one (entity_urn, aspect_name) key: a stable hash modulo KEY_BUCKETS."""
    return F.pmod(F.xxhash64(entity_urn, aspect_name), F.lit(KEY_BUCKETS))



def _lag_ignoring_nulls(column_name: str, bucket_name: str, native: bool = True) -> Column:
    """The last non-null value of a column before the row, in SEQUENCE_ORDER within the row's bucket.

    Natively this is `lag(...) IGNORE NULLS`, which the DataFrame API does not offer. Sail's cluster
    runner (0.7.2) computes that as a plain lag (the flag is lost on the way to its workers), so with
    `native` off it is `last(..., ignorenulls)` over the preceding rows: the same value on every engine,
    but evaluated frame by frame (sequencing 1.6 against 1.0 CPU-s per 100k versions, embedded).
    """
    order = ", ".join(f"`{name}` DESC" if descending else f"`{name}`" for name, descending in SEQUENCE_ORDER)
    window = f"OVER (PARTITION BY `{bucket_name}` ORDER BY {order}"
    if native:
        return F.expr(f"lag(`{column_name}`) IGNORE NULLS {window})")
    return F.expr(f"last(`{column_name}`, true) {window} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)")



def _same_key(other: Column) -> Column:
    """True when the struct `other` (a neighbouring row) holds the current row's key."""
    return F.coalesce(
        other["entity_urn"].eqNullSafe(F.col("entity_urn")) & other["aspect_name"].eqNullSafe(F.col("aspect_name")),
        F.lit(False),
    )



def to_sequenced_batch(batch_df: DataFrame, pre_state_df: DataFrame, native_lag: bool = True) -> DataFrame:
    """Classify every snapshot of a batch against the state before the batch, and pair the accepted ones.

    Windows run over key buckets ordered by key, not over one partition per key: a batch touches up
    to millions of keys, and per-key window partitions cost far more than the sort. Neighbours are
    compared on their key instead. One order serves every window, so the batch is sorted once: by
    key, then order_key, then arrival *descending*, which puts the first landed copy of a version
    last among its copies. So, looking at the next row only: a row is a later copy when the next row
    holds the same version, and a key's newest version is the one whose next row is another key. The
    predecessor of a version is the last row before it that is not a later copy (a lag that skips
    the later copies, nulled out: `_lag_ignoring_nulls`); when that row is
    an accepted version of the same key it is the previous version in the batch, else the state is.

    Args:
        batch_df: bronze.aspect_snapshots rows of one batch (or of any set of batches processed as one).
        pre_state_df: silver.aspect_state before the batch (`to_pre_batch_state`); any superset of the
            batch's keys.
        native_lag: use the engine's `lag(...) IGNORE NULLS` (`engine.native_lag_ignore_nulls`); off, a
            formulation every engine computes alike (`_lag_ignoring_nulls`).

    Returns:
        The batch rows with order_key, is_delete, disposition (ACCEPTED, LATE or DUPLICATE), the state
        they were compared with (state_*, without its JSON), new_json (the
        aspect JSON, null on DELETE, in place of aspect_json), and for accepted rows prev_json /
        prev_change_type (the predecessor: the previous accepted version in the batch, else the
        state), is_last (the key's newest version in the batch) and change_set_id.
    """
    key = ["entity_urn", "aspect_name"]
    rows_df = (
        batch_df.select(*BRONZE_COLUMNS)
        .withColumn("order_key", order_key(F.col("version"), F.col("created_time"), F.col("change_type"), patch_arrival()))
        .withColumn("is_delete", F.upper(F.col("change_type")) == "DELETE")
        .withColumn("_bucket", key_bucket(F.col("entity_urn"), F.col("aspect_name")))
    )
    state_df = pre_state_df.select(
        *key,
        F.col("order_key").alias("state_order_key"),
        F.col("change_type").alias("state_change_type"),
        F.col("aspect_json").alias("state_aspect_json"),
        F.col("version").alias("state_version"),
        F.col("created_time").alias("state_created_time"),
        F.col("created_actor").alias("state_created_actor"),
        F.col("record_hash").alias("state_record_hash"),
        F.col("batch_id").alias("state_batch_id"),
    )
    joined_df = rows_df.join(state_df, on=key, how="left")
    ordered = Window.partitionBy("_bucket").orderBy(
        *[F.col(name).desc() if descending else F.col(name) for name, descending in SEQUENCE_ORDER]
    )
    following = F.lead(F.struct(*key, "order_key")).over(ordered)
    later_copy = _same_key(following) & (following["order_key"] == F.col("order_key"))
    classified_df = (
        joined_df.withColumn("_later_copy", later_copy)
        .withColumn("_key_ends", ~_same_key(following))
        .withColumn(
            "disposition",
            F.when(F.col("_later_copy"), F.lit(DUPLICATE))
            .when(F.col("order_key") < F.col("state_order_key"), F.lit(LATE))
            .when(F.col("order_key") == F.col("state_order_key"), F.lit(DUPLICATE))
            .otherwise(F.lit(ACCEPTED)),
        )
    )
    accepted = F.col("disposition") == ACCEPTED
    effective_json = F.when(~F.col("is_delete"), F.col("aspect_json"))
    version_row = F.struct(*key, "disposition", effective_json.alias("json"), F.col("change_type"))
    state_written = F.upper(F.col("state_change_type")) != "DELETE"
    chained = accepted & F.col("_chained")
    paired_df = (
        classified_df.withColumn("_version_row", F.when(~F.col("_later_copy"), version_row))
        .withColumn("_previous", _lag_ignoring_nulls("_version_row", "_bucket", native_lag))
        .withColumn("_chained", _same_key(F.col("_previous")) & (F.col("_previous.disposition") == ACCEPTED))
        .withColumn("new_json", effective_json)
        # One level of CASE: the engine copies the JSON texts once per level.
        .withColumn(
            "prev_json",
            F.when(chained, F.col("_previous.json")).when(accepted & state_written, F.col("state_aspect_json")),
        )
        .withColumn(
            "prev_change_type",
            F.when(chained, F.col("_previous.change_type")).when(accepted, F.col("state_change_type")),
        )
        # Accepted versions of a key are its newest ones, so an accepted row that ends its key is the last.
        .withColumn("is_last", accepted & F.col("_key_ends"))
        .withColumn("change_set_id", change_set_id(F.col("entity_urn"), F.col("aspect_name"), F.col("order_key")))
    )
    # Each JSON text once per row: aspect_json is new_json (null on DELETE either way), and the state's
    # JSON lives on as prev_json where a pair needs it.
    return paired_df.drop(
        "aspect_json",
        "state_aspect_json",
        "_bucket",
        "_version_row",
        "_previous",
        "_later_copy",
        "_key_ends",
        "_chained",
    )



def to_pairs(sequenced_df: DataFrame) -> DataFrame:
    """Return the accepted aspect versions with their predecessors: the input of the change event generators."""
    return sequenced_df.filter(F.col("disposition") == ACCEPTED).select(*PAIR_COLUMNS)



def to_skipped_snapshots(sequenced_df: DataFrame) -> DataFrame:
    """Return the late and duplicate snapshots of the batch in silver.skipped_snapshots' columns (no recorded_at).

    state_order_key is the key the snapshot lost against: the state's for a late one, its own for a
    duplicate (the state holds that version, or an earlier copy in the batch does).
    """
    return sequenced_df.filter(F.col("disposition").isin(LATE, DUPLICATE)).select(
        "entity_urn",
        "aspect_name",
        "version",
        "order_key",
        "change_type",
        F.col("disposition").alias("reason"),
        F.when(F.col("disposition") == DUPLICATE, F.col("order_key"))
        .otherwise(F.coalesce(F.col("state_order_key"), F.col("order_key")))
        .alias("state_order_key"),
        "record_hash",
        "batch_id",
        "source_file",
        "line_number",
    )
