"""Arrow rows into PostgreSQL: rows arranged as a replica table's columns, CSV COPY, parallel binary COPY.

A full copy sends binary COPY built from the Arrow data by ADBC's PostgreSQL driver (in C++: PostgreSQL
parses no text) over parallel streams; the rows of an append or a partition rewrite go by CSV COPY
(Arrow's C++ writer, streamed through psycopg 3) inside the caller's transaction.
"""

from __future__ import annotations

import contextlib
import io
import json
import queue
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import psycopg
from deltalake import DeltaTable
from psycopg import Connection, sql

from conf.tables import table_spec
from pipelines.bi.replica import is_json_column
from pipelines.runtime.storage import open_source

CSV_OPTIONS = pacsv.WriteOptions(include_header=False, batch_size=8192)
CHUNK_ROWS = 65536


def copy_ready(
    table: pa.Table | pa.RecordBatch,
    table_key: str,
    constants: dict[str, str | None] | None = None,
    json_type: pa.DataType = pa.string(),
) -> pa.Table:
    """Arrange Arrow rows as the replica table's columns for COPY: maps, structs and arrays as JSON text.

    Args:
        table: rows with (some of) the table's columns.
        table_key: the registry key.
        constants: values of columns the rows do not carry (a data file's partition values).
        json_type: the Arrow type of the JSON texts: plain strings for CSV, `pa.json_()` for a binary
            COPY (ADBC then sends them as jsonb).
    """
    constants = constants or {}
    present = set(table.schema.names)
    arrays, names = [], []
    for name, kind in table_spec(table_key).column_types:
        if name in present:
            column = table.column(name)
            if is_json_column(kind):
                column = pa.array([_json_text(v) for v in column.to_pylist()], json_type)
            elif pa.types.is_string_view(column.type):  # the Delta scan's strings; the writers want plain ones
                column = column.cast(pa.large_string())
        else:
            column = pa.array([constants.get(name)] * table.num_rows, pa.string())
        arrays.append(column)
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def _json_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, list) and value and isinstance(value[0], tuple):  # a map: Arrow gives (key, value) pairs
        value = dict(value)
    return json.dumps(value, sort_keys=True, default=str)


def copy_rows(conn: Connection, target: sql.Identifier, table_key: str, tables: Iterable[pa.Table]) -> int:
    """COPY the rows into `target` (CSV through psycopg 3's COPY FROM STDIN); return how many went in."""
    columns = sql.SQL(", ").join(sql.Identifier(n) for n in table_spec(table_key).column_names)
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, columns)
    rows = 0
    with conn.cursor().copy(statement) as copy:
        for table in tables:
            if table.num_rows == 0:
                continue
            buffer = io.BytesIO()
            pacsv.write_csv(table, buffer, CSV_OPTIONS)
            copy.write(buffer.getbuffer())
            rows += table.num_rows
    return rows


def scan_rows(
    table: DeltaTable, table_key: str, predicate: str | None = None, json_type: pa.DataType = pa.string()
) -> Iterator[pa.Table]:
    """The table's rows as of its loaded version (deletion vectors applied), in COPY-ready chunks (see copy_ready)."""
    present = [f.name for f in table.schema().fields if f.name in table_spec(table_key).column_names]
    reader = pa.RecordBatchReader.from_stream(table.scan(columns=present, predicate=predicate))
    pending: list[pa.RecordBatch] = []
    for batch in reader:
        # The scan yields batches of about a thousand rows: COPY chunks of CHUNK_ROWS cost less per row.
        pending.append(batch)
        if sum(b.num_rows for b in pending) >= CHUNK_ROWS:
            yield copy_ready(pa.Table.from_batches(pending), table_key, json_type=json_type)
            pending = []
    if pending:
        yield copy_ready(pa.Table.from_batches(pending), table_key, json_type=json_type)


def copy_parallel(conninfo: str, target: tuple[str, str], tables: Iterable[pa.Table], streams: int) -> int:
    """Binary-COPY the chunks into `target` (schema, table) over `streams` connections at once, each committing its share.

    For a table no reader sees yet (a swap's new table). ADBC's PostgreSQL driver turns the Arrow chunks
    into binary COPY in C++, so PostgreSQL parses no text (a CSV COPY of the audit table spent most of its
    time there); each stream is parsed in its own backend, so the copy uses more than one core.

    Raises:
        whatever a stream raised (the other streams are stopped first).
    """
    import adbc_driver_postgresql.dbapi as adbc

    chunks: queue.Queue = queue.Queue(maxsize=streams * 2)

    def stream() -> int:
        first = chunks.get()
        if first is None:
            return 0

        def batches() -> Iterator[pa.RecordBatch]:
            yield from first.to_batches()
            for table in iter(chunks.get, None):
                yield from table.cast(first.schema).to_batches()

        with adbc.connect(conninfo) as conn:
            with conn.cursor() as cursor:
                rows = cursor.adbc_ingest(target[1], pa.RecordBatchReader.from_batches(first.schema, batches()),
                                          mode="append", db_schema_name=target[0])  # fmt: skip
            conn.commit()
        return rows

    with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="bi-copy") as pool:
        futures = [pool.submit(stream) for _ in range(streams)]
        try:
            for table in tables:
                _put_while_streams_live(chunks, table, futures)
            for _ in futures:
                _put_while_streams_live(chunks, None, futures)
        except BaseException:
            with contextlib.suppress(queue.Empty):
                while True:
                    chunks.get_nowait()
            for _ in futures:
                chunks.put_nowait(None)
            raise
        return sum(future.result() for future in futures)


def execute_parallel(conninfo: str, statements: list[sql.Composed], connections: int) -> None:
    """Run the statements over `connections` connections at once (index builds of a table no reader sees yet).

    Each b-tree build is sorted mostly by one backend; two at a time kept both cores busy (the five
    audit indexes at 1M rows: 7.3 s one after another, 4.9 s two at a time).

    Raises:
        the first error of a statement (the others still run to their end).
    """

    def run(statement: sql.Composed) -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(statement)

    with ThreadPoolExecutor(max_workers=connections, thread_name_prefix="bi-index") as pool:
        for future in [pool.submit(run, statement) for statement in statements]:
            future.result()


def _put_while_streams_live(chunks: queue.Queue, item: pa.Table | None, futures: list[Future]) -> None:
    while True:
        for future in futures:
            if future.done() and future.exception() is not None:
                raise future.exception()
        try:
            chunks.put(item, timeout=0.5)
            return
        except queue.Full:
            continue


def file_rows(files: Iterable[tuple[str, dict[str, str | None]]], table_key: str) -> Iterator[pa.Table]:
    """The rows of added data files (local paths or object-storage URLs), partition values filled in, as COPY-ready chunks."""
    names = set(table_spec(table_key).column_names)
    for path, partition_values in files:
        with open_source(path) as source:
            parquet = pq.ParquetFile(source)
            columns = [n for n in parquet.schema_arrow.names if n in names]
            for batch in parquet.iter_batches(batch_size=65536, columns=columns):
                yield copy_ready(batch, table_key, partition_values)
