"""Audit events and actor activity: pure transforms from bronze usage events and silver change events."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gold.serving_contract import AUDIT_COLUMNS

LOGIN_SOURCES = (
    "PASSWORD_RESET",
    "PASSWORD_LOGIN",
    "FALLBACK_LOGIN",
    "SIGN_UP_LINK_LOGIN",
    "GUEST_LOGIN",
    "SSO_LOGIN",
    "OIDC_IMPLICIT_LOGIN",
)
ORIGIN_USAGE = "usage"
ORIGIN_CHANGE = "change"

EVENT_KEY_COLUMNS = ("event_type", "actor_urn", "timestamp", "entity_urn", "aspect_name")


def to_login_source(column: Column) -> Column:
    """Return DataHub's upper snake login source for a camelCase or upper snake value.

    `passwordLogin`, `PASSWORD_LOGIN` and `password_login` all give `PASSWORD_LOGIN`; a value outside
    DataHub's enum is served upper-cased as it came. (Regex back-references are written differently by
    the engines, so the known values are looked up instead of rewritten.)
    """
    lookup = F.create_map(*[part for source in LOGIN_SOURCES for part in (F.lit(source.replace("_", "")), F.lit(source))])
    folded = F.upper(F.regexp_replace(column, "_", ""))
    return F.when(column.isNull(), F.lit(None).cast("string")).otherwise(
        F.coalesce(F.element_at(lookup, folded), F.upper(column))
    )


def to_event_date(millis: Column) -> Column:
    """Return the UTC calendar date of an epoch-milliseconds column."""
    return F.date_add(F.lit("1970-01-01").cast("date"), F.floor(millis / F.lit(86_400_000)).cast("int"))


def with_event_id(df: DataFrame) -> DataFrame:
    """Add `event_id`: a SHA-256 of (event_type, actor_urn, timestamp, entity_urn, aspect_name).

    Each part is length-prefixed (and a null written as `-`), so different keys never hash the same text.
    """
    parts = []
    for name in EVENT_KEY_COLUMNS:
        text = F.col(name).cast("string")
        parts.append(F.coalesce(F.concat(F.length(text).cast("string"), F.lit(":"), text), F.lit("-")))
    return df.withColumn("event_id", F.sha2(F.concat_ws(",", *parts), 256))


def to_audit_events_from_usage(usage_df: DataFrame) -> DataFrame:
    """Map bronze.usage_events rows to gold.audit_events rows (one per landed usage event).

    Args:
        usage_df: rows with the bronze.usage_events columns.

    Returns:
        The audit rows (every gold.audit_events column); raw_event is the landed document as it came.
    """
    mapped_df = usage_df.select(
        F.col("event_type"),
        F.col("timestamp").cast("bigint").alias("timestamp"),
        F.col("actor_urn"),
        F.col("source_ip"),
        F.upper(F.col("event_source")).alias("event_source"),
        F.col("user_agent"),
        F.col("trace_id").alias("telemetry_trace_id"),
        F.col("entity_urn"),
        F.col("entity_type"),
        F.col("aspect_name"),
        to_login_source(F.col("login_source")).alias("login_source"),
        F.col("raw_document").alias("raw_event"),
        F.lit(ORIGIN_USAGE).alias("origin"),
        F.col("record_hash").alias("source_id"),
        F.col("batch_id"),
        F.lit(None).cast("string").alias("domain"),
    )
    return _finish(mapped_df)


def to_audit_events_from_changes(changes_df: DataFrame) -> DataFrame:
    """Map silver.entity_change_events rows to audit rows: one per aspect write (change set).

    A change set holding a LIFECYCLE HARD_DELETE gives DeleteEntityEvent; one holding the LIFECYCLE CREATE
    of a corpUser's key aspect gives CreateUserEvent; any other gives UpdateAspectEvent. The entity is the
    one whose aspect was written (`aspect_entity_urn`, never a schemaField), the actor and time are the
    change's audit stamp, and raw_event is a JSON document describing the write.

    Args:
        changes_df: rows with the silver.entity_change_events columns.

    Returns:
        The audit rows (every gold.audit_events column).
    """
    lifecycle = F.col("category") == F.lit("LIFECYCLE")
    is_delete = lifecycle & (F.col("operation") == F.lit("HARD_DELETE"))
    entity_type = F.lower(F.coalesce(F.col("aspect_entity_type"), F.col("entity_type")))
    is_user_create = lifecycle & (F.col("operation") == F.lit("CREATE")) & (entity_type == F.lit("corpuser"))
    sets_df = changes_df.groupBy("change_set_id").agg(
        F.max(F.when(is_delete, 1).otherwise(0)).alias("_deletes"),
        F.max(F.when(is_user_create, 1).otherwise(0)).alias("_creates_user"),
        F.min("aspect_entity_urn").alias("entity_urn"),
        F.min("aspect_entity_type").alias("entity_type"),
        F.min("aspect_name").alias("aspect_name"),
        F.min("actor").alias("actor_urn"),
        F.min("event_time").alias("timestamp"),
        F.min("batch_id").alias("batch_id"),
        F.sort_array(F.collect_set("category")).alias("_categories"),
        F.count(F.lit(1)).alias("_changes"),
    )
    typed_df = sets_df.withColumn(
        "event_type",
        F.when(F.col("_deletes") == 1, F.lit("DeleteEntityEvent"))
        .when(F.col("_creates_user") == 1, F.lit("CreateUserEvent"))
        .otherwise(F.lit("UpdateAspectEvent")),
    )
    raw = F.to_json(
        F.struct(
            F.col("event_type").alias("type"),
            F.col("actor_urn").alias("actorUrn"),
            F.col("timestamp").alias("timestamp"),
            F.col("entity_urn").alias("entityUrn"),
            F.col("entity_type").alias("entityType"),
            F.col("aspect_name").alias("aspectName"),
            F.col("change_set_id").alias("changeSetId"),
            F.col("_categories").alias("changeCategories"),
            F.col("_changes").alias("changeCount"),
        )
    )
    mapped_df = typed_df.select(
        F.col("event_type"),
        F.col("timestamp").cast("bigint").alias("timestamp"),
        F.col("actor_urn"),
        F.lit(None).cast("string").alias("source_ip"),
        F.lit(None).cast("string").alias("event_source"),
        F.lit(None).cast("string").alias("user_agent"),
        F.lit(None).cast("string").alias("telemetry_trace_id"),
        F.col("entity_urn"),
        F.col("entity_type"),
        F.col("aspect_name"),
        F.lit(None).cast("string").alias("login_source"),
        raw.alias("raw_event"),
        F.lit(ORIGIN_CHANGE).alias("origin"),
        F.col("change_set_id").alias("source_id"),
        F.col("batch_id"),
        F.lit(None).cast("string").alias("domain"),
    )
    return _finish(mapped_df)


def _finish(mapped_df: DataFrame) -> DataFrame:
    """Add the event id and date and put the columns in table order."""
    return with_event_id(mapped_df).withColumn("event_date", to_event_date(F.col("timestamp"))).select(*AUDIT_COLUMNS)


def to_audit_events(usage_df: DataFrame, changes_df: DataFrame, domains_df: DataFrame | None = None) -> DataFrame:
    """Return the deduplicated audit rows of some usage events and change events.

    Rows with the same (type, actor, timestamp, entity urn, aspect name) are one event: the landed usage
    document wins over a derived change row, then the smallest source id (deterministic on re-runs).

    Args:
        usage_df: rows with the bronze.usage_events columns.
        changes_df: rows with the silver.entity_change_events columns.
        domains_df: `to_entity_domains` rows giving each entity's domain (None: no domain known).
    """
    all_df = to_audit_events_from_usage(usage_df).unionByName(to_audit_events_from_changes(changes_df))
    first_df = filter_first_per_event(all_df)
    return first_df if domains_df is None else with_entity_domain(first_df, domains_df)


def to_entity_domains(state_df: DataFrame) -> DataFrame:
    """Return `entity_urn, domain` from state rows: the domain of each entity whose `domains` aspect names one.

    An entity listing several domains is given the smallest urn (deterministic; DataHub assigns one).

    Args:
        state_df: rows with the silver.aspect_state columns (the current state).
    """
    domains = F.from_json(F.col("aspect_json"), "struct<domains:array<string>>")["domains"]
    live = (F.col("aspect_name") == F.lit("domains")) & ~F.coalesce(F.col("deleted"), F.lit(False))
    return (
        state_df.filter(live)
        .select("entity_urn", F.array_min(domains).alias("domain"))
        .filter(F.col("domain").isNotNull())
    )


def with_entity_domain(audit_df: DataFrame, domains_df: DataFrame) -> DataFrame:
    """Set each audit row's `domain` to its entity's (`to_entity_domains`); rows of other entities get null."""
    joined_df = audit_df.drop("domain").join(domains_df.select("entity_urn", "domain"), on="entity_urn", how="left")
    return joined_df.select(*AUDIT_COLUMNS)


def filter_first_per_event(audit_df: DataFrame) -> DataFrame:
    """Keep one row per event_id: usage rows before change rows, then the smallest source id."""
    order = Window.partitionBy("event_id").orderBy(
        F.when(F.col("origin") == F.lit(ORIGIN_USAGE), 0).otherwise(1), F.col("source_id"), F.col("batch_id")
    )
    return audit_df.withColumn("_rank", F.row_number().over(order)).filter(F.col("_rank") == 1).drop("_rank")


def to_actor_activity_daily(audit_df: DataFrame, changes_df: DataFrame) -> DataFrame:
    """Aggregate what each actor did on each day.

    Args:
        audit_df: gold.audit_events rows of the days to compute (all of their rows).
        changes_df: silver.entity_change_events rows of the same days (change categories come from them).

    Returns:
        gold.actor_activity_daily rows: per (actor_urn, activity_date) the event count, counts by event
        type and by change category (JSON objects, keys sorted, `{}` when none), distinct entities and
        entity types, first/last event time, failed logins and entity deletes.
    """
    day_key = ["actor_urn", "activity_date"]
    events_df = audit_df.withColumn("activity_date", F.col("event_date"))
    totals_df = events_df.groupBy(*day_key).agg(
        F.count(F.lit(1)).alias("events_total"),
        F.countDistinct("entity_urn").alias("distinct_entities"),
        F.countDistinct("entity_type").alias("distinct_entity_types"),
        F.min("timestamp").alias("first_event_time"),
        F.max("timestamp").alias("last_event_time"),
        F.sum(F.when(F.col("event_type") == F.lit("FailedLogInEvent"), 1).otherwise(0)).cast("bigint").alias(
            "failed_logins"
        ),
        F.sum(F.when(F.col("event_type") == F.lit("DeleteEntityEvent"), 1).otherwise(0)).cast("bigint").alias(
            "deletes"
        ),
    )
    by_type_df = _to_count_map(events_df, day_key, F.col("event_type"), "events_by_type")
    categories_df = changes_df.select(
        F.col("actor").alias("actor_urn"),
        to_event_date(F.col("event_time")).alias("activity_date"),
        F.col("category"),
    )
    by_category_df = _to_count_map(categories_df, day_key, F.col("category"), "changes_by_category")
    empty_object = F.lit("{}")
    return (
        totals_df.join(by_type_df, day_key, "left")
        .join(by_category_df, day_key, "left")
        .select(
            "actor_urn",
            "activity_date",
            "events_total",
            F.coalesce(F.col("events_by_type"), empty_object).alias("events_by_type"),
            F.coalesce(F.col("changes_by_category"), empty_object).alias("changes_by_category"),
            "distinct_entities",
            "distinct_entity_types",
            "first_event_time",
            "last_event_time",
            "failed_logins",
            "deletes",
        )
    )


def _to_count_map(df: DataFrame, key: list[str], label: Column, name: str) -> DataFrame:
    """Count rows per key and label, folded into one JSON object `{label: count}` (keys sorted) per key."""
    counts_df = df.filter(label.isNotNull()).groupBy(*key, label.alias("_label")).agg(F.count(F.lit(1)).alias("_n"))
    entries = F.sort_array(F.collect_list(F.struct(F.col("_label"), F.col("_n").cast("bigint"))))
    return counts_df.groupBy(*key).agg(F.to_json(F.map_from_entries(entries)).alias(name))
