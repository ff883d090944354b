"""Reading `metadata_aspect_v2` as Arrow record batches, in DataHub's version order, inside one read-only snapshot.

PostgreSQL is read through ADBC's PostgreSQL driver (binary COPY into Arrow) in one transaction opened
READ ONLY, ISOLATION LEVEL REPEATABLE READ, sorted by the server: the client holds a batch at a time.
MariaDB / MySQL is read through connectorx's mysql source in one statement (InnoDB answers a statement
from one consistent read view) on a session set READ ONLY, in the server's own order, and sorted on the
client a `createdon` range at a time (`ordering`): the client holds a range, about a window, never the table.

The order is the one DataHub's own `datahub` ingestion source gives (`VersionOrderer` in
metadata-ingestion/src/datahub/ingestion/source/datahub/datahub_database_reader.py): by `createdon`,
and for one `createdon` the archived versions (1..N) before the current ones (version 0).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfigError, SourceUnavailable
from conf.settings_sections import BackfillSettings
from pipelines.batch.backfill.ordering import ranges_in_version_order
from pipelines.runtime.secrets import read_secret

# The columns read, in the form every reader returns them (`createdon_us`: µs since the epoch, UTC).
COLUMNS = ("urn", "aspect", "version", "metadata", "systemmetadata", "createdon_us", "createdby")
# Rows per record batch asked of connectorx (ADBC's batches are sized by bytes).
STREAM_BATCH_ROWS = 20000


def read_password(backfill: BackfillSettings, env: Mapping[str, str] = os.environ) -> str:
    """The database password: the first line of `password_file`, else the variable `password_env`.

    Raises:
        ConfigError: naming the file or the variable when neither gives a password.
    """
    password = read_secret(
        "ingest.backfill.password_file", backfill.password_file, "ingest.backfill.password_env", backfill.password_env, env
    )
    if not password:
        raise ConfigError(
            f"ingest.backfill: no password: set {backfill.password_env} or ingest.backfill.password_file"
        )
    return password


def version_order_query(backfill: BackfillSettings, after_us: int | None) -> str:
    """The SELECT of every version after `createdon` `after_us` (None: all), in DataHub's version order."""
    return (
        f"{_rows_query(backfill, after_us)} "
        "ORDER BY createdon, CASE WHEN version = 0 THEN 1 ELSE 0 END, urn, aspect, version"
    )


def _rows_query(backfill: BackfillSettings, after_us: int | None) -> str:
    """The SELECT of every version after `createdon` `after_us` (None: all), in no order."""
    return (
        f"SELECT urn, aspect, version, metadata, systemmetadata, {_createdon_us(backfill)} AS createdon_us, createdby "
        f"FROM {backfill.table}{_after(after_us)}"
    )


def createdon_bounds_query(backfill: BackfillSettings, after_us: int | None) -> str:
    """The SELECT of the `createdon` (µs) of every `window_rows`-th version after `after_us`, in order.

    The server sorts the one narrow column, not the rows: the bounds of the ranges `ordering` sorts.
    """
    return (
        f"SELECT createdon_us FROM (SELECT {_createdon_us(backfill)} AS createdon_us, "
        f"ROW_NUMBER() OVER (ORDER BY createdon) AS position FROM {backfill.table}{_after(after_us)}) AS numbered "
        f"WHERE position % {int(backfill.window_rows)} = 0"
    )


def _createdon_us(backfill: BackfillSettings) -> str:
    if backfill.engine == "postgres":
        return "CAST(EXTRACT(EPOCH FROM createdon) * 1000000 AS BIGINT)"
    return "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', createdon) AS SIGNED)"


def _after(after_us: int | None) -> str:
    return "" if after_us is None else f" WHERE createdon > '{_timestamp_literal(after_us)}'"


