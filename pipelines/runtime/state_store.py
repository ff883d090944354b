"""The silver state on disk: silver.aspect_state, and the log of small batches' rows not folded into it yet.

Why a log. The engine's MERGE reads every column of the whole state three times, whatever the
batch's size: 100 updated keys against a 1M-key state cost a 1.2 s MERGE. So a batch that updates
keys, and is small (`refine.state_log_max_rows`), appends its state rows to
silver.aspect_state_log instead, stamped with the next log_seq. Readers of the state see it with
the log applied (`read_state`, `silver.state.to_current_state`). `fold_state_log` applies the log
to silver.aspect_state in one MERGE, for all the logged batches at once: in a watcher's compaction
round, in `lakehouse maintain`, once the log holds more than `refine.state_log_max_rows` rows, and
before a batch larger than that is MERGEd.

Crash safety. Every write is one commit, and each is safe to repeat:
  - a logged batch is appended once (a re-run finds its batch id in the log and appends nothing);
  - a fold MERGEs the resolved rows of the logged keys and then deletes the log rows it applied; a
    fold killed in between leaves the state holding copies of the logged winners, and reading or
    folding again resolves to the same rows (`to_current_state`: a tie goes to the later row).
The run lock keeps every other writer out meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from conf.tables import ASPECT_STATE, ASPECT_STATE_LOG, table_name, table_spec
from pipelines.runtime.faults import crash_point
from pipelines.runtime.home import home_of
from pipelines.runtime.io import any_stored, append, first_match, insert_row, merge, read_table, write_scratch
from gold.audit import to_entity_domains
from pipelines.runtime.storage import Location
from silver.state import to_current_state

STATE_TABLE = ASPECT_STATE
LOG_TABLE = ASPECT_STATE_LOG
STATE_KEYS = ["entity_urn", "aspect_name"]

# What the state's two MERGEs share: the match on the key, and the update of every column from the source row.
_MERGE_ON_KEY = (
    "MERGE INTO {target} AS t USING {source} AS s ON t.entity_urn = s.entity_urn AND t.aspect_name = s.aspect_name"
)
_SET_EVERY_COLUMN = ", ".join(f"t.{c} = s.{c}" for c in table_spec(STATE_TABLE).column_names)

# How a batch's state rows were written (`write_state`).
APPENDED, LOGGED, FOLDED, MERGED, ALREADY_LOGGED = "appended", "logged", "folded", "merged", "already_logged"
STATE_WRITES = (APPENDED, LOGGED, FOLDED, MERGED, ALREADY_LOGGED)


def read_state(
    spark: SparkSession, settings: Settings, entities_df: DataFrame | None = None, aspect_name: str | None = None
) -> DataFrame:
    """The current state: silver.aspect_state with the logged rows applied.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        entities_df: when given (an `entity_urn` column), only these entities' rows are read, and
            compared with their logged rows alone.
        aspect_name: when given, only this aspect's rows are read.

    Returns:
        silver.aspect_state's columns, one row per key.
    """
    state_df = read_table(spark, settings, STATE_TABLE)
    log_df = read_table(spark, settings, LOG_TABLE)
    if aspect_name is not None:
        state_df = state_df.filter(F.col("aspect_name") == F.lit(aspect_name))
        log_df = log_df.filter(F.col("aspect_name") == F.lit(aspect_name))
    if entities_df is not None:
        entities_df = entities_df.select("entity_urn").distinct()
        state_df = state_df.join(entities_df, on="entity_urn", how="left_semi")
        log_df = log_df.join(entities_df, on="entity_urn", how="left_semi")
    return to_current_state(state_df, log_df)


@contextlib.contextmanager
def staged_entity_domains(
    spark: SparkSession, settings: Settings, entities_df: DataFrame, folder: Location
) -> Iterator[DataFrame]:
    """Each of these entities' domain as the current state holds it (`gold.audit.to_entity_domains` rows).

    The state's `domains` rows are staged in `folder` before their JSON is parsed: the embedded engine's
    `from_json` fails on the empty record batches that a scan of silver.aspect_state (a table with deletion
    vectors, once a batch was MERGEd into it) yields (docs/scaling.md, "Engine defects worked around").
    The folder is removed when the block ends: use the rows inside it.

    Args:
        spark: the session (tables registered).
        settings: the lakehouse settings.
        entities_df: the entities (an `entity_urn` column).
        folder: the scratch folder to stage the rows in (replaced, then removed).

    Yields:
        entity_urn, domain: one row per entity with a live `domains` aspect naming one.
    """
    storage = home_of(settings).storage
    state_df = read_state(spark, settings, entities_df, aspect_name="domains")
    try:
        staged_df = write_scratch(state_df.select("entity_urn", "aspect_name", "aspect_json", "deleted"), folder, storage)
        yield to_entity_domains(staged_df)
    finally:
        storage.remove_tree(folder)


def has_logged_rows(spark: SparkSession, settings: Settings, entities_df: DataFrame) -> bool:
    """Whether the log holds rows of any of these entities (an `entity_urn` column)."""
    return any_stored(entities_df, read_table(spark, settings, LOG_TABLE), ["entity_urn"])


def write_state(
    spark: SparkSession, settings: Settings, rows_df: DataFrame, batch_id: str, row_count: int
) -> str:
    """Write one batch's state rows the cheapest way that gives the same current state.

    - None of the batch's keys is stored: its rows are appended to the state (what a MERGE would do;
      its flag rows match nothing, so they are dropped).
    - The batch has at most `refine.state_log_max_rows` rows: they are appended to the log, and when
      the log then holds more than that, the log is folded (one MERGE for its batches and this one).
    - Otherwise, or when the state holds the batch's own rows (a re-run), the log is folded and the
      rows are MERGEd: insert new keys, replace a key only from another batch with a newer order key,
      and set entity_deleted from the flag rows.

    Args:
        spark: the session.
        settings: the lakehouse settings (`refine.state_log_max_rows`).
        rows_df: the batch's state rows (`silver.state.with_entity_flag_rows` output: the state's
            columns and flag_only).
        batch_id: the batch the rows belong to.
        row_count: how many rows rows_df holds.

    Returns:
        APPENDED, LOGGED, FOLDED (logged, then the log folded), MERGED, or ALREADY_LOGGED (a re-run of
        a logged batch: nothing is written).
    """
    probe = _probe(spark, settings, rows_df, batch_id)
    if not probe.state_holds_keys and not probe.log_holds_keys:
        append(rows_df.filter(~F.col("flag_only")), settings, STATE_TABLE)
        return APPENDED
    if probe.log_holds_batch:
        return ALREADY_LOGGED
    limit = settings.refine.state_log_max_rows
    # A re-run of a batch whose rows the state already holds (it appended or MERGEd them before a crash)
    # takes the MERGE, which leaves those rows as they are: logging them again would change nothing but
    # the log.
    if row_count <= limit and not probe.state_holds_own_rows:
        # Flag rows carry the batch id too, so that a re-run finds a batch that logged only flags.
        append(
            rows_df.withColumn("batch_id", F.lit(batch_id)).withColumn("log_seq", F.lit(probe.last_seq + 1)),
            settings,
            LOG_TABLE,
        )
        if probe.logged_rows + row_count <= limit:
            return LOGGED
        fold_state_log(spark, settings)
        return FOLDED
    fold_state_log(spark, settings)
    statement = (
        f"{_MERGE_ON_KEY} "
        f"WHEN MATCHED AND s.flag_only AND t.entity_deleted <> s.entity_deleted "
        f"THEN UPDATE SET t.entity_deleted = s.entity_deleted "
        f"WHEN MATCHED AND NOT s.flag_only AND t.batch_id <> s.batch_id AND s.order_key > t.order_key "
        f"THEN UPDATE SET {_SET_EVERY_COLUMN} "
        f"WHEN NOT MATCHED AND NOT s.flag_only THEN {insert_row(STATE_TABLE)}"
    )
    target = table_name(settings, STATE_TABLE)
    merge(spark, rows_df, lambda source: statement.format(target=target, source=source), view_name="refine_state")
    return MERGED


def fold_state_log(spark: SparkSession, settings: Settings) -> int:
    """Apply the log to silver.aspect_state in one MERGE, then empty the log.

    The resolved rows of the logged keys are written to Parquet under `<home>/_scratch/fold` first:
    the MERGE reads its source more than once, and the source reads the state.

    Returns:
        The number of log rows applied (0 when the log was empty: nothing is written).
    """
    log_df = read_table(spark, settings, LOG_TABLE)
    logged_rows, last_seq = _log_extent(log_df)
    if not logged_rows:
        return 0
    state_df = read_table(spark, settings, STATE_TABLE)
    keys_df = log_df.select(*STATE_KEYS).distinct()
    resolved_df = to_current_state(state_df.join(keys_df, on=STATE_KEYS, how="left_semi"), log_df)
    scratch = settings.home / "_scratch" / "fold"
    storage = home_of(settings).storage
    resolved_source_df = write_scratch(resolved_df, scratch, storage)
    statement = (
        f"{_MERGE_ON_KEY} WHEN MATCHED THEN UPDATE SET {_SET_EVERY_COLUMN} "
        f"WHEN NOT MATCHED THEN {insert_row(STATE_TABLE)}"
    )
    target = table_name(settings, STATE_TABLE)
    merge(
        spark,
        resolved_source_df,
        lambda source: statement.format(target=target, source=source),
        view_name="fold_state",
    )
    crash_point("state.folded")
    spark.sql(f"DELETE FROM {table_name(settings, LOG_TABLE)} WHERE log_seq <= {last_seq}").collect()
    storage.remove_tree(scratch)
    return logged_rows


@dataclass(frozen=True)
class _Probe:
    """What write_state needs to know about the stored state and log before writing a batch's rows."""

    state_holds_keys: bool  # the state holds a row of one of the batch's keys
    state_holds_own_rows: bool  # ... one the batch itself wrote (a re-run), of a key it has a state row for
    log_holds_keys: bool  # the log holds a row of one of the batch's keys
    log_holds_batch: bool  # the log holds rows the batch itself logged (a re-run)
    logged_rows: int
    last_seq: int  # 0 for an empty log


