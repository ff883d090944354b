"""Regulator reports' request, header, rows and formats (CSV, Parquet, HTML): who changed what and when.

Rows are written as they come; the header names the window, the filters, the chain's head digest and
how to verify it. The rows are read with Spark by `pipelines.batch.audit_report` and without an engine
by the API (`pipelines.serving.report`).
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conf.errors import InputError
from conf.values import parse_time_ms

FORMATS = ("csv", "parquet", "html")
REPORT_COLUMNS = (
    "time_utc", "actor", "entity", "entity_type", "category", "operation", "modifier",
    "old_value_summary", "new_value_summary", "event_id", "batch_id",
)  # fmt: skip
SUMMARY_CHARS = 200
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet", "html": "text/html; charset=utf-8"}
VERIFY_HINT = (
    "run `lakehouse verify`: exit code 0 and the same head digest mean no linked row has changed since it "
    "was published; the digests can be recomputed independently as docs/audit-trail.md describes"
)


@dataclass(frozen=True)
class ReportQuery:
    """One report: the window [from_ms, to_ms) in epoch ms, optional actor and entity filters, the format.

    Raises:
        InputError: naming the field when the window is empty or the format unknown.
    """

    from_ms: int
    to_ms: int
    actor: str | None = None
    entity: str | None = None
    format: str = "csv"

    def __post_init__(self) -> None:
        if self.from_ms >= self.to_ms:
            raise InputError(f"from: {self.from_ms} must be before to ({self.to_ms})")
        if self.format not in FORMATS:
            raise InputError(f"format: {self.format!r} is not one of {', '.join(FORMATS)}")
        for name in ("actor", "entity"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise InputError(f"{name}: {value!r} is blank (leave it out for no filter)")


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def summarize(value: str | None) -> str:
    """A value cut to SUMMARY_CHARS characters, saying how long it was when cut; empty for none."""
    if value is None:
        return ""
    return value if len(value) <= SUMMARY_CHARS else f"{value[:SUMMARY_CHARS]}… ({len(value)} chars)"


def header_for(query: ReportQuery, chain_head: str, scope_label: str = "(all)") -> dict[str, str]:
    """The report's header given the chain's head digest (`report_header` reads it with Spark)."""
    return {
        "report": "metadata changes: who changed what and when",
        "window_from_utc": _iso(query.from_ms),
        "window_to_utc_exclusive": _iso(query.to_ms),
        "actor_filter": query.actor or "(all)",
        "entity_filter": query.entity or "(all)",
        "scope": scope_label,
        "chain_head_digest": chain_head,
        "generated_at_utc": _iso(int(datetime.now(timezone.utc).timestamp() * 1000)),
        "verify": VERIFY_HINT,
    }


def report_row(event: Mapping[str, Any]) -> dict[str, str]:
    """One report row of a silver change event (its columns by name)."""
    return {
        "time_utc": _iso(event["event_time"]),
        "actor": event["actor"] or "",
        "entity": event["entity_urn"] or "",
        "entity_type": event["entity_type"] or "",
        "category": event["category"] or "",
        "operation": event["operation"] or "",
        "modifier": event["modifier"] or "",
        "old_value_summary": summarize(event["old_value"]),
        "new_value_summary": summarize(event["new_value"]),
        "event_id": event["event_id"],
        "batch_id": event["batch_id"],
    }


# A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralize_formula(value: str) -> str:
    """The cell `value` made inert for spreadsheets: a leading `'` when it starts like a formula (OWASP)."""
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


def csv_chunks(header: Mapping[str, str], rows: Iterator[Mapping[str, str]]) -> Iterator[str]:
    """The CSV report: `# key: value` header lines, the column names, then one line per row (RFC 4180 quoting, CRLF).

    Cells that a spreadsheet would run as a formula are neutralized (`neutralize_formula`).
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    for key, value in header.items():
        # Comment lines, written as they are (a quoted field would hide the `#`); line breaks become spaces.
        buffer.write(f"# {key}: {' '.join(str(value).splitlines())}\r\n")
    writer.writerow(REPORT_COLUMNS)
    for index, row in enumerate(rows):
        writer.writerow([neutralize_formula(row[c]) for c in REPORT_COLUMNS])
        if index % 1000 == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


