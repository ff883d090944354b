"""Read and write the declared Delta tables: appends, partition replaces and MERGE with bounded retries."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, DataFrameWriter, Row, SparkSession
from pyspark.sql import functions as F

from conf.errors import ConcurrencyError, InputError
from conf.locations import Location
from conf.settings import Settings
from conf.tables import table_spec
from pipelines.runtime.backoff import backoff_seconds
from pipelines.runtime.home import home_of
from pipelines.runtime.storage import Storage

T = TypeVar("T")

# Substrings of the errors Delta engines raise when a commit loses a race with another writer.
_COMMIT_RACE_MARKERS = (
    "concurrent",
    "conflict",
    "commitfailed",
    "version already exists",
    "already exists at version",
    "transaction failed",
    "failed to commit transaction",  # the embedded engine, when a MERGE/UPDATE lost the race
)


def read_table(spark: SparkSession, settings: Settings, table_key: str) -> DataFrame:
    """Return a declared table as a DataFrame (registered by name at session start)."""
    return spark.table(home_of(settings).table_name(table_key))


def read_time_window(
    spark: SparkSession,
    settings: Settings,
    table_key: str,
    time_column: str,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> DataFrame:
    """Return a declared table's rows with since_ms <= `time_column` < until_ms.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        table_key: the table's registry key.
        time_column: the epoch-millisecond column the window applies to.
        since_ms: first time included; None: from the first row.
        until_ms: first time excluded; None: to the last row.

    Raises:
        InputError: when since_ms is after until_ms.
    """
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise InputError(f"since_ms: {since_ms} is after until_ms {until_ms}")
    rows_df = read_table(spark, settings, table_key)
    if since_ms is not None:
        rows_df = rows_df.filter(F.col(time_column) >= F.lit(since_ms))
    if until_ms is not None:
        rows_df = rows_df.filter(F.col(time_column) < F.lit(until_ms))
    return rows_df


# Rows per row group of scratch Parquet files. A row group is the unit a reader hands to one core: the
# engine's default (about a million rows) leaves one core decoding a large file. Engines without this
# writer option ignore it.
SCRATCH_ROW_GROUP_ROWS = 65_536


def write_scratch(df: DataFrame, path: Location, storage: Storage, partition_by: str | None = None) -> DataFrame:
    """Write `df` to Parquet at `path` (replacing what is there) and return the files read back.

    Scratch files live for one batch or step: they are compressed for speed (snappy), not for size,
    and cut into row groups of SCRATCH_ROW_GROUP_ROWS so that readers split one large file across every
    core.

    Args:
        df: the rows.
        path: the folder to write (a local path or an object-storage location the engine reaches).
        storage: where the written files are looked for (the home's `Home.storage`): the engine may
            run elsewhere, so what it wrote is asked of the storage, never of a local folder.
        partition_by: a column to partition the files by (one folder per value).

    Returns:
        The written rows. Their schema comes from the files, so `partition_by` is the last column and
        every column is nullable; with no rows (no file written) it is `df`'s.
    """
    writer = (
        df.write.mode("overwrite").option("compression", "snappy").option("maxRowGroupSize", SCRATCH_ROW_GROUP_ROWS)
    )
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.parquet(str(path))
    if not storage.has_files(path, ".parquet"):
        return df.sparkSession.createDataFrame([], df.schema)
    # Not `.schema(df.schema)`: asking for df's schema plans df once more, a round trip to the engine
    # per staged part (about 60 ms each on a micro-batch), where the files' footers give it for free.
    return df.sparkSession.read.parquet(str(path))


def append(df: DataFrame, settings: Settings, table_key: str) -> None:
    """Append `df` to a declared table, matching columns by name.

    Args:
        df: rows to add; extra columns are dropped, missing ones are an error.
        settings: the lakehouse settings.
        table_key: `<layer>.<name>` of the target.

    Raises:
        InputError: naming the columns the table needs and `df` lacks.
    """
    _save(df, settings, table_key, lambda writer: writer.mode("append"))


def replace_where(df: DataFrame, settings: Settings, table_key: str, predicate: str) -> None:
    """Atomically replace the rows of a table that match `predicate` with `df`.

    Args:
        df: the new rows (matched by name, as `append`); every one of them must satisfy `predicate`.
        settings: the lakehouse settings.
        table_key: `<layer>.<name>` of the target.
        predicate: a SQL boolean expression over partition or data columns.

    Raises:
        InputError: for an empty predicate, or naming the columns the table needs and `df` lacks.
    """
    if not predicate or not predicate.strip():
        raise InputError(f"predicate: {predicate!r} is empty; refusing to overwrite the whole table {table_key}")
    _save(df, settings, table_key, lambda writer: writer.mode("overwrite").option("replaceWhere", predicate))


def _save(
    df: DataFrame, settings: Settings, table_key: str, configure: Callable[[DataFrameWriter], DataFrameWriter]
) -> None:
    """Write the table's columns of `df` (in the table's order) with the writer `configure` sets up."""
    columns = table_spec(table_key).column_names
    writer = configure(df.select(*columns).write.format("delta"))
    try:
        # On the embedded engine `saveAsTable` with replaceWhere overwrites the whole table, so external
        # tables are always written by location; managed (catalog-owned) tables only by name.
        home = home_of(settings)
        if settings.catalog.managed_tables:
            writer.saveAsTable(home.table_name(table_key))
        else:
            writer.save(str(home.table_location(table_key)))
    except AnalysisException as exc:
        # df's columns are looked at only when the write fails: asking first costs a round trip to the
        # engine on every write (tens of milliseconds each, about ten writes a micro-batch).
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InputError(f"df: missing columns {missing} for table {table_key} (has {df.columns})") from exc
        raise


def merge(
    spark: SparkSession,
    source_df: DataFrame,
    statement: Callable[[str], str],
    *,
    view_name: str,
    attempts: int = 5,
) -> list[Row]:
    """Run a `MERGE INTO` whose source is `source_df`, retrying when the commit loses a race.

    Args:
        spark: the session.
        source_df: the MERGE source, exposed to the statement as a temporary view.
        statement: builds the MERGE SQL from the temporary view's name.
        view_name: the temporary view's name (letters, digits and underscores).
        attempts: how many times to try before giving up.

    Returns:
        The MERGE's result rows (its metrics on engines that return them).

    Raises:
        ConcurrencyError: when every attempt lost a commit race.
    """
    source_df.createOrReplaceTempView(view_name)
    try:
        return retry_commit(lambda: spark.sql(statement(view_name)).collect(), attempts=attempts)
    finally:
        spark.catalog.dropTempView(view_name)


def any_stored(keys_df: DataFrame, stored_df: DataFrame, keys: list[str]) -> bool:
    """Whether any row of `keys_df` matches a row of `stored_df` on `keys` (`first_match`, counted).

    Writers use it to append a batch whose keys are all new instead of running a MERGE that reads the
    whole target.

    Args:
        keys_df: the batch's keys (at least the `keys` columns).
        stored_df: the stored rows to look in (at least the `keys` columns).
        keys: the columns that identify a row.
    """
    return bool(first_match(keys_df, stored_df, keys).count())


def first_match(keys_df: DataFrame, stored_df: DataFrame, keys: list[str]) -> DataFrame:
    """The `keys` of the first row of `keys_df` that a row of `stored_df` matches (no row when none does).

    A semi join that stops at the first match: the engine filters `stored_df`'s scan by the (small)
    `keys_df`'s values, so it costs little even against a large table.
    """
    return keys_df.select(*keys).join(stored_df.select(*keys), keys, "left_semi").limit(1)


def insert_missing(
    spark: SparkSession,
    settings: Settings,
    table_key: str,
    source_df: DataFrame,
    on: str,
    *,
    view_name: str,
    candidates_df: DataFrame | None = None,
) -> list[Row]:
    """Insert the source rows that no row of a declared table matches: an insert-only `MERGE INTO`.

    Running it again with the same rows inserts nothing, which makes the writes it serves idempotent.
    When `candidates_df` holds no row, the rows are appended instead: nothing can match, and an
    append writes the new rows alone where the MERGE reads the target's files. The run lock keeps
    other writers out in between.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        table_key: the target table, `<layer>.<name>`.
        source_df: rows with (at least) the table's columns.
        on: the match condition over `t` (the table) and `s` (the source). Literal filters on t's
            columns let the engine skip what cannot match: other partitions, and files whose column
            statistics rule the literal out.
        view_name: the source's temporary view name (letters, digits and underscores).
        candidates_df: the only table rows `on` can match (narrowed by the same literal filters), or
            None to always MERGE.

    Returns:
        The MERGE's result rows (its metrics on engines that return them); none after an append.
    """
    if candidates_df is not None and not candidates_df.limit(1).count():
        # Two threads of one run may write a table at once (watch mode publishes OpenMetadata alongside).
        retry_commit(lambda: append(source_df, settings, table_key))
        return []
    target = home_of(settings).table_name(table_key)
    return merge(
        spark,
        source_df.select(*table_spec(table_key).column_names),
        lambda source: f"MERGE INTO {target} AS t USING {source} AS s ON {on} WHEN NOT MATCHED THEN {insert_row(table_key)}",
        view_name=view_name,
    )


def sql_string(value: str) -> str:
    """`value` as a Spark SQL string literal, quoted, its backslashes and quotes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def insert_row(table_key: str) -> str:
    """The `INSERT (...) VALUES (...)` action of a MERGE that inserts the source row `s` into a declared table."""
    columns = table_spec(table_key).column_names
    return f"INSERT ({', '.join(columns)}) VALUES ({', '.join(f's.{c}' for c in columns)})"


