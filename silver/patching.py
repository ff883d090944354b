"""PATCH proposals in a sequenced batch: each applied to the aspect before it, so that every pair and state
row holds full aspects. Pure DataFrame -> DataFrame transforms over `silver.sequencing.to_sequenced_batch` output.

Patches are rare, and applying them is an ordered fold per (entity, aspect): only the keys with an
accepted PATCH take part. Their accepted versions are collected in order with the aspect before the first
one (the state's, which sequencing put in its prev_json), folded by `silver.patches.fold_versions` in a
Python function, and joined back by order key. Every other row is left as it is.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

from silver.patches import PATCH, fold_versions
from silver.sequencing import ACCEPTED

# The disposition of a PATCH that could not be applied: it changes nothing and is quarantined.
REJECTED = "REJECTED"

_FOLDED = ArrayType(
    StructType(
        [
            StructField("order_key", StringType()),
            StructField("prev_json", StringType()),
            StructField("new_json", StringType()),
            StructField("error", StringType()),
            StructField("is_last", BooleanType()),
        ]
    )
)


def _fold_key(aspect_name: str, versions: list) -> list[tuple]:
    """The folded versions of one key as tuples in _FOLDED's field order (the base is the first one's prev_json)."""
    base = versions[0]["prev_json"] if versions else None
    folded = fold_versions(aspect_name, base, versions)
    return [(f["order_key"], f["prev_json"], f["new_json"], f["error"], f["is_last"]) for f in folded]


def is_patch(change_type: Column) -> Column:
    """True for a PATCH record."""
    return F.upper(change_type) == PATCH


def with_patches_applied(sequenced_df: DataFrame) -> DataFrame:
    """Apply the batch's accepted PATCH records in order; the rows of other keys are returned as they are.

    For each key with an accepted PATCH, its accepted versions get the full aspect before them
    (prev_json) and after them (new_json): a PATCH's is the aspect it patched with the patch applied, the
    aspect's template default when there was none. A PATCH that cannot be applied becomes REJECTED (it
    changes nothing; `patch_error` says why, and its new_json keeps the patch), and is_last moves to the
    key's newest applied version.

    Args:
        sequenced_df: `to_sequenced_batch` output.

    Returns:
        sequenced_df's columns plus `patch_error` (null except on REJECTED rows).
    """
    key = ["entity_urn", "aspect_name"]
    accepted = F.col("disposition") == ACCEPTED
    patched_keys_df = sequenced_df.filter(accepted & is_patch(F.col("change_type"))).select(*key).distinct()
    version = F.struct("order_key", "change_type", F.col("new_json").alias("json"), "created_time", "prev_json")
    # A lambda: the client reads a named function's type hints as a pandas UDF's and warns.
    fold = F.udf(lambda aspect_name, versions: _fold_key(aspect_name, versions), _FOLDED)
    folded_df = (
        sequenced_df.filter(accepted)
        .join(patched_keys_df, on=key, how="left_semi")
        .groupBy(*key)
        # order_key is the struct's first field and unique among a key's accepted versions.
        .agg(F.sort_array(F.collect_list(version)).alias("_versions"))
        .select(*key, F.explode(fold(F.col("aspect_name"), F.col("_versions"))).alias("_f"))
        .select(*key, F.col("_f.order_key").alias("order_key"), F.lit(ACCEPTED).alias("disposition"), F.col("_f").alias("_patched"))
    )
    joined_df = sequenced_df.join(folded_df, on=[*key, "order_key", "disposition"], how="left")
    folded = F.col("_patched").isNotNull()
    rejected = folded & F.col("_patched.error").isNotNull()
    replaced = {
        "disposition": F.when(rejected, F.lit(REJECTED)).otherwise(F.col("disposition")),
        "new_json": F.when(folded & ~rejected, F.col("_patched.new_json")).otherwise(F.col("new_json")),
        "prev_json": F.when(folded, F.col("_patched.prev_json")).otherwise(F.col("prev_json")),
        "is_last": F.when(folded, F.col("_patched.is_last")).otherwise(F.col("is_last")),
    }
    return joined_df.select(
        *[replaced[c].alias(c) if c in replaced else F.col(c) for c in sequenced_df.columns],
        F.col("_patched.error").alias("patch_error"),
    )


def to_patched_aspects(patched_df: DataFrame) -> DataFrame:
    """The full aspect each applied PATCH produced, by its bronze record (silver.patched_aspects rows, no recorded_at).

    Bronze keeps the patch; this is what the state held after it, which a re-run of a later batch needs to
    put the state back as it was (`silver.state.to_pre_batch_state`).
    """
    return patched_df.filter(
        (F.col("disposition") == ACCEPTED) & is_patch(F.col("change_type"))
    ).select("entity_urn", "aspect_name", "order_key", "record_hash", "batch_id", F.col("new_json").alias("aspect_json"))


def to_rejected_patches(patched_df: DataFrame) -> DataFrame:
    """The PATCH records that could not be applied, as quarantine input rows.

    Returns:
        raw_text (the record as one MCP line: urn, aspect, change type and the patch), record_hash,
        source_file, line_number and reason (why the patch cannot be applied, naming the field and value).
    """
    record = F.struct(
        F.col("entity_urn").alias("entityUrn"),
        F.col("aspect_name").alias("aspectName"),
        F.col("change_type").alias("changeType"),
        F.struct(F.col("new_json").alias("value"), F.lit("application/json-patch+json").alias("contentType")).alias(
            "aspect"
        ),
    )
    return patched_df.filter(F.col("disposition") == REJECTED).select(
        F.to_json(record).alias("raw_text"), "record_hash", "source_file", "line_number", F.col("patch_error").alias("reason")
    )
