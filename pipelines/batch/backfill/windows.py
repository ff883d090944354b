"""Windows of `createdon`: the unit a backfill lands and commits, and its high-water mark.

A window is a run of rows in version order that ends where `createdon` changes: every version with one
`createdon` is in one window, so a restart that asks for the rows after the last committed window's
`createdon` neither repeats nor skips one. The mark is the window's source name, which the landing
ledger stores with the batch's commit (`<database>/<table>#createdon=<first µs>..<last µs>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

WINDOW_MARK = "#createdon="


def createdon_windows(batches: Iterable[pa.RecordBatch], window_rows: int) -> Iterator[pa.Table]:
    """Group record batches (sorted by `createdon_us`) into windows of about `window_rows` rows.

    A window holds `window_rows` rows and the rest of the rows with its last row's `createdon` (rows
    that share one `createdon` stay together however many they are).

    Args:
        batches: record batches with a `createdon_us` column, in ascending `createdon_us` order.
        window_rows: the rows a window aims for (at least 1).

    Returns:
        The windows as Arrow tables, in order; none for no rows.
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows < window_rows:
            continue
        table = pa.Table.from_batches(pending)
        while table.num_rows >= window_rows:
            createdon = table.column("createdon_us")
            # The window ends after every row of the createdon its last wanted row has (sorted: a count).
            cut = pc.sum(pc.less_equal(createdon, createdon[window_rows - 1])).as_py()
            if cut == table.num_rows:
                break
            yield table.slice(0, cut)
            table = table.slice(cut)
        pending, rows = table.to_batches(), table.num_rows
    if rows:
        yield pa.Table.from_batches(pending)


def window_source(database: str, table: str, window: pa.Table) -> str:
    """The window's source name: where its rows came from and the `createdon` range (µs) they cover."""
    createdon = window.column("createdon_us")
    return f"{database}/{table}{WINDOW_MARK}{createdon[0].as_py()}..{createdon[-1].as_py()}"


def source_prefix(database: str, table: str) -> str:
    """What every window source name of this database's table starts with."""
    return f"{database}/{table}{WINDOW_MARK}"


def high_water_mark(sources: Iterable[str], prefix: str) -> int | None:
    """The last `createdon` (µs) the committed windows of `prefix` hold; None when there is none.

    Args:
        sources: source names of committed ledger rows (others are ignored).
        prefix: `source_prefix` of the database's table.
    """
    marks = [int(name[len(prefix):].rpartition("..")[2]) for name in sources if name.startswith(prefix)]
    return max(marks) if marks else None