# The HTML report's column and header names, as a reader says them.
COLUMN_LABELS = {
    "time_utc": "Time (UTC)", "actor": "Actor", "entity": "Entity", "entity_type": "Entity type",
    "category": "Category", "operation": "Operation", "modifier": "Modifier",
    "old_value_summary": "Old value", "new_value_summary": "New value", "event_id": "Event id", "batch_id": "Batch id",
}  # fmt: skip
HEADER_LABELS = {
    "window_from_utc": "Window from (UTC)", "window_to_utc_exclusive": "Window to (UTC, exclusive)",
    "actor_filter": "Actor", "entity_filter": "Entity", "scope": "Reader's scope",
    "chain_head_digest": "Chain head digest", "generated_at_utc": "Generated (UTC)",
}  # fmt: skip
# A4 landscape, the header once on the first page, the column names on every page, page numbers.
# The row count is written after the rows (they stream) and shown in the header by the flex order.
_REPORT_CSS = (
    "@page{size:A4 landscape;margin:12mm 10mm 14mm;"
    "@bottom-right{content:'page ' counter(page) ' of ' counter(pages);font:8pt sans-serif;color:#555}}"
    "body{font:8.5pt/1.35 system-ui,sans-serif;color:#111;margin:0;display:flex;flex-direction:column}"
    "header{order:1}#row-count{order:2;margin:0 0 3mm;font-weight:600}#changes{order:3}#verify{order:4}"
    "h1{font-size:14pt;margin:0 0 2mm}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:.5mm 4mm;margin:0 0 3mm}dt{font-weight:600;color:#333}dd{margin:0}"
    ".digest,td.id{font-family:ui-monospace,monospace;overflow-wrap:anywhere}"
    "table{border-collapse:collapse;width:100%;table-layout:fixed}"
    "thead{display:table-header-group}tr{break-inside:avoid}"
    "th{background:#e8ecf2;text-align:left;font-weight:600}"
    "td,th{border:.3pt solid #999;padding:1mm 1.2mm;vertical-align:top;overflow-wrap:break-word;white-space:pre-wrap}"
    "td.id{font-size:6pt;color:#444}"
    "col.time{width:9.5%}col.actor{width:9.5%}col.entity{width:13%}col.entity_type{width:5.5%}col.category{width:11%}"
    "col.operation{width:7.5%}col.modifier{width:9.5%}col.value{width:11%}col.id{width:6.25%}"
    "#verify{color:#444;margin-top:3mm}"
)
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")
_COLUMN_CLASSES = {
    "time_utc": "time", "old_value_summary": "value", "new_value_summary": "value", "event_id": "id", "batch_id": "id",
}  # fmt: skip


def _with_breaks(text: str) -> str:
    """Escaped text with break opportunities (`<wbr>`, nothing added to the text): after each `:`, `,`, `(`
    and `.` of an urn, each `_` (TECHNICAL_SCHEMA), and the `T` of an ISO-8601 time."""
    escaped = html.escape(text)
    if text.startswith("urn:"):
        return re.sub(r"(?<=[:,(._])", "<wbr>", escaped)
    if _ISO_TIME.fullmatch(text):
        return escaped.replace("T", "T<wbr>", 1)
    return escaped.replace("_", "_<wbr>")


