"""The audit hash chain on the tables: link published batches into ops.audit_chain, and read the chain.

Linking runs inside the publish stages after their MERGE and before progress is recorded; it adds a link
only for a (table, batch) whose latest link has another digest, so a re-run after a crash adds nothing
twice. Every link appended rewrites the checkpoint of the head kept outside the home
(`chain_checkpoint`) when audit_chain.checkpoint is set. Verification is
`pipelines.batch.chain_verification`'s.

Digests are computed by the engine (`gold.audit_chain_columns`: row hashes, then one aggregate per batch);
the driver receives one row per batch. Links recorded before that hold byte-stream digests
(`gold.audit_chain.BatchDigest`, computed here from each batch's rows pulled as Arrow): verification still
recomputes those batches that way, so an older home's chain keeps verifying.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import table_location, table_name, table_spec
from gold.audit_chain import CHAINED_TABLES, BatchDigest, canonical_json_lines, diff_rows, new_link, next_link_position
from gold.audit_chain_columns import EMPTY_ROW_HASHES_DIGEST, to_batch_digests, with_row_hash
from pipelines.audit_trail.chain_checkpoint import write_checkpoint
# create_key: `lakehouse audit-key create` and the tests import it from here, with the chain's other operations.
from pipelines.audit_trail.chain_keys import CHAIN_TABLE, DIGEST_CHUNK_ROWS, chain_key, chain_lock, create_key  # noqa: F401
from pipelines.batch.retention_cuts import cut_batches
from pipelines.runtime.io import append, read_table
from pipelines.runtime.maintenance import maintenance_for

# The stage that links each chained table's batches (the API server links the access log's as it writes them).
LINKING_STAGES = {
    "gold.audit_events": "publish_audit",
    "silver.entity_change_events": "publish_openmetadata",
    "gold.openmetadata_change_events": "publish_openmetadata",
}


def read_chain(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    """Return every chain link as a dict, in seq order."""
    return [row.asDict() for row in read_table(spark, settings, CHAIN_TABLE).orderBy("seq").collect()]


def table_at(spark: SparkSession, settings: Settings, table_key: str, version: int | None = None) -> DataFrame:
    """Return a chained table now, or as of a Delta version (time travel on its location)."""
    if version is None:
        return read_table(spark, settings, table_key)
    reader = spark.read.format("delta").option("versionAsOf", int(version))
    if settings.catalog.managed_tables:
        return reader.table(table_name(settings, table_key))
    return reader.load(str(table_location(settings, table_key)))


def _batch_tables(
    spark: SparkSession, settings: Settings, table_key: str, batch_ids: list[str] | None, version: int | None
) -> Iterator[tuple[str | None, pa.Table]]:
    """Yield (batch_id, its rows as Arrow sorted by the table's key), one batch in memory at a time.

    With `batch_ids` None every batch is yielded, and last the rows without a batch id (as batch None).
    """
    df = table_at(spark, settings, table_key, version).select(*table_spec(table_key).column_names)
    listing_all = batch_ids is None
    if batch_ids is None:
        batch_ids = sorted(r.batch_id for r in df.select("batch_id").distinct().collect() if r.batch_id is not None)
    def fetch(batch_id: str) -> pa.Table:
        return df.filter(F.col("batch_id") == F.lit(batch_id)).toArrow().sort_by([(CHAINED_TABLES[table_key], "ascending")])

    ordered = sorted(batch_ids)
    # The engine reads the next batch while this thread hashes the current one (two cores busy, not one).
    with ThreadPoolExecutor(max_workers=1) as pool:
        upcoming = pool.submit(fetch, ordered[0]) if ordered else None
        for index, batch_id in enumerate(ordered):
            table = upcoming.result()
            upcoming = pool.submit(fetch, ordered[index + 1]) if index + 1 < len(ordered) else None
            if table.num_rows:
                yield batch_id, table
    if listing_all:
        # Rows without a batch id belong to no link: verify reports them (the pipeline never writes one).
        nameless = df.filter(F.col("batch_id").isNull()).toArrow()
        if nameless.num_rows:
            yield None, nameless.sort_by([(CHAINED_TABLES[table_key], "ascending")])


def digest_batches(
    spark: SparkSession, settings: Settings, table_key: str, batch_ids: list[str] | None = None, version: int | None = None
) -> dict[str | None, tuple[int, str]]:
    """Return batch_id -> (row count, `rows-sha256` digest) for a chained table's batches (all when None).

    The engine hashes the rows and aggregates each batch; rows without a batch id come as batch None.
    """
    df = table_at(spark, settings, table_key, version).select(*table_spec(table_key).column_names)
    if batch_ids is not None:
        df = df.filter(F.col("batch_id").isin(sorted(batch_ids)))
    digests_df = to_batch_digests(df, CHAINED_TABLES[table_key])
    return {r.batch_id: (int(r.row_count), r.batch_digest) for r in digests_df.collect()}


def byte_stream_digests(
    spark: SparkSession, settings: Settings, table_key: str, batch_ids: list[str] | None = None, version: int | None = None
) -> dict[str | None, tuple[int, str]]:
    """Return batch_id -> (row count, byte-stream digest): the digest links recorded before row hashes hold.

    Each batch's rows come to this process (one batch at a time) and are hashed here in key order.
    """
    digests: dict[str, tuple[int, str]] = {}
    for batch_id, table in _batch_tables(spark, settings, table_key, batch_ids, version):
        hasher = BatchDigest()
        for offset in range(0, table.num_rows, DIGEST_CHUNK_ROWS):
            hasher.add_lines(canonical_json_lines(table.slice(offset, DIGEST_CHUNK_ROWS)))
        digests[batch_id] = (hasher.row_count, hasher.hexdigest())
    return digests


def row_hashes(
    spark: SparkSession, settings: Settings, table_key: str, batch_id: str, version: int | None
) -> dict[str, str]:
    """key -> row hash of one batch (a key seen twice is kept as `<key>#2`, so a duplicate counts as added).

    The engine hashes the rows; this process gets one key and hash per row of the batch (only to explain
    a digest that differs, or a takeover).
    """
    key_column = CHAINED_TABLES[table_key]
    df = table_at(spark, settings, table_key, version).select(*table_spec(table_key).column_names)
    hashed_df = with_row_hash(df.filter(F.col("batch_id") == F.lit(batch_id))).select(key_column, "row_hash")
    hashes: dict[str, str] = {}
    for row in hashed_df.orderBy(key_column, "row_hash").collect():
        key = str(row[key_column])
        while key in hashes:
            key += "#2"
        hashes[key] = row.row_hash
    return hashes


def latest_links(chain: list[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The newest link of each (table, batch)."""
    return {(link["table_key"], link["batch_id"]): link for link in chain}


def link_batches(
    spark: SparkSession, settings: Settings, table_keys: Sequence[str], batch_ids: list[str], *, appended: bool = False
) -> int:
    """Append chain links for the batches just published to chained tables (one commit for all of them).

    Also re-links earlier batches whose rows the publish legitimately took over (a MERGE that replaced
    a stored row with a preferred one moves it to the new batch), but only when every row such a batch
    lost now belongs to one of `batch_ids` and its other rows are unchanged; otherwise its link is left
    as it was and `verify` reports the batch.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        table_keys: keys of CHAINED_TABLES, linked in this order.
        batch_ids: the batches this publish wrote.
        appended: the publish only appended rows, so no earlier batch lost any: the search for rows
            taken over (which counts every batch's rows) is skipped.

    Returns:
        The number of links appended (0 on a re-run after they were appended).

    Raises:
        InputError: for a table that is not chained.
        SourceUnavailable: when audit_chain.checkpoint cannot be written (the links are appended; the
            next publish writes it).
    """
    unchained = [key for key in table_keys if key not in CHAINED_TABLES]
    if unchained:
        raise InputError(f"table_keys: {unchained!r} not chained (chained: {', '.join(CHAINED_TABLES)})")
    with chain_lock(settings):
        chain = read_chain(spark, settings)
        links = _append_links(spark, settings, chain, table_keys, batch_ids, appended)
        # Written on every publish, new links or not: a publish that failed to write it is made good by the next.
        write_checkpoint(settings, links[-1] if links else (chain[-1] if chain else None))
        return len(links)


def _append_links(
    spark: SparkSession, settings: Settings, chain: list[dict[str, Any]], table_keys: Sequence[str],
    batch_ids: list[str], appended: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    latest = latest_links(chain)
    key = chain_key(settings)
    next_seq, head = next_link_position(chain)
    recorded_at = int(time.time() * 1000)
    maintenance = maintenance_for(settings, spark)
    links = []
    for table_key in table_keys:
        version = maintenance.version(table_key)
        digests = digest_batches(spark, settings, table_key, sorted(batch_ids))
        candidates = {b: digests[b] for b in sorted(batch_ids) if b in digests}
        if not appended:
            candidates.update(_taken_over(spark, settings, table_key, latest, batch_ids, version))
        for batch_id, (count, digest) in candidates.items():
            previous = latest.get((table_key, batch_id))
            if previous is not None and previous["batch_digest"] == digest:
                continue
            link = new_link(
                next_seq + len(links), table_key, batch_id, version, count, digest, head, recorded_at, key
            )
            links.append(link)
            head = link["link_digest"]
    if links:
        schema = table_spec(CHAIN_TABLE).columns
        append(spark.createDataFrame([tuple(l[c] for c in table_spec(CHAIN_TABLE).column_names) for l in links], schema),
               settings, CHAIN_TABLE)  # fmt: skip
    return links


def _taken_over(
    spark: SparkSession, settings: Settings, table_key: str, latest: Mapping[tuple[str, str], Mapping[str, Any]],
    batch_ids: list[str], version: int,
) -> dict[str, tuple[int, str]]:  # fmt: skip
    """Earlier batches whose rows a publish of `batch_ids` took over, with their new (count, digest)."""
    linked = {batch: link for (table, batch), link in latest.items() if table == table_key and batch not in batch_ids}
    if not linked:
        return {}
    counts = {
        r.batch_id: int(r.n)
        for r in read_table(spark, settings, table_key).groupBy("batch_id").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    shrunk = [b for b, link in linked.items() if counts.get(b, 0) < link["row_count"]]
    if shrunk:
        # A batch retention deleted lost its rows to no other batch.
        cut = {batch for table, batch in cut_batches(spark, settings, latest) if table == table_key}
        shrunk = [b for b in shrunk if b not in cut]
    if not shrunk:
        return {}
    key_column = CHAINED_TABLES[table_key]
    taken: dict[str, tuple[int, str]] = {}
    for batch_id in sorted(shrunk):
        link = linked[batch_id]
        try:
            recorded = row_hashes(spark, settings, table_key, batch_id, link["delta_version"])
        except Exception:  # noqa: BLE001 - the linked version was vacuumed: the takeover cannot be proven
            continue
        diff = diff_rows(recorded, row_hashes(spark, settings, table_key, batch_id, None))
        if diff.added or diff.changed:
            continue
        moved = (
            read_table(spark, settings, table_key)
            .filter(F.col(key_column).isin(list(diff.missing)) & F.col("batch_id").isin(batch_ids))
            .select(key_column)
            .distinct()
            .count()
        )
        if moved == len(diff.missing):
            taken.update(digest_batches(spark, settings, table_key, [batch_id]) or {batch_id: (0, EMPTY_ROW_HASHES_DIGEST)})
    return taken


def head_digest(spark: SparkSession, settings: Settings) -> str:
    """The digest of the chain's newest link (all zeros for an empty chain)."""
    rows = read_table(spark, settings, CHAIN_TABLE).orderBy(F.col("seq").desc()).limit(1).collect()
    return next_link_position(rows)[1]
