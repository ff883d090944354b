"""Terminal output shared by every command: tables that fit the terminal, JSON lines, CSV and errors."""

from __future__ import annotations

import contextlib
import csv
import json
import sys
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from conf.errors import InputError

CSV_HELP = "Print CSV: a header line, then the table's columns with full values."

# Messages are not wrapped at the terminal's width: scripts and log searches read them too (tables
# still fit the width).
console = Console(soft_wrap=True)
error_console = Console(stderr=True, soft_wrap=True)


def to_jsonable(value: Any) -> Any:
    """Turn Spark row values (Row, dates, decimals, maps) into plain JSON values."""
    if hasattr(value, "asDict"):
        return {k: to_jsonable(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def print_json_lines(rows: Iterable[Mapping[str, Any]]) -> None:
    """Print one compact JSON object per row on standard output."""
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(to_jsonable(row), separators=(",", ":")) + "\n")
    out.flush()


def print_text(text: str) -> None:
    """Print text on standard output exactly as given: no markup, no wrapping at the terminal's width."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def print_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None, time_columns: Sequence[str] = ()
) -> None:
    """Print rows as a table that fits the terminal without breaking a value that has no space in it.

    Identifiers (ids, table names, urns, paths) are never wrapped nor cut: when the table cannot fit,
    each row is printed as `column: value` lines instead, long values wrapped at spaces under their
    column's name. Headers are the columns' real names. Counts print as integers, durations with their
    unit (the columns named `seconds`, `*_seconds` or `*_s`), epoch milliseconds of `time_columns` as
    ISO-8601 UTC.
    """
    cells = [[format_cell(c, row.get(c), c in time_columns) for c in columns] for row in rows]
    headers = list(columns)
    width = console.width
    if title:
        print_text("\n".join(textwrap.wrap(title, width, break_long_words=False, break_on_hyphens=False)))
    if _table_width(headers, cells) > width:
        print_text(vertical_text(headers, cells, width))
        return
    print_text(render_table(headers, cells, width))


def render_table(headers: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> str:
    """Lay out a table in at most `width` columns (when its words fit), wrapping values only at spaces.

    Each column gets its widest value; while the table is too wide, the widest column that can still
    wrap (a value with spaces wider than its longest word) gives up one character.
    """
    count = len(headers)
    natural = [max([len(headers[i]), *(len(row[i]) for row in cells)]) for i in range(count)]
    least = _least_widths(headers, cells)
    widths = list(natural)
    while sum(widths) + 2 * (count - 1) > width:
        wrapable = [i for i in range(count) if widths[i] > least[i]]
        if not wrapable:
            break
        widest = max(wrapable, key=lambda i: widths[i])
        widths[widest] -= 1

    def lines_of(values: Sequence[str]) -> list[str]:
        wrapped = [textwrap.wrap(v, w, break_long_words=False, break_on_hyphens=False) or [""] for v, w in zip(values, widths)]
        height = max(len(c) for c in wrapped)
        return [
            "  ".join(c[n].ljust(w) if n < len(c) else " " * w for c, w in zip(wrapped, widths)).rstrip()
            for n in range(height)
        ]

    out = lines_of(headers)
    out.append("─" * (sum(widths) + 2 * (count - 1)))
    for row in cells:
        out.extend(lines_of(row))
    return "\n".join(out)


def print_rows(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    title: str | None = None,
    as_json: bool = False,
    as_csv: bool = False,
    json_rows: Sequence[Mapping[str, Any]] | None = None,
    time_columns: Sequence[str] = (),
) -> None:
    """Print a listing as a table (default), JSON lines (every field of each row) or CSV (the columns).

    Args:
        json_rows: what --json prints, when it is more than the rows (default the rows).
        time_columns: the columns holding epoch milliseconds: ISO-8601 UTC in the table and the CSV; in
            JSON the number stays, beside the same time as ISO-8601 in `<column>_utc`.

    Raises:
        InputError: when both --json and --csv are asked for.
    """
    if as_json and as_csv:
        raise InputError("--json, --csv: choose one output format")
    if as_json:
        print_json_lines(with_iso_times(row, time_columns) for row in (rows if json_rows is None else json_rows))
    elif as_csv:
        print_csv([{**row, **{c: iso_utc(row.get(c)) for c in time_columns}} for row in rows], columns)
    else:
        print_table(rows, columns, title=title, time_columns=time_columns)


def listing_title(title: str, shown: int, more: bool, option: str) -> str:
    """A listing's title with its row count, naming the option that shows more when rows were left out."""
    return f"{title}: the first {shown} ({option} N shows more)" if more else f"{title} ({shown})"


def iso_utc(millis: Any) -> Any:
    """Epoch milliseconds as ISO-8601 UTC (`2023-11-19T17:30:32Z`, milliseconds shown when not zero); other values as given."""
    if not isinstance(millis, (int, float, Decimal)) or isinstance(millis, bool):
        return millis
    moment = datetime.fromtimestamp(int(millis) // 1000, tz=timezone.utc)
    fraction = int(millis) % 1000
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction:03d}" if fraction else "") + "Z"


def with_iso_times(row: Mapping[str, Any], time_columns: Sequence[str]) -> dict[str, Any]:
    """The row with `<column>_utc` (`<column>Utc` for a camelCase name) in ISO-8601 beside each epoch-ms column."""
    out = dict(row)
    for column in time_columns:
        if column in row:
            camel = "_" not in column and column != column.lower()
            out[f"{column}Utc" if camel else f"{column}_utc"] = iso_utc(row[column])
    return out


def print_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Print rows as CSV with a header line: full values, nested ones as JSON text, None as empty."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _plain(row.get(c)) for c in columns])
    sys.stdout.flush()


def _plain(value: Any) -> str:
    value = to_jsonable(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def is_duration_column(column: str) -> bool:
    """Whether a column holds seconds: `seconds`, `*_seconds`, `*_s`."""
    return column in ("seconds", "duration") or column.endswith(("_seconds", "_s"))


def format_cell(column: str, value: Any, epoch_ms: bool = False) -> str:
    """One value as shown in a table: integral numbers as integers, seconds with a unit, times to the second.

    Args:
        epoch_ms: the value is epoch milliseconds: shown as ISO-8601 UTC.
    """
    if value is None:
        return ""
    if epoch_ms:
        return str(iso_utc(value))
    if is_duration_column(column) and isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return format_duration(float(value))
    if isinstance(value, datetime):
        value = value.astimezone(timezone.utc) if value.tzinfo else value
        return value.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if value.tzinfo else "")
    if isinstance(value, (float, Decimal)) and not isinstance(value, bool):
        number = float(value)
        if number.is_integer() and abs(number) < 2**53:
            return str(int(number))
        return str(round(number, 4))
    return _plain(value)


def format_duration(seconds: float) -> str:
    """Seconds as a short duration with units and no space: `0.42s`, `12.3s`, `5m12s`, `2h05m`, `3d04h`."""
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _least_widths(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int]:
    """Each column's longest word: the narrowest it can be without splitting one."""
    return [
        max((len(word) for value in (header, *(row[i] for row in cells)) for word in value.split()), default=0)
        for i, header in enumerate(headers)
    ]


def _table_width(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> int:
    """The narrowest the table can be without splitting a word: the longest words, 2 spaces between columns."""
    return sum(_least_widths(headers, cells)) + 2 * max(len(headers) - 1, 0)


def vertical_text(headers: Sequence[str], cells: Sequence[Sequence[str]], width: int = 80) -> str:
    """Rows as blocks of `header  value` lines (a blank line between rows), for a table too wide for `width`.

    A value too long for its line is wrapped at spaces; one whose longest word does not fit beside the
    header starts on the next line, indented by 2 spaces. Words are never split.
    """
    pad = max((len(h) for h in headers), default=0)
    blocks = []
    for row in cells:
        lines = []
        for header, value in zip(headers, row):
            beside = width - pad - 2
            words = value.split()
            if len(value) <= beside or not words:
                lines.append(f"{header.ljust(pad)}  {value}".rstrip())
            elif max(len(w) for w in words) <= beside:
                wrapped = textwrap.wrap(value, beside, break_long_words=False, break_on_hyphens=False)
                lines.append(f"{header.ljust(pad)}  {wrapped[0]}")
                lines.extend(" " * (pad + 2) + line for line in wrapped[1:])
            else:
                lines.append(header)
                lines.extend(textwrap.wrap(value, width, initial_indent="  ", subsequent_indent="  ",
                                           break_long_words=False, break_on_hyphens=False))  # fmt: skip
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "(none)"


def print_error(exc: BaseException | str) -> None:
    """Print a project error on standard error, without a traceback and without markup parsing."""
    error_console.print(Text("error: ", style="bold red") + Text(str(exc)))


@contextlib.contextmanager
def progress_bars(show: bool) -> Iterator[Progress | None]:
    """Yield a rich Progress (spinner, description, bar, count, elapsed) for the block, or None when not shown."""
    if not show:
        yield None
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        yield progress
