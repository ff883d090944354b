"""Turn raw input lines into bronze rows with Spark Column expressions: typed fields, quarantine reasons, hashes.

Every function here is a pure DataFrame -> DataFrame transform (or builds Columns, or is plain Python)
over line DataFrames (`bronze.lines.LINE_COLUMNS`).

Validation never drops a record: each staged row either has `reason` null (it lands) or a reason that
names the field and the value (it goes to quarantine). Expensive checks (JSON re-parsing to name a bad
value) sit inside CASE branches so they only run for records that already failed a cheap check.
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

# The typed columns of each family, in bronze table order.
SNAPSHOT_FIELDS = (
    "entity_urn",
    "entity_type",
    "aspect_name",
    "change_type",
    "aspect_json",
    "version",
    "created_time",
    "created_actor",
    "system_metadata",
    "run_id",
    "source_kind",
)
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
SNAPSHOT_HASH_FIELDS = (
    "source_kind",
    "entity_urn",
    "entity_type",
    "aspect_name",
    "change_type",
    "aspect_json",
    "version",
    "created_time",
    "created_actor",
)
# A usage event is the same event when every typed field is equal (key order or spacing of the
# document does not matter).
USAGE_HASH_FIELDS = USAGE_FIELDS[:-1]

# Columns every staged row carries besides its family's fields.
STAGED_COLUMNS = (
    "file_index",
    "source_file",
    "mid",
    "line_crc",
    "line_bytes",
    "line_number",
    "blank",
    "record_hash",
    "reason",
    "raw_text",
)


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
    _check_limit(max_record_bytes)
    parsed_df = lines_df.select(
        *LINE_COLUMNS, F.from_json(F.col("value"), SNAPSHOT_ENVELOPE, JSON_OPTIONS).alias("r")
    ).select(
        *LINE_COLUMNS,
        "r",
        F.from_json(F.col("r.systemMetadata"), SYSTEM_METADATA, JSON_OPTIONS).alias("sm"),
        # The aspect as text (`value`), or as the object itself (`json`, the file sink's form on one
        # line), looked up in the line only where `value` is missing: a `json` field in the envelope,
        # or an expression in place of the column, cost every record 15-20%.
        F.coalesce(F.col("r.aspect.value"), _json_at("$.aspect.json")).alias("aspect_text"),
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
        time_checks = _created_checks()
    else:
        created_time, created_actor = F.col("sm.lastObserved"), F.lit(default_actor)
        time_checks = _last_observed_checks()
    checks = [
        _size_check(max_record_bytes),
        (
            urn.isNull() | aspect_name.isNull() | change_type.isNull(),
            _first_problem(
                [
                    _malformed_check("$.entityUrn", urn),
                    _object_check(),
                    (urn.isNull(), F.lit("entityUrn: missing")),
                    (aspect_name.isNull(), F.lit("aspectName: missing")),
                ],
                F.lit("changeType: missing"),
            ),
        ),
        (F.trim(aspect_name) == "", _message("aspectName", quoted_value(aspect_name), " is empty")),
        _urn_check(urn, "entityUrn"),
        (
            ~change_type.isin(*CHANGE_TYPES),
            _message("changeType", quoted_value(change_type), f" is not one of {', '.join(CHANGE_TYPES)}"),
        ),
        (
            (change_type != DELETE) & aspect_value.isNull(),
            F.when(
                _json_at("$.aspect").isNull(), F.concat(F.lit("aspect: missing (changeType "), change_type, F.lit(")"))
            ).otherwise(F.lit("aspect.value: missing")),
        ),
        (
            (change_type != DELETE) & F.get_json_object(aspect_value, "$").isNull(),
            _message("aspect.value", quoted_value(aspect_value), " is not valid JSON"),
        ),
        (
            (change_type != DELETE) & ~opens,
            _message("aspect.value", quoted_value(aspect_value), " is not a JSON object"),
        ),
        (
            # The JSON reader stops after the first value; text after it means a damaged record.
            (change_type != DELETE) & ~closes,
            _message("aspect.value", quoted_value(aspect_value), " has text after the JSON object"),
        ),
        *time_checks,
        (
            version_text.isNotNull() & ~version_text.rlike(r"^[0-9]{1,18}$"),
            _message("systemMetadata.version", quoted_value(version_text), " is not a whole number"),
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
            _message(
                "aspect.value",
                quoted_value(patch_json),
                " is not a JSON Patch (a list of operations, or {patch, arrayPrimaryKeys})",
            ),
        )
        .when(
            F.size(bad_op) > 0,
            F.coalesce(
                _message("aspect.value.patch.op", quoted_value(bad_op[0]["op"]), f" is not one of {', '.join(PATCH_OPS)}"),
                F.lit("aspect.value.patch.op: missing"),
            ),
        )
        .when(
            F.size(bad_path) > 0,
            F.coalesce(
                _message("aspect.value.patch.path", quoted_value(bad_path[0]["path"]), " does not start with '/'"),
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
    _check_limit(max_record_bytes)
    parsed_df = lines_df.select(*LINE_COLUMNS, F.from_json(F.col("value"), USAGE_DOCUMENT, JSON_OPTIONS).alias("r"))
    event_type, actor, timestamp = F.col("r.type"), F.col("r.actorUrn"), F.col("r.timestamp")
    entity_urn = F.col("r.entityUrn")
    checks = [
        _size_check(max_record_bytes),
        (
            event_type.isNull() | actor.isNull() | timestamp.isNull(),
            _first_problem(
                [
                    _malformed_check("$.actorUrn", actor),
                    _object_check(),
                    (event_type.isNull(), F.lit("type: missing")),
                    (actor.isNull(), F.lit("actorUrn: missing")),
                ],
                _epoch_ms_problem("$.timestamp", "timestamp"),
            ),
        ),
        (
            ~event_type.isin(*USAGE_EVENT_TYPES),
            _message("type", quoted_value(event_type), " is not a known usage event type"),
        ),
        _urn_check(actor, "actorUrn"),
        (entity_urn.isNotNull() & ~entity_urn.rlike(URN_PATTERN), _urn_message(entity_urn, "entityUrn")),
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
    reason = F.when(blank, F.lit(None).cast("string")).otherwise(_first_problem(checks, otherwise))
    shaped_df = parsed_df.select(
        "file_index",
        "source_file",
        "mid",
        "line_crc",
        "line_bytes",
        "line_number",
        blank.alias("blank"),
        reason.alias("reason"),
        F.col("value"),
        *[column.alias(name) for name, column in typed.items()],
    )
    return shaped_df.select(
        "file_index",
        "source_file",
        "mid",
        "line_crc",
        "line_bytes",
        "line_number",
        "blank",
        F.when(F.col("reason").isNull() & ~F.col("blank"), record_hash(hash_fields)).alias("record_hash"),
        "reason",
        F.when(F.col("reason").isNotNull(), F.substring(F.col("value"), 1, max_record_bytes)).alias("raw_text"),
        *typed.keys(),
    )


def record_hash(fields: Iterable[str]) -> Column:
    """Return the SHA-256 (hex) of the given columns, null-safe and unambiguous on every engine.

    Each value is written as `=<text>` (or `-` for null) and the values are joined by the unit separator,
    so `(null, "")` and `("", null)` differ.
    """
    parts = [F.coalesce(F.concat(F.lit("="), F.col(name).cast("string")), F.lit("-")) for name in fields]
    return F.sha2(F.concat_ws("\u001f", *parts), 256)


# ----------------------------------------------------------------------------------------------
# Checks: (condition, reason) pairs; the first condition that holds gives the record's reason.
# ----------------------------------------------------------------------------------------------


def _first_problem(checks: Sequence[tuple[Column, Column]], otherwise: Column) -> Column:
    expression = None
    for condition, message in checks:
        expression = F.when(condition, message) if expression is None else expression.when(condition, message)
    return expression.otherwise(otherwise) if expression is not None else otherwise


def _size_check(max_record_bytes: int) -> tuple[Column, Column]:
    size = F.octet_length(F.col("value"))
    return (
        size > F.lit(max_record_bytes),
        F.concat(
            F.lit("record: "),
            size.cast("string"),
            F.lit(f" bytes is over ingest.max_record_bytes ({max_record_bytes}); raw_text keeps the first "),
            F.lit(str(max_record_bytes)),
            F.lit(" characters"),
        ),
    )


def _malformed_check(key_path: str, key_column: Column) -> tuple[Column, Column]:
    # Malformed text parses to nulls. An engine that still finds the key field in the text means the
    # parser refused the line as a whole (trailing text, control characters): malformed as well.
    condition = _json_at("$").isNull() | (key_column.isNull() & _json_at(key_path).isNotNull())
    return condition, _message("record", quoted_value(F.col("value")), " is not valid JSON")


def _object_check() -> tuple[Column, Column]:
    return ~F.col("value").rlike(r"^\s*\{"), _message("record", quoted_value(F.col("value")), " is not a JSON object")


def _urn_check(column: Column, field: str) -> tuple[Column, Column]:
    return ~column.rlike(URN_PATTERN), _urn_message(column, field)


def _urn_message(column: Column, field: str) -> Column:
    return _message(field, quoted_value(column), " is not urn:li:<type>:<id>")


def _epoch_ms_problem(path: str, field: str) -> Column:
    """Why an epoch-ms field parsed to null: absent, or present but not a JSON integer."""
    raw = _json_at(path)
    return F.when(raw.isNull(), F.lit(f"{field}: missing")).otherwise(
        _message(field, quoted_value(raw), " is not an integer epoch-ms")
    )


def _created_checks() -> list[tuple[Column, Column]]:
    created = F.col("r.created")
    actor = F.col("r.created.actor")
    return [
        (
            created.isNull(),
            F.when(
                _json_at("$.created").isNull(),
                F.lit("created: missing (an MCL record carries created.time and created.actor)"),
            ).otherwise(_message("created", quoted_value(_json_at("$.created")), " is not an object {time, actor}")),
        ),
        (F.col("r.created.time").isNull(), _epoch_ms_problem("$.created.time", "created.time")),
        (actor.isNull(), F.lit("created.actor: missing")),
        _urn_check(actor, "created.actor"),
    ]


def _last_observed_checks() -> list[tuple[Column, Column]]:
    return [
        (
            F.col("sm.lastObserved").isNull(),
            F.when(
                _json_at("$.systemMetadata").isNull(),
                F.lit("systemMetadata: missing (an MCP record takes its time from systemMetadata.lastObserved)"),
            ).otherwise(_epoch_ms_problem("$.systemMetadata.lastObserved", "systemMetadata.lastObserved")),
        )
    ]


def _json_at(path: str) -> Column:
    return F.get_json_object(F.col("value"), path)


def _message(field: str, quoted_value: Column, text: str) -> Column:
    return F.concat(F.lit(f"{field}: "), quoted_value, F.lit(text))


def _check_limit(max_record_bytes: int) -> None:
    if not isinstance(max_record_bytes, int) or isinstance(max_record_bytes, bool) or max_record_bytes <= 0:
        raise InputError(f"max_record_bytes: {max_record_bytes!r} must be a positive integer")
