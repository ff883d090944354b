"""Verify the audit hash chain: recompute every linked batch's digest from the table as it is now.

For a batch that differs, its rows are compared with the table at the version the link names. The
Delta histories of the chain and the chained tables (`chain_history`) and the checkpoint of the head
kept outside the home (`chain_checkpoint`) are read too: a cut tail leaves a chain that verifies in
itself, but not its history or the checkpoint. Rows of a batch refine committed and publish has not
yet linked are pending, not forged. Links recorded as byte-stream digests are recomputed that way, so
an older home's chain keeps verifying. Linking is `pipelines.batch.audit_chain`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any

from pyspark.sql import SparkSession

from conf.errors import InputError
from conf.settings import Settings
from gold.audit_chain import BatchDigest, diff_rows, first_broken_link, next_link_position
from gold.audit_chain_columns import EMPTY_ROW_HASHES_DIGEST, is_row_hashes_digest
from pipelines.audit_trail.chain_checkpoint import Checkpoint, checkpoint_problem
from pipelines.audit_trail.chain_keys import CHAIN_TABLE, chain_key
from pipelines.batch.access_retention import pruned_by_retention
from pipelines.batch.audit_chain import (
    LINKING_STAGES,
    byte_stream_digests,
    digest_batches,
    head_digest,
    latest_links,
    read_chain,
    row_hashes,
)
from pipelines.batch.chain_history import table_history_findings
from pipelines.batch.chain_rewrites import rewritten_versions
from pipelines.batch.retention_cuts import CUTS_TABLE, cut_batches
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.progress import finished_batches


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
            row_hashes(spark, settings, table_key, batch_id, int(link["delta_version"])),
            row_hashes(spark, settings, table_key, batch_id, None),
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
