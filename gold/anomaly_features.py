"""Actor activity features for unusual-activity detection: one row per (actor, time bucket) of change events.

Every function is a pure DataFrame transform over silver change events (columns `actor`, `entity_urn`,
`entity_type`, `category`, `operation`, `event_time` in epoch milliseconds).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from conf.errors import InputError
from gold.serving_contract import BUCKET_MS

# Removals of the metadata that governs a dataset: who owns it, how it is classified, where it belongs.
REMOVAL_CATEGORIES = ("OWNER", "TAG", "GLOSSARY_TERM", "DOMAIN")
# Count features: summed per bucket, compared to the actor's own history and to the peers'.
COUNT_FEATURES = (
    "events",
    "distinct_entities",
    "distinct_platforms",
    "classification_removals",
    "owner_changes",
    "domain_removals",
    "hard_deletes",
    "soft_deletes",
    "schema_changes",
    "off_hours_events",
    "creates",
)
# Features that only mean something against the actor's own past.
CONTEXT_FEATURES = (
    "off_hours_share",
    "new_platform_events",
    "new_entity_type_events",
    "idle_buckets",
    "baseline_ratio",
    "peer_ratio",
)
FEATURES = COUNT_FEATURES + CONTEXT_FEATURES
PLATFORM_PATTERN = r"urn:li:dataPlatform:([^,)]+)"


def bucket_width_ms(granularity: str) -> int:
    """Return the width of a bucket in milliseconds.

    Raises:
        InputError: when `granularity` is neither hour nor day.
    """
    if granularity not in BUCKET_MS:
        raise InputError(f"granularity: {granularity!r} is not one of {', '.join(BUCKET_MS)}")
    return BUCKET_MS[granularity]


def with_event_flags(events_df: DataFrame, business_hours: tuple[int, int] = (7, 19)) -> DataFrame:
    """Add the per-event flags the bucket features count, and the event's platform.

    Args:
        events_df: change events.
        business_hours: [start, end) UTC hours of the working day; the other hours are off hours (weekends
            are not: weekend work by people who do it now and then is too common to stand out).
    """
    start, end = business_hours
    hour = F.hour(F.timestamp_millis(F.col("event_time")))
    removal = F.col("operation") == "REMOVE"
    platform = F.regexp_extract(F.col("entity_urn"), PLATFORM_PATTERN, 1)
    return events_df.select(
        "actor",
        "entity_urn",
        "entity_type",
        "event_time",
        F.when(platform == "", F.lit(None)).otherwise(platform).alias("platform"),
        _flag(removal & F.col("category").isin("TAG", "GLOSSARY_TERM")).alias("classification_removal"),
        _flag(F.col("category") == "OWNER").alias("owner_change"),
        _flag(removal & (F.col("category") == "DOMAIN")).alias("domain_removal"),
        _flag(F.col("operation") == "HARD_DELETE").alias("hard_delete"),
        _flag(F.col("operation") == "SOFT_DELETE").alias("soft_delete"),
        _flag(F.col("category") == "TECHNICAL_SCHEMA").alias("schema_change"),
        _flag((F.col("category") == "LIFECYCLE") & (F.col("operation") == "CREATE")).alias("create"),
        _flag((hour < start) | (hour >= end)).alias("off_hours"),
    )


def _flag(condition: Column) -> Column:
    return F.when(condition, 1).otherwise(0)


def with_bucket(flagged_df: DataFrame, width_ms: int) -> DataFrame:
    """Add bucket_start: the start of the event's bucket, in epoch milliseconds."""
    return flagged_df.withColumn("bucket_start", (F.floor(F.col("event_time") / width_ms) * width_ms).cast("bigint"))


def to_bucket_counts(bucketed_df: DataFrame) -> DataFrame:
    """Sum each actor's flagged events per bucket."""
    return bucketed_df.groupBy("actor", "bucket_start").agg(
        F.count(F.lit(1)).alias("events"),
        # Counting 64-bit hashes instead of URNs keeps the distinct sets of busy service accounts small.
        F.countDistinct(F.xxhash64("entity_urn")).alias("distinct_entities"),
        F.countDistinct("platform").alias("distinct_platforms"),
        F.sum("classification_removal").alias("classification_removals"),
        F.sum("owner_change").alias("owner_changes"),
        F.sum("domain_removal").alias("domain_removals"),
        F.sum("hard_delete").alias("hard_deletes"),
        F.sum("soft_delete").alias("soft_deletes"),
        F.sum("schema_change").alias("schema_changes"),
        F.sum("off_hours").alias("off_hours_events"),
        F.sum("create").alias("creates"),
    )


