"""The audit hash chain on the tables: link published batches into ops.audit_chain, and verify the chain.

Linking runs inside the publish stages after their MERGE and before progress is recorded; it adds a link
only for a (table, batch) whose latest link has another digest, so a re-run after a crash adds nothing
twice. Verification recomputes every linked batch's digest from the table as it is now and, for a batch
that differs, compares its rows with the table at the version the link names.

Verification also reads the Delta histories of the chain and the chained tables (`chain_history`), and
compares the chain with a checkpoint of its head kept outside the home (`chain_checkpoint`), which every
link appended rewrites when audit_chain.checkpoint is set: a cut tail leaves a chain that verifies in
itself, but not its history or the checkpoint. Rows of a batch refine committed and publish has not yet
linked are pending, not forged.

Digests are computed by the engine (`gold.audit_chain_columns`: row hashes, then one aggregate per batch);
the driver receives one row per batch. Links recorded before that hold byte-stream digests
(`gold.audit_chain.BatchDigest`, computed here from each batch's rows pulled as Arrow): verify still
recomputes those batches that way, so an older home's chain keeps verifying.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import table_location, table_name, table_spec
from gold.audit_chain import (
    CHAINED_TABLES,
    BatchDigest,
    canonical_json_lines,
    diff_rows,
    first_broken_link,
    new_link,
    next_link_position,
)
from gold.audit_chain_columns import EMPTY_ROW_HASHES_DIGEST, is_row_hashes_digest, to_batch_digests, with_row_hash
from pipelines.batch.access_retention import pruned_by_retention
from pipelines.audit_trail.chain_checkpoint import Checkpoint, checkpoint_problem, write_checkpoint
from pipelines.batch.chain_history import table_history_findings
# create_key: `lakehouse audit-key create` and the tests import it from here, with the chain's other operations.
from pipelines.audit_trail.chain_keys import CHAIN_TABLE, DIGEST_CHUNK_ROWS, chain_key, chain_lock, create_key  # noqa: F401
from pipelines.batch.chain_rewrites import rewritten_versions
from pipelines.batch.retention_cuts import CUTS_TABLE, cut_batches
from pipelines.runtime.io import append, read_table
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import finished_batches

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


def _row_hashes(
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
            recorded = _row_hashes(spark, settings, table_key, batch_id, link["delta_version"])
        except Exception:  # noqa: BLE001 - the linked version was vacuumed: the takeover cannot be proven
            continue
        diff = diff_rows(recorded, _row_hashes(spark, settings, table_key, batch_id, None))
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


@dataclass(frozen=True)
class BrokenLink:
    """A finding of verification: a broken link, a changed batch, unlinked rows, a commit, a cut tail.

    `seq` is the link concerned, -1 for none (rows no link names, a table's history).
    """

    seq: int
    table_key: str | None
    batch_id: str | None
    reason: str
    missing: int = 0
    added: int = 0
    changed: int = 0
    examples: tuple[str, ...] = ()
    commits_after: tuple[str, ...] = ()


@dataclass(frozen=True)
class PendingBatch:
    """Rows of a batch refine committed that a publish stage has not linked yet (not tampering)."""

    table_key: str
    batch_id: str
    rows: int
    stage: str


@dataclass(frozen=True)
class Verification:
    """What `verify` found: OK with the head digest, or the first broken link; batches still pending.

    `problems` holds every finding, the first of them in `broken`.
    """

    head_digest: str
    links: int
    batches_checked: int
    rows_checked: int
    broken: BrokenLink | None = None
    checked_tables: tuple[str, ...] = field(default=())
    pending: tuple[PendingBatch, ...] = ()
    problems: tuple[BrokenLink, ...] = ()
    checkpoint: Checkpoint | None = None

    @property
    def ok(self) -> bool:
        """True when every link and every linked batch verified (pending batches are not a break)."""
        return self.broken is None


def _recorded_date(link: Mapping[str, Any]) -> date:
    return datetime.fromtimestamp(link["recorded_at_ms"] / 1000, tz=timezone.utc).date()


def verify_chain(
    spark: SparkSession,
    settings: Settings,
    from_date: date | None = None,
    to_date: date | None = None,
    now_ms: int | None = None,
    checkpoint: Checkpoint | None = None,
) -> Verification:
    """Verify the chain links, then recompute each linked batch's digest from its table as it is now.

    Args:
        spark: the session.
        settings: the lakehouse settings (signing key, max_examples).
        from_date: check only batches whose latest link was recorded on or after this UTC date.
        to_date: ... and on or before this one. The links themselves are always checked whole.
        now_ms: the time retention is judged at (an access log batch linked before its cutoff may be gone);
            default the clock.
        checkpoint: a head written outside the home (read before the chain): the chain must still hold it.

    Returns:
        The verification; `broken` names the first problem (a cut tail against the checkpoint first, then
        by seq, then unlinked rows, then commits in the tables' histories) with row counts and example keys;
        `pending` the batches a publish stage will link.
    """
    if from_date and to_date and from_date > to_date:
        raise InputError(f"--from: {from_date} is after --to {to_date}")
    whole = from_date is None and to_date is None
    # Read before the chain: a stage links a batch before it records it, so a batch it had not recorded
    # then may be linked by now without this chain showing it, and is pending, not forged.
    stages = sorted(set(LINKING_STAGES.values())) if whole else []
    linked_before = {stage: set(finished_batches(spark, settings, stage)) for stage in stages}
    chain = read_chain(spark, settings)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    head = next_link_position(chain)[1]
    failures: list[BrokenLink] = []
    problem = None if checkpoint is None else checkpoint_problem(chain, checkpoint, chain_key(settings))
    cut = [] if problem is None else [BrokenLink(checkpoint.seq, CHAIN_TABLE, None, problem)]
    cuts = cut_batches(spark, settings, latest_links(chain))
    rewrites = rewritten_versions(spark, settings, latest_links(chain))
    history = _history_findings(spark, settings, chain, now_ms, cuts, rewrites)
    broken_chain = first_broken_link(chain, chain_key(settings))
    if broken_chain is not None:
        index, reason = broken_chain
        link = chain[index]
        failures.append(BrokenLink(index, link.get("table_key"), link.get("batch_id"), reason))
        return _verification(head, chain, 0, 0, cut + failures + history, (), (), checkpoint)
    latest = latest_links(chain)
    in_window = {
        k: link
        for k, link in latest.items()
        if (from_date is None or _recorded_date(link) >= from_date) and (to_date is None or _recorded_date(link) <= to_date)
    }
    pending: list[PendingBatch] = []
    batches = rows = 0
    tables = tuple(sorted({table for table, _ in in_window}))
    if whole:
        tables = tuple(sorted(set(tables) | set(LINKING_STAGES) | {CUTS_TABLE}))
    refined: set[str] | None = None
    for table_key in tables:
        windowed = {batch: link for (table, batch), link in in_window.items() if table == table_key}
        chained = frozenset(int(link["delta_version"]) for link in chain if link["table_key"] == table_key)
        try:
            current = digest_batches(spark, settings, table_key)
            # Batches whose newest link predates row hashes are recomputed as they were digested then.
            older = sorted(b for b, link in windowed.items() if not is_row_hashes_digest(link["batch_digest"]))
            current_older = byte_stream_digests(spark, settings, table_key, older) if older else {}
        except Exception as exc:  # noqa: BLE001 - a data file replaced on disk no longer matches the Delta log
            first = min(windowed.values(), key=lambda link: link["seq"]) if windowed else {"seq": -1, "delta_version": -1}
            failures.append(BrokenLink(
                int(first["seq"]), table_key, None,
                f"the table cannot be read as it is now (a data file was replaced or removed): {_first_line(exc)}",
                commits_after=_commits_after(spark, settings, table_key, int(first["delta_version"]), chained),
            ))  # fmt: skip
            continue
        for batch_id, link in windowed.items():
            if is_row_hashes_digest(link["batch_digest"]):
                count, digest = current.get(batch_id, (0, EMPTY_ROW_HASHES_DIGEST))
            else:
                count, digest = current_older.get(batch_id, (0, BatchDigest().hexdigest()))
            if count == 0 and (pruned_by_retention(settings, link, now_ms) or (table_key, batch_id) in cuts):
                continue  # a batch deleted by retention
            batches += 1
            rows += count
            if digest != link["batch_digest"]:
                failures.append(_explain(spark, settings, link, count, chained))
        if whole:
            linked = {batch for (table, batch) in latest if table == table_key}
            unlinked = sorted(set(current) - linked, key=lambda b: (b is None, b or ""))
            stage = LINKING_STAGES.get(table_key)
            if unlinked and stage and refined is None:
                refined = set(finished_batches(spark, settings, "refine"))  # read after the rows
            for batch_id in unlinked:
                if stage and batch_id in (refined or set()) and batch_id not in linked_before[stage]:
                    pending.append(PendingBatch(table_key, batch_id, current[batch_id][0], stage))
                    continue
                failures.append(BrokenLink(
                    -1, table_key, batch_id,
                    "rows of a batch the chain never linked and no stage will link (forged)", added=current[batch_id][0],
                ))  # fmt: skip
    ordered = cut + sorted(failures, key=lambda f: (f.seq < 0, f.seq)) + history
    return _verification(head, chain, batches, rows, ordered, tables, tuple(pending), checkpoint)


def _verification(
    head: str, chain: list[dict[str, Any]], batches: int, rows: int, failures: list[BrokenLink],
    tables: tuple[str, ...], pending: tuple[PendingBatch, ...], checkpoint: Checkpoint | None,
) -> Verification:  # fmt: skip
    """The verification of these findings (in the order given: the first is the one reported as broken)."""
    return Verification(head, len(chain), batches, rows, failures[0] if failures else None, tables, pending,
                        tuple(failures), checkpoint)  # fmt: skip


def _history_findings(
    spark: SparkSession, settings: Settings, chain: list[dict[str, Any]], now_ms: int, cuts: frozenset[tuple[str, str]],
    rewrites: frozenset[tuple[str, int]],
) -> list[BrokenLink]:  # fmt: skip
    """One finding per table whose Delta history holds a commit the pipeline and its maintenance never make."""
    found = table_history_findings(settings, maintenance_for(settings, spark), chain, now_ms, cuts, rewrites)
    return [BrokenLink(-1, table_key, None, reason, commits_after=commits) for table_key, reason, commits in found]


def _explain(
    spark: SparkSession, settings: Settings, link: Mapping[str, Any], current_count: int, chained: frozenset[int]
) -> BrokenLink:
    """Name what changed in a batch: rows missing, added, changed against the version its link names."""
    table_key, batch_id = link["table_key"], link["batch_id"]
    limit = settings.audit_chain.max_examples
    commits = _commits_after(spark, settings, table_key, int(link["delta_version"]), chained)
    try:
        diff = diff_rows(
            _row_hashes(spark, settings, table_key, batch_id, int(link["delta_version"])),
            _row_hashes(spark, settings, table_key, batch_id, None),
        )
    except Exception as exc:  # noqa: BLE001 - a vacuumed or unreadable version: report counts only
        return BrokenLink(
            int(link["seq"]), table_key, batch_id,
            f"digest differs; version {link['delta_version']} is no longer readable ({type(exc).__name__}), "
            f"so rows are compared by count only: {link['row_count']} recorded, {current_count} now",
            commits_after=commits,
        )  # fmt: skip
    if not (diff.missing or diff.added or diff.changed):
        reason = f"digest differs but the rows at version {link['delta_version']} match today's: that version's files were altered"
    else:
        reason = "rows differ from the version the chain names"
    return BrokenLink(
        int(link["seq"]), table_key, batch_id, reason,
        missing=len(diff.missing), added=len(diff.added), changed=len(diff.changed),
        examples=(diff.changed + diff.missing + diff.added)[:limit], commits_after=commits,
    )  # fmt: skip


def _commits_after(
    spark: SparkSession, settings: Settings, table_key: str, version: int, chained: frozenset[int] = frozenset()
) -> tuple[str, ...]:
    """The operations committed to a table after `version` (`v7 UPDATE`), oldest first, but the `chained` versions.

    A version a link names was written by a publish; the others after it are what changed the rows since.
    """
    try:
        history = maintenance_for(settings, spark).history(table_key)
    except Exception:  # noqa: BLE001 - history is a hint; the row comparison is the finding
        return ()
    return tuple(
        f"v{c.version} {c.operation}"
        for c in sorted(history, key=lambda c: c.version)
        if c.version > version and c.version not in chained
    )


def _first_line(exc: BaseException) -> str:
    """The first line of an engine error (its message without the server's stack)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


def head_digest(spark: SparkSession, settings: Settings) -> str:
    """The digest of the chain's newest link (all zeros for an empty chain)."""
    rows = read_table(spark, settings, CHAIN_TABLE).orderBy(F.col("seq").desc()).limit(1).collect()
    return next_link_position(rows)[1]
