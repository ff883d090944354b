"""Terminal output shared by every command: tables, JSON lines and errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

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


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None) -> None:
    """Print rows as a rich table with the given columns."""
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else _cell(row.get(c)) for c in columns))
    console.print(table)


def _cell(value: Any) -> str:
    value = to_jsonable(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


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