def html_chunks(header: Mapping[str, str], rows: Iterator[Mapping[str, str]]) -> Iterator[str]:
    """The HTML report: a standalone page styled for print on A4, every value escaped.

    The header names the window, the filters, the reader's scope, the chain head digest and the row count
    (counted as the rows stream, written after them and shown at the top by the page's style).
    """
    esc = html.escape
    title = str(header.get("report", "report"))
    yield (
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
        f"<style>{_REPORT_CSS}</style></head><body>\n<header><h1>{esc(title[:1].upper() + title[1:])}</h1>\n<dl>\n"
    )
    digest_class = ' class="digest"'
    yield "".join(
        f"<dt>{esc(HEADER_LABELS.get(k, k))}</dt><dd{digest_class if k == 'chain_head_digest' else ''}>{esc(v)}</dd>\n"
        for k, v in header.items() if k not in ("report", "verify")
    )  # fmt: skip
    columns = "".join(f"<col class=\"{_COLUMN_CLASSES.get(c, c)}\">" for c in REPORT_COLUMNS)
    yield (
        f"</dl>\n</header>\n<table id=\"changes\"><colgroup>{columns}</colgroup>\n<thead><tr>"
        + "".join(f"<th>{esc(COLUMN_LABELS[c])}</th>" for c in REPORT_COLUMNS) + "</tr></thead>\n<tbody>\n"
    )  # fmt: skip
    lines: list[str] = []
    count = 0
    for row in rows:
        count += 1
        cells = "".join(
            f"<td class=\"id\">{esc(row[c])}</td>" if c in ("event_id", "batch_id") else f"<td>{_with_breaks(row[c])}</td>"
            for c in REPORT_COLUMNS
        )
        lines.append(f"<tr>{cells}</tr>\n")
        if len(lines) >= 1000:
            yield "".join(lines)
            lines = []
    noun = "change" if count == 1 else "changes"
    yield (
        "".join(lines) + "</tbody>\n</table>\n"
        + f"<p id=\"row-count\">{count} {noun} in this report</p>\n"
        + f"<p id=\"verify\">To verify: {esc(str(header.get('verify', VERIFY_HINT)))}</p>\n</body></html>\n"
    )


def write_parquet(header: Mapping[str, str], rows: Iterator[Mapping[str, str]], out: Path, chunk_rows: int = 10_000) -> int:
    """Write the Parquet report (string columns; the header as the file's `lakehouse.report` metadata, JSON).

    Returns:
        The number of rows written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(c, pa.string()) for c in REPORT_COLUMNS], metadata={"lakehouse.report": json.dumps(dict(header))})
    count = 0
    with pq.ParquetWriter(str(out), schema) as writer:
        chunk: list[Mapping[str, str]] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= chunk_rows:
                writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                count += len(chunk)
                chunk = []
        if chunk or count == 0:
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
            count += len(chunk)
    return count


def report_filename(query: ReportQuery) -> str:
    """The download's file name: `audit-report-<from>-<to>.<format>` (UTC dates)."""
    start, end = (_iso(ms)[:10] for ms in (query.from_ms, query.to_ms))
    return f"audit-report-{start}-{end}.{query.format}"


def report_bytes(
    query: ReportQuery, header: Mapping[str, str], rows: Iterator[Mapping[str, str]], scratch: Path
) -> Iterator[bytes]:
    """Yield the bytes of a report in `query.format` as the rows come (Parquet: through `scratch`, removed after)."""
    if query.format == "parquet":
        try:
            write_parquet(header, rows, scratch)
            with scratch.open("rb") as handle:
                while block := handle.read(1 << 20):
                    yield block
        finally:
            with contextlib.suppress(OSError):
                scratch.unlink(missing_ok=True)
        return
    chunks = csv_chunks(header, rows) if query.format == "csv" else html_chunks(header, rows)
    for chunk in chunks:
        yield chunk.encode("utf-8")


def parse_report_query(values: Mapping[str, Any]) -> ReportQuery:
    """Build a query from text values (`from`, `to`: epoch ms or ISO-8601; `actor`, `entity`, `format`).

    Raises:
        InputError: naming the missing or bad field.
    """
    for name in ("from", "to"):
        if not values.get(name):
            raise InputError(f"{name}: required (epoch ms or an ISO-8601 time, UTC when no zone is given)")
    return ReportQuery(
        from_ms=parse_time_ms(str(values["from"]), "from"),
        to_ms=parse_time_ms(str(values["to"]), "to"),
        actor=values.get("actor"),
        entity=values.get("entity"),
        format=str(values.get("format") or "csv"),
    )