def _timestamp_literal(micros: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


@contextmanager
def version_batches(backfill: BackfillSettings, password: str, after_us: int | None) -> Iterator[Iterator[pa.RecordBatch]]:
    """Stream the versions after `after_us` as record batches with COLUMNS, in DataHub's version order.

    Raises:
        SourceUnavailable: the database refuses the connection or the query (nothing was landed from it).
    """
    if backfill.engine == "postgres":
        opened = _postgres_batches(backfill, password, version_order_query(backfill, after_us))
    else:
        opened = _mysql_batches(backfill, password, after_us)
    with opened as batches:
        yield _checked(backfill, batches)


def _checked(backfill: BackfillSettings, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as exc:  # the driver's errors while streaming: a dropped connection, a cancelled query
            raise _unavailable(backfill, exc) from None
        yield _normalized(batch)


def postgres_uri(backfill: BackfillSettings, password: str) -> str:
    """A libpq URI for ADBC (TLS settings as sslmode / sslrootcert); it holds the password: never log it."""
    query = {"sslmode": backfill.tls_mode, "application_name": "lakehouse-backfill"}
    if backfill.tls_ca_file:
        query["sslrootcert"] = backfill.tls_ca_file
    return (
        f"postgresql://{_quote(backfill.user)}:{_quote(password)}@{backfill.host}:{backfill.port}/"
        f"{_quote(backfill.database)}?{urllib.parse.urlencode(query)}"
    )


# tls_mode as MySQL's ssl-mode, which connectorx's mysql source takes (with ssl-ca) in its URL.
MYSQL_SSL_MODES = {
    "disable": "DISABLED",
    "prefer": "PREFERRED",
    "require": "REQUIRED",
    "verify-ca": "VERIFY_CA",
    "verify-full": "VERIFY_IDENTITY",
}


def mysql_url(backfill: BackfillSettings, password: str) -> str:
    """A connectorx mysql URL (TLS as `ssl-mode` / `ssl-ca`); it holds the password: never log it."""
    query = {"ssl-mode": MYSQL_SSL_MODES[backfill.tls_mode]}
    if backfill.tls_ca_file:
        query["ssl-ca"] = backfill.tls_ca_file
    return (
        f"mysql://{_quote(backfill.user)}:{_quote(password)}@{backfill.host}:{backfill.port}/"
        f"{_quote(backfill.database)}?{urllib.parse.urlencode(query)}"
    )


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _unavailable(backfill: BackfillSettings, exc: BaseException) -> SourceUnavailable:
    # The driver's message may quote the URL: only its first line, with the password's URL removed.
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    message = message.split("postgresql://")[0].split("mysql://")[0].strip() or type(exc).__name__
    return SourceUnavailable(
        f"ingest.backfill: {backfill.engine} at {backfill.host}:{backfill.port} database {backfill.database!r}: {message}"
    )


@contextmanager
def _postgres_batches(backfill: BackfillSettings, password: str, query: str) -> Iterator[Iterator[pa.RecordBatch]]:
    import adbc_driver_postgresql.dbapi as adbc

    try:
        conn = adbc.connect(postgres_uri(backfill, password))
    except Exception as exc:  # the driver's errors: a refused connection, a bad login, TLS
        raise _unavailable(backfill, exc) from None
    try:
        cursor = conn.cursor()
        # The driver has begun a transaction (autocommit off): make it one read-only snapshot.
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            cursor.execute(query)
            reader = cursor.fetch_record_batch()
        except Exception as exc:
            raise _unavailable(backfill, exc) from None
        yield iter(reader)
        conn.rollback()
    finally:
        conn.close()


@contextmanager
def _mysql_batches(backfill: BackfillSettings, password: str, after_us: int | None) -> Iterator[Iterator[pa.RecordBatch]]:
    """The rows in version order: read in the server's order in one statement, sorted by `ordering`."""
    import connectorx

    url = mysql_url(backfill, password)
    session = ["SET SESSION TRANSACTION READ ONLY", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"]
    try:
        bounds = connectorx.read_sql(url, createdon_bounds_query(backfill, after_us), return_type="arrow",
                                     pre_execution_query=session)  # fmt: skip
        reader = connectorx.read_sql(
            url, _rows_query(backfill, after_us), return_type="arrow_stream", batch_size=STREAM_BATCH_ROWS,
            pre_execution_query=session,
        )  # fmt: skip
    except Exception as exc:  # connectorx raises RuntimeError with the server's message
        raise _unavailable(backfill, exc) from None
    bound_values = np.unique(pc.cast(bounds.column("createdon_us"), pa.int64()).to_numpy(zero_copy_only=False))
    yield ranges_in_version_order((_normalized(batch) for batch in reader), bound_values)


def _normalized(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with COLUMNS typed alike for every reader (strings, int64 version and µs)."""
    arrays = []
    for name in COLUMNS:
        column = batch.column(batch.schema.get_field_index(name))
        wanted = pa.int64() if name in ("version", "createdon_us") else pa.large_string()
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            column = column.cast(pa.large_binary()).cast(wanted)
        elif column.type != wanted:
            column = pc.cast(column, wanted)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=list(COLUMNS))