def retry_commit(action: Callable[[], T], *, attempts: int = 5, base_delay: float = 0.2) -> T:
    """Run a table write, retrying (bounded, with jittered backoff) only when it lost a commit race.

    Raises:
        ConcurrencyError: when all attempts lost the race; any other error is raised at once.
    """
    if attempts < 1:
        raise InputError(f"attempts: {attempts!r} must be at least 1")
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is a commit race
            if not is_commit_race(exc):
                raise
            if attempt == attempts:
                raise ConcurrencyError(f"commit kept losing races after {attempts} attempts: {exc}") from exc
            time.sleep(backoff_seconds(attempt, base_delay, jitter=0.5))
    raise AssertionError("unreachable")


def is_commit_race(exc: BaseException) -> bool:
    """Tell whether an engine error means another writer committed first."""
    text = str(exc).lower()
    return any(marker in text for marker in _COMMIT_RACE_MARKERS)


def write_lines(out: Path, lines: Iterable[str], option: str = "--out") -> int:
    """Write `lines` to the file `out`, one per line, beside it first and then renamed into place.

    A killed or failed export never leaves half a file, and never empties the file it would replace.

    Args:
        out: the file to write (its folder is created).
        lines: the lines, without line breaks.
        option: the option that named `out`, for the error message.

    Returns:
        The number of lines written.

    Raises:
        InputError: naming the option and the path, when the file cannot be created there.
    """
    out = Path(out)
    partial = out.with_name(out.name + ".partial")

    def unwritable(reason: str) -> InputError:
        return InputError(f"{option}: {str(out)!r} cannot be written ({reason})")

    if out.is_dir():
        raise unwritable("Is a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = partial.open("w", encoding="utf-8")
    except OSError as exc:
        raise unwritable(exc.strerror or str(exc)) from None
    count = 0
    try:
        with handle:
            for line in lines:
                handle.write(line + "\n")
                count += 1
        os.replace(partial, out)
    except BaseException as exc:
        # Whatever stopped the export (the query, the disk), the file it would replace stays as it was.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename in (str(partial), str(out)):
            raise unwritable(exc.strerror or str(exc)) from None
        raise
    return count

