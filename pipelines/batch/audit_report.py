"""Regulator reports read with Spark: the chain's head, the chained change events of a window, a report file.

The request and the formats are `pipelines.audit_trail.report_format`'s; rows are streamed from the
engine (never collected) and written as they come.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import AUDIT_CHAIN, ENTITY_CHANGE_EVENTS
from pipelines.audit_trail.report_format import (
    ReportQuery, csv_chunks, header_for, html_chunks, report_row, write_parquet,
)  # fmt: skip
from pipelines.batch.audit_chain import head_digest
from pipelines.privacy.display import person_pseudonym, rows_with_identities
from pipelines.runtime.io import read_table


def report_header(spark: SparkSession, settings: Settings, query: ReportQuery, scope_label: str = "(all)") -> dict[str, str]:
    """The report's header: window, filters, the reader's scope, the chain head digest and how to verify it."""
    return header_for(query, head_digest(spark, settings), scope_label)


def report_rows(
    spark: SparkSession, settings: Settings, query: ReportQuery, scope_sql: str | None = None
) -> Iterator[dict[str, str]]:
    """Stream the report rows (oldest first): the change events of chained batches in the window and filters.

    Args:
        scope_sql: a Spark SQL condition over the change events the reader may see (None: every row).
    """
    events_df = read_table(spark, settings, ENTITY_CHANGE_EVENTS).filter(
        (F.col("event_time") >= F.lit(query.from_ms)) & (F.col("event_time") < F.lit(query.to_ms))
    )
    if scope_sql is not None:
        events_df = events_df.filter(F.expr(scope_sql))
    if query.actor:
        events_df = events_df.filter(F.col("actor") == F.lit(person_pseudonym(settings, query.actor)))
    if query.entity:
        events_df = events_df.filter((F.col("entity_urn") == F.lit(query.entity)) | (F.col("aspect_entity_urn") == F.lit(query.entity)))
    linked_df = (
        read_table(spark, settings, AUDIT_CHAIN).filter(F.col("table_key") == F.lit(ENTITY_CHANGE_EVENTS)).select("batch_id").distinct()
    )
    ordered = events_df.join(linked_df, "batch_id", "left_semi").orderBy("event_time", "event_id")
    # The report's reader runs with the home's key store: people are shown as who they are.
    yield from rows_with_identities(settings, (report_row(row.asDict()) for row in ordered.toLocalIterator()))


def write_report(spark: SparkSession, settings: Settings, query: ReportQuery, out: Path) -> Path:
    """Write a report to `out` (beside it first, then renamed: a failed report never leaves half a file).

    Raises:
        InputError: naming --out when the file cannot be written there.
    """
    out = Path(out)
    if out.is_dir():
        raise InputError(f"--out: {str(out)!r} is a directory")
    partial = out.with_name(out.name + ".partial")
    header = report_header(spark, settings, query)
    rows = report_rows(spark, settings, query)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if query.format == "parquet":
            write_parquet(header, rows, partial)
        else:
            chunks = csv_chunks(header, rows) if query.format == "csv" else html_chunks(header, rows)
            with partial.open("w", encoding="utf-8", newline="") as handle:
                for chunk in chunks:
                    handle.write(chunk)
        os.replace(partial, out)
    except OSError as exc:
        raise InputError(f"--out: {str(out)!r} cannot be written ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return out
