"""Turn raw input lines into bronze rows with Spark Column expressions: typed fields, quarantine reasons, hashes.

Every function here is a pure DataFrame -> DataFrame transform (or builds Columns, or is plain Python).
A line DataFrame has the columns of LINE_COLUMNS: `value` is one input line (one record); for a text
read of one file, `mid` (monotonically_increasing_id) orders the lines WITHIN each read partition and
`line_crc` (CRC-32 of the line) lets `order_partitions` check which partition comes first in the file
(the embedded engine does not always number a file's partitions in file order); `line_number` is set
instead when the reader numbered the lines itself.

Validation never drops a record: each staged row either has `reason` null (it lands) or a reason that
names the field and the value (it goes to quarantine). Expensive checks (JSON re-parsing to name a bad
value) sit inside CASE branches so they only run for records that already failed a cheap check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from bronze.aspects import JSON_OPTIONS, aspect_problem, quoted_value
from bronze.formats import (
    CHANGE_TYPES,
    DELETE,
    FILE_SINK,
    MCL,
    MCP,
    URN_PATTERN,
    USAGE,
    USAGE_EVENT_TYPES,
    check_kind,
)
from conf.errors import InputError

LINE_COLUMNS = ("file_index", "source_file", "mid", "line_crc", "line_number", "value")

# The MCL / MCP envelope. systemMetadata is kept as JSON text (the column of the same name) and parsed
# again for the few fields bronze types; times are BIGINT so that only JSON integers parse.
SNAPSHOT_ENVELOPE = (
    "entityType STRING, entityUrn STRING, changeType STRING, aspectName STRING, "
    "aspect STRUCT<value: STRING, contentType: STRING>, systemMetadata STRING, "
    "created STRUCT<time: BIGINT, actor: STRING>"
)
SYSTEM_METADATA = "lastObserved BIGINT, runId STRING, version STRING"
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
    "line_number",
    "blank",
    "record_hash",
    "reason",
    "raw_text",
)

_PARTITION_BITS = 33  # monotonically_increasing_id(): partition index above bit 33, row below
_FILE_KEY_FACTOR = 1 << 31
# A line's key in filter_out_lines: file_index above bit 40 (a trillion lines per file), the line below.
_LINE_KEY_FACTOR = 1 << 40


def to_lines(text_df: DataFrame, file_index: int, source_file: str) -> DataFrame:
    """Return the lines of ONE file read with `spark.read.text`, tagged with the file, a row id and a CRC.

    The row id (`mid`) increases with the line within each read partition; `with_line_numbers` turns it
    into a line number once the partitions are put in file order (`order_partitions`).

    Args:
        text_df: `spark.read.text(path)` of a single file (column `value`).
        file_index: the file's position in the batch.
        source_file: the file's path as recorded in provenance columns.
    """
    return text_df.select(
        F.lit(file_index).cast("int").alias("file_index"),
        F.lit(source_file).alias("source_file"),
        F.monotonically_increasing_id().alias("mid"),
        F.crc32(F.col("value").cast("binary")).alias("line_crc"),
        F.lit(None).cast("bigint").alias("line_number"),
        _without_byte_order_mark(F.col("value")).alias("value"),
    )


def to_numbered_lines(text_df: DataFrame, file_index: int, source_file: str) -> DataFrame:
    """Return the lines of a file written as `<line number>\\t<record>` (converted input), tagged.

    Args:
        text_df: `spark.read.text` of the converted file.
        file_index: the original file's position in the batch.
        source_file: the original file's path.
    """
    return text_df.select(
        F.lit(file_index).cast("int").alias("file_index"),
        F.lit(source_file).alias("source_file"),
        *_numbered_line_columns("value"),
    )


def to_numbered_lines_of_files(text_df: DataFrame, sources: Mapping[int, str]) -> DataFrame:
    """Return the lines of several files written into one copy as `<file index>\\t<line number>\\t<record>`, tagged.

    Args:
        text_df: `spark.read.text` of the copy.
        sources: file index -> the original file's path, for every file in the copy.
    """
    index = F.substring_index(F.col("value"), "\t", 1).cast("int")
    return text_df.select(index.alias("file_index"), _after_first_tab("value").alias("numbered")).select(
        "file_index",
        _looked_up(F.col("file_index"), sorted(sources.items())).alias("source_file"),
        *_numbered_line_columns("numbered"),
    )


def _numbered_line_columns(line: str) -> list[Column]:
    """mid, line_crc, line_number and value of the `<line number>\\t<record>` text in column `line`."""
    return [
        F.lit(None).cast("bigint").alias("mid"),
        F.lit(None).cast("bigint").alias("line_crc"),
        F.substring_index(F.col(line), "\t", 1).cast("bigint").alias("line_number"),
        _without_byte_order_mark(_after_first_tab(line)).alias("value"),
    ]


def _after_first_tab(column: str) -> Column:
    return F.expr(f"substr({column}, instr({column}, '\t') + 1)")


def _without_byte_order_mark(line: Column) -> Column:
    """The line without a leading U+FEFF: editors on Windows start UTF-8 files with it, outside the record."""
    return F.when(line.startswith("\ufeff"), F.substring(line, 2, 1 << 30)).otherwise(line)


def parse_snapshot_lines(lines_df: DataFrame, kind: str, *, default_actor: str, max_record_bytes: int) -> DataFrame:
    """Parse DataHub MCL / MCP / file-sink records into staged aspect-snapshot rows with a quarantine reason.

    MCL records take the time and actor from `created`; MCP and file-sink records (converted to MCP
    lines) from `systemMetadata.lastObserved` and `default_actor`. The aspect JSON is `aspect.value`
    as given (null on DELETE); `version` is `systemMetadata.version` as a number (null when absent).

    Args:
        lines_df: rows with LINE_COLUMNS.
        kind: mcl, mcp or file-sink.
        default_actor: the actor of records that carry none (settings.ingest.default_actor).
        max_record_bytes: records longer than this (UTF-8 bytes) are quarantined.

    Returns:
        STAGED_COLUMNS plus SNAPSHOT_FIELDS.

    Raises:
        InputError: for a kind that is not an aspect-snapshot kind, or a bad limit.
    """
    if check_kind(kind) not in (MCL, MCP, FILE_SINK):
        raise InputError(f"kind: {kind!r} is not an aspect snapshot kind (mcl, mcp, file-sink)")
    _check_limit(max_record_bytes)
    parsed_df = lines_df.select(
        *LINE_COLUMNS, F.from_json(F.col("value"), SNAPSHOT_ENVELOPE, JSON_OPTIONS).alias("r")
    ).select(*LINE_COLUMNS, "r", F.from_json(F.col("r.systemMetadata"), SYSTEM_METADATA, JSON_OPTIONS).alias("sm"))
    urn, aspect_name, change_type = F.col("r.entityUrn"), F.col("r.aspectName"), F.col("r.changeType")
    aspect_value = F.col("r.aspect.value")
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
            (change_type != DELETE) & ~aspect_value.rlike(r"^[ \t\r\n]*\{"),
            _message("aspect.value", quoted_value(aspect_value), " is not a JSON object"),
        ),
        (
            # The JSON reader stops after the first value; text after it means a damaged record.
            (change_type != DELETE) & ~aspect_value.rlike(r"\}[ \t\r\n]*\z"),
            _message("aspect.value", quoted_value(aspect_value), " has text after the JSON object"),
        ),
        *time_checks,
        (
            version_text.isNotNull() & ~version_text.rlike(r"^[0-9]{1,18}$"),
            _message("systemMetadata.version", quoted_value(version_text), " is not a whole number"),
        ),
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


# ----------------------------------------------------------------------------------------------
# Batch shaping: line numbers, landable vs quarantined rows, duplicates, table rows.
# ----------------------------------------------------------------------------------------------


def to_partition_summary(staged_df: DataFrame) -> DataFrame:
    """Summarize staged rows per (file_index, read partition): rows, CRCs of the first and last line, counts.

    Converted (numbered) input has no read partitions: its rows form one group with a null partition.

    Returns:
        file_index, partition, rows, first_crc, last_crc, records_read (non-blank), records_quarantined.
    """
    return staged_df.groupBy("file_index", F.shiftright(F.col("mid"), _PARTITION_BITS).alias("partition")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.min_by("line_crc", "mid").alias("first_crc"),
        F.max_by("line_crc", "mid").alias("last_crc"),
        F.sum(F.when(~F.col("blank"), 1).otherwise(0)).cast("bigint").alias("records_read"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).cast("bigint").alias("records_quarantined"),
    )


def order_partitions(
    partitions: Sequence[tuple[int, int, int, int]], crc_at: Callable[[int], int | None]
) -> list[int] | None:
    """Put the read partitions of one file in file order, checking each against the file's own lines.

    The partitions of a text read are consecutive runs of lines; the engine may number them in another
    order. Starting at line 1, the partition whose first line has the CRC of the file's line there comes
    next, and its last line must match too. Ties (the same first line) are broken by the last line.

    Args:
        partitions: (partition, rows, first_crc, last_crc) for each non-empty partition.
        crc_at: the CRC-32 of the file's line n (1-based), None past the end; called with line numbers
            that never decrease.

    Returns:
        The partition ids in file order, or None when the partitions do not tile the file's lines
        (the caller then numbers the lines itself).
    """
    remaining = sorted(partitions, key=lambda p: p[1])
    order: list[int] = []
    start = 1
    while remaining:
        first = crc_at(start)
        candidates = [p for p in remaining if p[2] == first]
        # Check last lines in increasing line order, as crc_at only moves forward.
        matching = [p for p in candidates if crc_at(start + p[1] - 1) == p[3]]
        if first is None or len(matching) != 1:
            return None
        chosen = matching[0]
        order.append(chosen[0])
        remaining.remove(chosen)
        start += chosen[1]
    # The file must end where the last partition does.
    return order if crc_at(start) is None else None


def line_offsets(ordered: Mapping[int, Sequence[tuple[int, int]]]) -> dict[int, int]:
    """Return, per (file, read partition) key, how many lines of the file come before that partition.

    Args:
        ordered: file_index -> [(partition, rows), ...] in FILE order (see `order_partitions`).

    Returns:
        `file_index * 2**31 + partition` -> lines before it (what `with_line_numbers` looks up).
    """
    offsets: dict[int, int] = {}
    for file_index, parts in ordered.items():
        seen = 0
        for partition, rows in parts:
            offsets[int(file_index) * _FILE_KEY_FACTOR + int(partition)] = seen
            seen += int(rows)
    return offsets


def with_line_numbers(staged_df: DataFrame, offsets: Mapping[int, int]) -> DataFrame:
    """Fill `line_number` of text-read rows from their row id and the partition offsets (1-based).

    Rows that already carry a line number (converted input) keep it.
    """
    if not offsets:
        return staged_df.withColumn("line_number", F.col("line_number"))
    partition = F.shiftright(F.col("mid"), _PARTITION_BITS)
    key = F.col("file_index").cast("bigint") * F.lit(_FILE_KEY_FACTOR) + partition
    within = F.col("mid") - F.shiftleft(partition, _PARTITION_BITS)
    computed = _looked_up(key, sorted(offsets.items())) + within + F.lit(1)
    return staged_df.withColumn(
        "line_number", F.when(F.col("line_number").isNull(), computed.cast("bigint")).otherwise(F.col("line_number"))
    )


def _looked_up(key: Column, pairs: Sequence[tuple[int, int | str]]) -> Column:
    """The value paired with `key` in `pairs` (sorted by key), as a balanced tree of comparisons.

    A literal map's lookup cost 0.9 s per 1M rows; this costs log2(len(pairs)) comparisons per row.
    """
    if len(pairs) == 1:
        return F.when(key == F.lit(pairs[0][0]), F.lit(pairs[0][1]))
    middle = len(pairs) // 2
    return F.when(key < F.lit(pairs[middle][0]), _looked_up(key, pairs[:middle])).otherwise(
        _looked_up(key, pairs[middle:])
    )


def filter_landable(staged_df: DataFrame) -> DataFrame:
    """Keep the records that passed validation (not blank, no reason)."""
    return staged_df.filter(F.col("reason").isNull() & ~F.col("blank"))


def filter_quarantined(staged_df: DataFrame) -> DataFrame:
    """Keep the records that failed validation."""
    return staged_df.filter(F.col("reason").isNotNull())


def to_duplicate_hashes(landable_df: DataFrame) -> DataFrame:
    """Return the record hashes that occur more than once among landable rows (column `record_hash`)."""
    return landable_df.groupBy("record_hash").count().filter(F.col("count") > 1).select("record_hash")


def _by_occurrence() -> WindowSpec:
    """The copies of each record hash in the order that makes one of them the first: by file, then line.

    Built per call: classic Spark needs a running session to build a window.
    """
    return Window.partitionBy("record_hash").orderBy("file_index", "line_number")


def to_repeated_lines(landable_df: DataFrame) -> DataFrame:
    """Return the (file_index, line_number) of every landable row whose record hash an earlier row has.

    Earlier: by file, then line. Only the three key columns are read and sorted, so a batch of wide
    rows with a few repeats costs a narrow aggregation, not a sort of every row (`filter_out_lines`
    then drops them).
    """
    lines_df = landable_df.select("record_hash", "file_index", "line_number")
    return (
        lines_df.join(to_duplicate_hashes(lines_df), "record_hash", "left_semi")
        .withColumn("_occurrence", F.row_number().over(_by_occurrence()))
        .filter("_occurrence > 1")
        .select("file_index", "line_number")
    )


def filter_out_lines(landable_df: DataFrame, lines: Sequence[tuple[int, int]]) -> DataFrame:
    """Drop the rows at the given (file_index, line_number) pairs (a literal set: no join of the wide rows).

    A row without a line number is kept: no pair names it.
    """
    if not lines:
        return landable_df
    line_key = F.col("file_index").cast("bigint") * F.lit(_LINE_KEY_FACTOR) + F.col("line_number")
    listed = line_key.isin([int(f) * _LINE_KEY_FACTOR + int(n) for f, n in lines])
    return landable_df.filter(~F.coalesce(listed, F.lit(False)))


def drop_batch_duplicates(landable_df: DataFrame) -> DataFrame:
    """Keep the first occurrence (by file, then line) of each record hash within the batch.

    A sort of every row: for batches whose repeats are too many to pass as `filter_out_lines`' literals.
    """
    return (
        landable_df.withColumn("_occurrence", F.row_number().over(_by_occurrence()))
        .filter("_occurrence = 1")
        .drop("_occurrence")
    )


def drop_landed_duplicates(landable_df: DataFrame, landed_hashes_df: DataFrame) -> DataFrame:
    """Drop the rows whose record hash is already landed.

    Args:
        landable_df: this batch's landable rows.
        landed_hashes_df: the `record_hash` column of the bronze rows that could match.
    """
    return landable_df.join(landed_hashes_df.select("record_hash"), "record_hash", "left_anti")


def with_batch(df: DataFrame, batch_id: str, landed_at: datetime, time_column: str = "landed_at") -> DataFrame:
    """Add the batch provenance columns: `batch_id`, the landing time (UTC) and its `land_date`."""
    return df.withColumns(
        {
            "batch_id": F.lit(batch_id),
            time_column: F.lit(landed_at).cast("timestamp"),
            "land_date": F.lit(landed_at.date()),
        }
    )


def to_quarantine_rows(quarantined_df: DataFrame, batch_id: str, quarantined_at: datetime) -> DataFrame:
    """Shape quarantined records (staged rows, or rows with raw_text/source_file/line_number/source_kind/reason)
    as bronze.quarantine rows; `field` is the field the reason names."""
    shaped_df = quarantined_df.select(
        "raw_text",
        "source_file",
        "line_number",
        F.col("source_kind").alias("kind"),
        "reason",
        F.substring_index(F.col("reason"), ":", 1).alias("field"),
    )
    return with_batch(shaped_df, batch_id, quarantined_at, time_column="quarantined_at")