def _probe(spark: SparkSession, settings: Settings, rows_df: DataFrame, batch_id: str) -> _Probe:
    """Probe the state and its log for a batch's rows: their own facts first, then the batch's keys where needed.

    The first query aggregates the two tables alone. The batch's keys are then looked up (one query,
    each lookup a `first_match`) only in a table that holds rows, and the state's rows of the batch
    itself only when there are some. A semi join whose stored side is empty is never run: on Sail's
    cluster runner (0.7.2) such a join, with the batch's rows read from object storage on its other
    side, left the query waiting forever (a 1M-version first batch, with 1 worker of 4 task slots every
    time; with the default 4 workers, twice in about ten runs). The first batch of a home reads none of
    its rows here.
    """
    state_df = read_table(spark, settings, STATE_TABLE)
    log_df = read_table(spark, settings, LOG_TABLE)
    own_batch = F.col("batch_id") == F.lit(batch_id)
    facts = (
        state_df.agg(
            (F.count(F.lit(1)) > 0).alias("state_has_rows"),
            F.coalesce(F.max(own_batch), F.lit(False)).alias("state_has_batch"),
        )
        .crossJoin(log_df.agg(*_log_extent_columns(), F.coalesce(F.max(own_batch), F.lit(False)).alias("log_holds_batch")))
        .collect()[0]
    )
    keys_df = rows_df.select(*STATE_KEYS)
    lookups = {
        "state_holds_keys": (state_df, keys_df) if facts["state_has_rows"] else None,
        "state_holds_own_rows": (
            (state_df.filter(own_batch), rows_df.filter(~F.col("flag_only")).select(*STATE_KEYS))
            if facts["state_has_batch"]
            else None
        ),
        "log_holds_keys": (log_df, keys_df) if facts["logged_rows"] else None,
    }
    found = _found_keys({name: lookup for name, lookup in lookups.items() if lookup is not None})
    return _Probe(
        state_holds_keys=found.get("state_holds_keys", False),
        state_holds_own_rows=found.get("state_holds_own_rows", False),
        log_holds_keys=found.get("log_holds_keys", False),
        log_holds_batch=bool(facts["log_holds_batch"]),
        logged_rows=int(facts["logged_rows"]),
        last_seq=int(facts["last_seq"]),
    )


def _found_keys(lookups: dict[str, tuple[DataFrame, DataFrame]]) -> dict[str, bool]:
    """For each named (stored rows, batch keys) pair, whether the stored rows hold one of the keys; one query."""
    if not lookups:
        return {}
    results_df = None
    for name, (stored_df, batch_keys_df) in lookups.items():
        result_df = first_match(batch_keys_df, stored_df, STATE_KEYS).agg((F.count(F.lit(1)) > 0).alias(name))
        results_df = result_df if results_df is None else results_df.crossJoin(result_df)
    row = results_df.collect()[0]
    return {name: bool(row[name]) for name in lookups}


def _log_extent_columns() -> list[Column]:
    """Aggregates of the log: its row count (`logged_rows`) and last log_seq (`last_seq`, 0 when empty)."""
    return [F.count(F.lit(1)).alias("logged_rows"), F.coalesce(F.max("log_seq"), F.lit(0)).alias("last_seq")]


def _log_extent(log_df: DataFrame) -> tuple[int, int]:
    """The log's row count and its last log_seq (0 for an empty log)."""
    row = log_df.agg(*_log_extent_columns()).collect()[0]
    return int(row["logged_rows"]), int(row["last_seq"])
