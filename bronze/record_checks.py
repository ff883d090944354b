"""The checks of bronze records: (condition, reason) pairs over a line's text and its parsed fields.

A record's reason is the reason of the first check whose condition holds (`first_problem`); each reason
names the field and quotes the value. Expensive checks (a JSON path looked up in the text again) sit
inside the reasons, so they run only for records that already failed a cheap condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from bronze.aspects import quoted_value
from bronze.formats import URN_PATTERN
from conf.errors import InputError


def missing_fields_check(
    fields: Mapping[str, Column], key_field: str, last_problem: Column | None = None
) -> tuple[Column, Column]:
    """A record whose required fields parse to null: malformed text, not an object, or the first field missing.

    Args:
        fields: the required fields' names in the record -> their parsed columns, in the order reported.
        key_field: the field whose presence in the text tells a refused line from a missing field.
        last_problem: the reason when only the last field is missing (default `<field>: missing`).
    """
    names = list(fields)
    condition = reduce(lambda either, column: either | column, (column.isNull() for column in fields.values()))
    checks = [
        malformed_check(f"$.{key_field}", fields[key_field]),
        object_check(),
        *((fields[name].isNull(), F.lit(f"{name}: missing")) for name in names[:-1]),
    ]
    return condition, first_problem(checks, F.lit(f"{names[-1]}: missing") if last_problem is None else last_problem)


def first_problem(checks: Sequence[tuple[Column, Column]], otherwise: Column) -> Column:
    """The reason of the first check whose condition holds, else `otherwise`."""
    expression = None
    for condition, message in checks:
        expression = F.when(condition, message) if expression is None else expression.when(condition, message)
    return expression.otherwise(otherwise) if expression is not None else otherwise


def size_check(max_record_bytes: int) -> tuple[Column, Column]:
    """A record longer than `max_record_bytes` (UTF-8 bytes): quarantined with its first characters."""
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


def malformed_check(key_path: str, key_column: Column) -> tuple[Column, Column]:
    """Text that is not JSON: it parses to nulls, or the parser refused a line whose key field it finds."""
    # Malformed text parses to nulls. An engine that still finds the key field in the text means the
    # parser refused the line as a whole (trailing text, control characters): malformed as well.
    condition = json_at("$").isNull() | (key_column.isNull() & json_at(key_path).isNotNull())
    return condition, message("record", quoted_value(F.col("value")), " is not valid JSON")


def object_check() -> tuple[Column, Column]:
    """Text that is JSON but not an object."""
    return ~F.col("value").rlike(r"^\s*\{"), message("record", quoted_value(F.col("value")), " is not a JSON object")


def urn_check(column: Column, field: str) -> tuple[Column, Column]:
    """A field that is not an urn (`urn:li:<type>:<id>`)."""
    return ~column.rlike(URN_PATTERN), urn_message(column, field)


def urn_message(column: Column, field: str) -> Column:
    """The reason of a field that is not an urn, quoting its value."""
    return message(field, quoted_value(column), " is not urn:li:<type>:<id>")


def epoch_ms_problem(path: str, field: str) -> Column:
    """Why an epoch-ms field parsed to null: absent, or present but not a JSON integer."""
    raw = json_at(path)
    return F.when(raw.isNull(), F.lit(f"{field}: missing")).otherwise(
        message(field, quoted_value(raw), " is not an integer epoch-ms")
    )


def created_checks() -> list[tuple[Column, Column]]:
    """An MCL record's `created` (time and actor), checked in order."""
    created = F.col("r.created")
    actor = F.col("r.created.actor")
    return [
        (
            created.isNull(),
            F.when(
                json_at("$.created").isNull(),
                F.lit("created: missing (an MCL record carries created.time and created.actor)"),
            ).otherwise(message("created", quoted_value(json_at("$.created")), " is not an object {time, actor}")),
        ),
        (F.col("r.created.time").isNull(), epoch_ms_problem("$.created.time", "created.time")),
        (actor.isNull(), F.lit("created.actor: missing")),
        urn_check(actor, "created.actor"),
    ]


def last_observed_checks() -> list[tuple[Column, Column]]:
    """An MCP record's time, `systemMetadata.lastObserved`."""
    return [
        (
            F.col("sm.lastObserved").isNull(),
            F.when(
                json_at("$.systemMetadata").isNull(),
                F.lit("systemMetadata: missing (an MCP record takes its time from systemMetadata.lastObserved)"),
            ).otherwise(epoch_ms_problem("$.systemMetadata.lastObserved", "systemMetadata.lastObserved")),
        )
    ]


def json_at(path: str) -> Column:
    """The JSON value at `path` of the record's text (a string; null where there is none)."""
    return F.get_json_object(F.col("value"), path)


def message(field: str, quoted_value: Column, text: str) -> Column:
    """A reason naming the field and quoting its value."""
    return F.concat(F.lit(f"{field}: "), quoted_value, F.lit(text))


def check_limit(max_record_bytes: int) -> None:
    """Check the record size limit.

    Raises:
        InputError: for a limit that is not a positive integer.
    """
    if not isinstance(max_record_bytes, int) or isinstance(max_record_bytes, bool) or max_record_bytes <= 0:
        raise InputError(f"max_record_bytes: {max_record_bytes!r} must be a positive integer")