def to_first_time_counts(bucketed_df: DataFrame) -> DataFrame:
    """Count each actor's events per bucket on a platform or entity type new to them.

    New means first touched in this bucket, after the actor's first bucket (on their first bucket
    everything is new, which says nothing). The first-times are found on (actor, bucket, platform,
    entity type) cells, not on the events, so the windows sort thousands of rows instead of millions.
    """
    cells = bucketed_df.groupBy("actor", "bucket_start", "platform", "entity_type").agg(F.count(F.lit(1)).alias("n"))
    actor_start = F.min("bucket_start").over(Window.partitionBy("actor"))
    platform_start = F.min("bucket_start").over(Window.partitionBy("actor", "platform"))
    type_start = F.min("bucket_start").over(Window.partitionBy("actor", "entity_type"))
    later = F.col("bucket_start") > actor_start
    new_platform = later & F.col("platform").isNotNull() & (F.col("bucket_start") == platform_start)
    new_type = later & (F.col("bucket_start") == type_start)
    return (
        cells.select(
            "actor",
            "bucket_start",
            F.when(new_platform, F.col("n")).otherwise(0).alias("new_platform_n"),
            F.when(new_type, F.col("n")).otherwise(0).alias("new_type_n"),
        )
        .groupBy("actor", "bucket_start")
        .agg(F.sum("new_platform_n").alias("new_platform_events"), F.sum("new_type_n").alias("new_entity_type_events"))
    )


def with_history_context(counts_df: DataFrame, width_ms: int, baseline_buckets: int) -> DataFrame:
    """Add the actor's trailing baseline, idle time, history length and the peers' mean for each bucket.

    Args:
        counts_df: `to_bucket_counts` output.
        width_ms: the bucket width.
        baseline_buckets: how many buckets before this one make the actor's trailing baseline.
    """
    own_past = Window.partitionBy("actor").orderBy("bucket_start").rangeBetween(-baseline_buckets * width_ms, -1)
    own_order = Window.partitionBy("actor").orderBy("bucket_start")
    peers = Window.partitionBy("bucket_start")
    previous_start = F.lag("bucket_start").over(own_order)
    # The trailing window counts quiet buckets as zeros, but only since the actor's first bucket.
    first_start = F.min("bucket_start").over(Window.partitionBy("actor"))
    window_buckets = F.least(F.lit(baseline_buckets), (F.col("bucket_start") - first_start) / width_ms)
    return (
        counts_df.withColumn("history_buckets", F.count(F.lit(1)).over(own_past))
        .withColumn(
            "baseline_events",
            F.when(window_buckets > 0, F.coalesce(F.sum("events").over(own_past), F.lit(0)) / window_buckets),
        )
        .withColumn(
            "idle_buckets",
            F.when(previous_start.isNull(), F.lit(0)).otherwise((F.col("bucket_start") - previous_start) / width_ms - 1),
        )
        .withColumn("peer_mean_events", F.avg("events").over(peers))
        .withColumn("off_hours_share", F.col("off_hours_events") / F.col("events"))
        # Without a past, a bucket is its own baseline.
        .withColumn("baseline_ratio", F.coalesce(F.col("events") / (F.col("baseline_events") + 1), F.lit(1.0)))
        .withColumn("peer_ratio", F.col("events") / (F.col("peer_mean_events") + 1))
    )


def to_actor_features(
    events_df: DataFrame,
    granularity: str,
    *,
    baseline_buckets: int,
    business_hours: tuple[int, int] = (7, 19),
) -> DataFrame:
    """Turn change events into one feature row per (actor, bucket): counts, shares, first-times and ratios.

    Args:
        events_df: silver change events (at least actor, entity_urn, entity_type, category, operation,
            event_time); events without an actor are left out.
        granularity: hour or day.
        baseline_buckets: the length of the trailing baseline, in buckets.
        business_hours: [start, end) UTC hours of a working weekday.

    Returns:
        actor, granularity, bucket_start, bucket_end, the FEATURES columns, history_buckets,
        baseline_events and peer_mean_events.

    Raises:
        InputError: for an unknown granularity or a baseline shorter than one bucket.
    """
    width = bucket_width_ms(granularity)
    if baseline_buckets < 1:
        raise InputError(f"baseline_buckets: {baseline_buckets} must be at least 1")
    bucketed = with_bucket(with_event_flags(events_df.where(F.col("actor").isNotNull()), business_hours), width)
    counts = to_bucket_counts(bucketed).join(to_first_time_counts(bucketed), ["actor", "bucket_start"])
    features = with_history_context(counts, width, baseline_buckets)
    return features.select(
        "actor",
        F.lit(granularity).alias("granularity"),
        F.col("bucket_start").cast("bigint").alias("bucket_start"),
        (F.col("bucket_start") + width).cast("bigint").alias("bucket_end"),
        *[F.col(name).cast("double").alias(name) for name in FEATURES],
        F.col("history_buckets").cast("bigint").alias("history_buckets"),
        F.col("baseline_events").cast("double").alias("baseline_events"),
        F.col("peer_mean_events").cast("double").alias("peer_mean_events"),
    )
