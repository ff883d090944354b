"""Turn raw input lines into bronze rows with Spark Column expressions: typed fields, quarantine reasons, hashes.

Every function here is a pure DataFrame -> DataFrame transform (or builds Columns, or is plain Python)
over line DataFrames (`bronze.lines.LINE_COLUMNS`).

Validation never drops a record: each staged row either has `reason` null (it lands) or a reason that
names the field and the value (it goes to quarantine). The checks are `bronze.record_checks`'; the
expensive ones (JSON re-parsing to name a bad value) sit inside CASE branches so they only run for
records that already failed a cheap check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.aspects import JSON_OPTIONS, aspect_problem, quoted_value
from bronze.formats import (
    CHANGE_TYPES,
    DELETE,
    FILE_SINK,
    MCE,
    MCL,
    MCP,
    PATCH,
    URN_PATTERN,
    USAGE,
    USAGE_EVENT_TYPES,
    check_kind,
)
from bronze.lines import LINE_COLUMNS
from bronze.record_checks import (
    check_limit,
    created_checks,
    epoch_ms_problem,
    first_problem,
    json_at,
    last_observed_checks,
    message,
    missing_fields_check,
    size_check,
    urn_check,
    urn_message,
)
from conf.errors import InputError

# The MCL / MCP envelope. systemMetadata is kept as JSON text (the column of the same name) and parsed
# again for the few fields bronze types; times are BIGINT so that only JSON integers parse.
SNAPSHOT_ENVELOPE = (
    "entityType STRING, entityUrn STRING, changeType STRING, aspectName STRING, "
    "aspect STRUCT<value: STRING, contentType: STRING>, systemMetadata STRING, "
    "created STRUCT<time: BIGINT, actor: STRING>"
)
SYSTEM_METADATA = "lastObserved BIGINT, runId STRING, version STRING"
# A PATCH proposal's aspect: a JSON Patch (a list of operations), or DataHub's generic form with the
# keys that address array items (`{"patch": [...], "arrayPrimaryKeys": {...}}`).
PATCH_OPERATIONS = "ARRAY<STRUCT<op: STRING, path: STRING>>"
# RFC 6902's operations, which DataHub's JSON Patch library takes (it checks the name case-insensitively).
PATCH_OPS = ("add", "remove", "replace", "copy", "move", "test")
USAGE_DOCUMENT = (
    "type STRING, actorUrn STRING, timestamp BIGINT, entityUrn STRING, entityType STRING, aspectName STRING, "
    "eventSource STRING, sourceIP STRING, userAgent STRING, traceId STRING, telemetryTraceId STRING, "
    "loginSource STRING, loginDenialReason STRING, usageSource STRING"
)

# What a snapshot record says of its aspect version: who wrote which value when.
SNAPSHOT_RECORD_FIELDS = (
    "entity_urn",
    "entity_type",
    "aspect_name",
    "change_type",
    "aspect_json",
    "version",
    "created_time",
    "created_actor",
)
# The typed columns of each family, in bronze table order.
SNAPSHOT_FIELDS = (*SNAPSHOT_RECORD_FIELDS, "system_metadata", "run_id", "source_kind")
USAGE_FIELDS = (
    "event_type",
    "actor_urn",
    "timestamp",
    "entity_urn",
    "entity_type",
    "aspect_name",
    "event_source",
    "source_ip",
    "user_agent",
    "trace_id",
    "login_source",
    "login_denial_reason",
    "usage_source",
    "raw_document",
)
# What makes two snapshot records the same record: landing it again is a duplicate. The hash covers the
# urn, aspect and version (the dedupe key) and the content, and the input form, so an MCP line and the
# file-sink element of the same write are two deliveries (silver orders and de-duplicates those).
SNAPSHOT_HASH_FIELDS = ("source_kind", *SNAPSHOT_RECORD_FIELDS)
# A usage event is the same event when every typed field is equal (key order or spacing of the
# document does not matter).
USAGE_HASH_FIELDS = USAGE_FIELDS[:-1]

# Where a staged row's line came from: every line column but its text.
LINE_ORIGIN_COLUMNS = tuple(column for column in LINE_COLUMNS if column != "value")
# Columns every staged row carries besides its family's fields.
STAGED_COLUMNS = (*LINE_ORIGIN_COLUMNS, "blank", "record_hash", "reason", "raw_text")


def parse_snapshot_lines(lines_df: DataFrame, kind: str, *, default_actor: str, max_record_bytes: int) -> DataFrame:
    """Parse DataHub MCL / MCP / file-sink / MCE records into staged aspect-snapshot rows with a quarantine reason.

    MCL records take the time and actor from `created`; MCP, file-sink and MCE records (the last two
    converted to MCP lines) from `systemMetadata.lastObserved` and `default_actor`. The aspect JSON is
    `aspect.value` as given, else the object `aspect.json` (null on DELETE); a PATCH's is its patch
    document, which refine applies. `version` is `systemMetadata.version` as a number (null when absent).

    Args:
        lines_df: rows with LINE_COLUMNS.
        kind: mcl, mcp, file-sink or mce.
        default_actor: the actor of records that carry none (settings.ingest.default_actor).
        max_record_bytes: records longer than this (UTF-8 bytes) are quarantined.

    Returns:
        STAGED_COLUMNS plus SNAPSHOT_FIELDS.

    Raises:
        InputError: for a kind that is not an aspect-snapshot kind, or a bad limit.
    """
    if check_kind(kind) not in (MCL, MCP, FILE_SINK, MCE):
        raise InputError(f"kind: {kind!r} is not an aspect snapshot kind (mcl, mcp, file-sink, mce)")
    check_limit(max_record_bytes)
    parsed_df = lines_df.select(
        *LINE_COLUMNS, F.from_json(F.col("value"), SNAPSHOT_ENVELOPE, JSON_OPTIONS).alias("r")
    ).select(
        *LINE_COLUMNS,
        "r",
        F.from_json(F.col("r.systemMetadata"), SYSTEM_METADATA, JSON_OPTIONS).alias("sm"),
        # The aspect as text (`value`), or as the object itself (`json`, the file sink's form on one
        # line), looked up in the line only where `value` is missing: a `json` field in the envelope,
        # or an expression in place of the column, cost every record 15-20%.
        F.coalesce(F.col("r.aspect.value"), json_at("$.aspect.json")).alias("aspect_text"),
    )
    urn, aspect_name, change_type = F.col("r.entityUrn"), F.col("r.aspectName"), F.col("r.changeType")
    aspect_value = F.col("aspect_text")
    is_patch = change_type == PATCH
    # A patch document may be a list of operations; every other aspect is one JSON object. The list
    # patterns run only for the rare values that fail the object ones.
    opens = F.when(aspect_value.rlike(r"^[ \t\r\n]*\{"), F.lit(True)).otherwise(
        is_patch & aspect_value.rlike(r"^[ \t\r\n]*\[")
    )
    closes = F.when(aspect_value.rlike(r"\}[ \t\r\n]*\z"), F.lit(True)).otherwise(
        is_patch & aspect_value.rlike(r"\][ \t\r\n]*\z")
    )
    version_text = F.col("sm.version")
    if kind == MCL:
        created_time, created_actor = F.col("r.created.time"), F.col("r.created.actor")
        time_checks = created_checks()
    else:
        created_time, created_actor = F.col("sm.lastObserved"), F.lit(default_actor)
        time_checks = last_observed_checks()
    checks = [
        size_check(max_record_bytes),
        missing_fields_check({"entityUrn": urn, "aspectName": aspect_name, "changeType": change_type}, "entityUrn"),
        (F.trim(aspect_name) == "", message("aspectName", quoted_value(aspect_name), " is empty")),
        urn_check(urn, "entityUrn"),
        (
            ~change_type.isin(*CHANGE_TYPES),
            message("changeType", quoted_value(change_type), f" is not one of {', '.join(CHANGE_TYPES)}"),
        ),
        (
            (change_type != DELETE) & aspect_value.isNull(),
            F.when(
                json_at("$.aspect").isNull(), F.concat(F.lit("aspect: missing (changeType "), change_type, F.lit(")"))
            ).otherwise(F.lit("aspect.value: missing")),
        ),
        (
            (change_type != DELETE) & F.get_json_object(aspect_value, "$").isNull(),
            message("aspect.value", quoted_value(aspect_value), " is not valid JSON"),
        ),
        (
            (change_type != DELETE) & ~opens,
            message("aspect.value", quoted_value(aspect_value), " is not a JSON object"),
        ),
        (
            # The JSON reader stops after the first value; text after it means a damaged record.
            (change_type != DELETE) & ~closes,
            message("aspect.value", quoted_value(aspect_value), " has text after the JSON object"),
        ),
        *time_checks,
        (
            version_text.isNotNull() & ~version_text.rlike(r"^[0-9]{1,18}$"),
            message("systemMetadata.version", quoted_value(version_text), " is not a whole number"),
        ),
        # A patch document is checked as one (null when it is good: the record lands), never as the
        # aspect; as a branch of its own, so other records pay one comparison for it.
        (is_patch, patch_problem(aspect_value)),
    ]
    typed = {
        "entity_urn": urn,
        "entity_type": F.coalesce(F.col("r.entityType"), F.regexp_extract(urn, r"^urn:li:([^:]+):", 1)),
        "aspect_name": aspect_name,
        "change_type": change_type,
        "aspect_json": F.when(change_type != DELETE, aspect_value),
        "version": F.when(version_text.rlike(r"^[0-9]{1,18}$"), version_text.cast("bigint")),
        "created_time": created_time,
        "created_actor": created_actor,
        "system_metadata": F.col("r.systemMetadata"),
        "run_id": F.col("sm.runId"),
        "source_kind": F.lit(kind),
    }
    # Last, and as the one reference to it: the check looks up the aspect's fields in its JSON text.
    aspect_check = F.when(change_type != DELETE, aspect_problem(aspect_name, aspect_value))
    return _staged(parsed_df, typed, checks, SNAPSHOT_HASH_FIELDS, max_record_bytes, aspect_check)


def patch_problem(patch_json: Column) -> Column:
    """Why a PATCH proposal's aspect is not a JSON Patch DataHub takes, naming the value; null when it is.

    The document is a list of operations or `{"patch": [...], "arrayPrimaryKeys": {...}}`; every operation
    is one of PATCH_OPS with a `path` that starts with `/`. Whether it applies to the aspect it patches
    is for refine to find out.
    """
    # By the first character: the engine reads one object as a list of one when asked for a list.
    operations = F.when(
        patch_json.rlike(r"^[ \t\r\n]*\["), F.from_json(patch_json, PATCH_OPERATIONS, JSON_OPTIONS)
    ).otherwise(F.from_json(patch_json, f"patch {PATCH_OPERATIONS}", JSON_OPTIONS)["patch"])
    bad_op = F.filter(operations, lambda o: o["op"].isNull() | ~F.lower(o["op"]).isin(*PATCH_OPS))
    bad_path = F.filter(operations, lambda o: o["path"].isNull() | ~o["path"].startswith("/"))
    return (
        F.when(
            operations.isNull(),
            message(
                "aspect.value",
                quoted_value(patch_json),
                " is not a JSON Patch (a list of operations, or {patch, arrayPrimaryKeys})",
            ),
        )
        .when(
            F.size(bad_op) > 0,
            F.coalesce(
                message("aspect.value.patch.op", quoted_value(bad_op[0]["op"]), f" is not one of {', '.join(PATCH_OPS)}"),
                F.lit("aspect.value.patch.op: missing"),
            ),
        )
        .when(
            F.size(bad_path) > 0,
            F.coalesce(
                message("aspect.value.patch.path", quoted_value(bad_path[0]["path"]), " does not start with '/'"),
                F.lit("aspect.value.patch.path: missing"),
            ),
        )
    )


def parse_usage_lines(lines_df: DataFrame, *, max_record_bytes: int) -> DataFrame:
    """Parse DataHub usage / audit event documents into staged usage rows with a quarantine reason.

    Every field of the document is typed as given (loginSource too: gold normalizes it); the document
    itself is kept as `raw_document`. `trace_id` is `traceId`, else the API's `telemetryTraceId`.

    Args:
        lines_df: rows with LINE_COLUMNS.
        max_record_bytes: documents longer than this (UTF-8 bytes) are quarantined.

    Returns:
        STAGED_COLUMNS plus USAGE_FIELDS (and `source_kind` = usage).
    """
    check_limit(max_record_bytes)
    parsed_df = lines_df.select(*LINE_COLUMNS, F.from_json(F.col("value"), USAGE_DOCUMENT, JSON_OPTIONS).alias("r"))
    event_type, actor, timestamp = F.col("r.type"), F.col("r.actorUrn"), F.col("r.timestamp")
    entity_urn = F.col("r.entityUrn")
    checks = [
        size_check(max_record_bytes),
        missing_fields_check(
            {"type": event_type, "actorUrn": actor, "timestamp": timestamp},
            "actorUrn",
            epoch_ms_problem("$.timestamp", "timestamp"),
        ),
        (
            ~event_type.isin(*USAGE_EVENT_TYPES),
            message("type", quoted_value(event_type), " is not a known usage event type"),
        ),
        urn_check(actor, "actorUrn"),
        (entity_urn.isNotNull() & ~entity_urn.rlike(URN_PATTERN), urn_message(entity_urn, "entityUrn")),
    ]
    typed = {
        "event_type": event_type,
        "actor_urn": actor,
        "timestamp": timestamp,
        "entity_urn": entity_urn,
        "entity_type": F.col("r.entityType"),
        "aspect_name": F.col("r.aspectName"),
        "event_source": F.col("r.eventSource"),
        "source_ip": F.col("r.sourceIP"),
        "user_agent": F.col("r.userAgent"),
        "trace_id": F.coalesce(F.col("r.traceId"), F.col("r.telemetryTraceId")),
        "login_source": F.col("r.loginSource"),
        "login_denial_reason": F.col("r.loginDenialReason"),
        "usage_source": F.col("r.usageSource"),
        "raw_document": F.col("value"),
        "source_kind": F.lit(USAGE),
    }
    return _staged(parsed_df, typed, checks, USAGE_HASH_FIELDS, max_record_bytes)


def _staged(
    parsed_df: DataFrame,
    typed: Mapping[str, Column],
    checks: Sequence[tuple[Column, Column]],
    hash_fields: Sequence[str],
    max_record_bytes: int,
    last_problem: Column | None = None,
) -> DataFrame:
    """The staged rows: `checks` in order, then `last_problem` (a reason, or null) for records that pass them."""
    blank = F.col("value").rlike(r"^\s*$")
    otherwise = F.lit(None).cast("string") if last_problem is None else last_problem
    reason = F.when(blank, F.lit(None).cast("string")).otherwise(first_problem(checks, otherwise))
    shaped_df = parsed_df.select(
        *LINE_ORIGIN_COLUMNS,
        blank.alias("blank"),
        reason.alias("reason"),
        F.col("value"),
        *[column.alias(name) for name, column in typed.items()],
    )
    return shaped_df.select(
        *LINE_ORIGIN_COLUMNS,
        "blank",
        F.when(is_landable(), record_hash(hash_fields)).alias("record_hash"),
        "reason",
        F.when(F.col("reason").isNotNull(), F.substring(F.col("value"), 1, max_record_bytes)).alias("raw_text"),
        *typed.keys(),
    )


def is_landable() -> Column:
    """True for a staged row that passed validation (not blank, no reason): it lands and has a record hash."""
    return F.col("reason").isNull() & ~F.col("blank")


def record_hash(fields: Iterable[str]) -> Column:
    """Return the SHA-256 (hex) of the given columns, null-safe and unambiguous on every engine.

    Each value is written as `=<text>` (or `-` for null) and the values are joined by the unit separator,
    so `(null, "")` and `("", null)` differ.
    """
    parts = [F.coalesce(F.concat(F.lit("="), F.col(name).cast("string")), F.lit("-")) for name in fields]
    return F.sha2(F.concat_ws("\u001f", *parts), 256)
