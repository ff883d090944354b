"""The Delta histories of the chain and the chained tables: only appends and the documented maintenance.

The chain verifies in itself after its tail was cut (a DELETE of its newest links, the rows they named
deleted too), so `verify` also reads each table's history and names every commit the pipeline never
makes: a DELETE, UPDATE or RESTORE, an overwrite, a property taken off, a MERGE into the chain. What the
project does is accepted: appends, MERGE into the chained tables, OPTIMIZE, VACUUM, the columns and
properties the table registry declares, `lakehouse access-log prune` (a DELETE of access log batches
whose links retention allows to go), and `lakehouse retention apply` (a DELETE of whole batches that a cut
linked in the chain names, with the append-only property lifted just for it), and `lakehouse privacy
enable` (one overwrite per table at the version a migration linked in the chain names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conf.errors import error_text
from conf.settings import Settings
from conf.tables import table_spec
from gold.audit_chain import CHAINED_TABLES
from pipelines.batch.access_retention import ACCESS_TABLE, pruned_by_retention
from pipelines.audit_trail.chain_keys import CHAIN_TABLE
from pipelines.batch.retention_cuts import deletes_only_cut_batches, whole_batch_ids
from pipelines.runtime.maintenance import Commit, TableMaintenance

# Operations that rewrite files without changing rows, or add declared columns.
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "ADD COLUMN", "ADD COLUMNS"})


def history_tables() -> tuple[str, ...]:
    """The tables whose histories verify reads: the chain, then the chained tables."""
    return (CHAIN_TABLE, *CHAINED_TABLES)


def table_history_findings(
    settings: Settings, maintenance: TableMaintenance, chain: Sequence[Mapping[str, Any]], now_ms: int,
    cuts: frozenset[tuple[str, str]] = frozenset(), rewrites: frozenset[tuple[str, int]] = frozenset(),
) -> list[tuple[str, str, tuple[str, ...]]]:  # fmt: skip
    """(table, what is wrong, the commits) for each table of `history_tables` whose history holds a commit
    the pipeline and its maintenance never make, or cannot be read (a prune judged at `now_ms`; `cuts` the
    (table, batch) retention deleted, as `retention_cuts.cut_batches` reads them; `rewrites` the (table,
    version) the privacy migration rewrote, as `chain_rewrites.rewritten_versions` reads them)."""
    findings = []
    for table_key in history_tables():
        try:
            history = maintenance.history(table_key)
        except Exception as exc:  # noqa: BLE001 - a history that cannot be read hides what it held
            findings.append((table_key, f"its Delta history cannot be read ({error_text(exc)})", ()))
            continue
        unexpected = unexpected_commits(settings, table_key, history, chain, now_ms, cuts, rewrites)
        if unexpected:
            reason = (f"its Delta history holds {len(unexpected)} commit(s) that neither publishing nor maintenance "
                      "makes (rows removed or changed, or a protection taken off)")  # fmt: skip
            findings.append((table_key, reason, tuple(unexpected)))
    return findings


def unexpected_commits(
    settings: Settings, table_key: str, history: Sequence[Commit], chain: Sequence[Mapping[str, Any]], now_ms: int,
    cuts: frozenset[tuple[str, str]] = frozenset(), rewrites: frozenset[tuple[str, int]] = frozenset(),
) -> list[str]:  # fmt: skip
    """Name the commits of a table's history that neither the pipeline nor its maintenance makes.

    Args:
        settings: the lakehouse settings (the access log's retention).
        table_key: the chain or a chained table.
        history: the table's commits (any order).
        chain: the chain's links (to judge a prune of the access log by its batches' links).
        now_ms: the time retention is judged at, as for the rows (a batch may be gone once past it).
        cuts: (table, batch) of the batches cuts linked in the chain name as deleted by retention.
        rewrites: (table, version) of the rewrites migrations linked in the chain name.

    Returns:
        One text per unexpected commit, oldest first: `v7 DELETE (predicate seq = 5)`.
    """
    found = []
    ordered = sorted(history, key=lambda c: c.version)
    for index, commit in enumerate(ordered):
        why = None if (table_key, commit.version) in rewrites else _unexpected(settings, table_key, commit, chain, now_ms, cuts)
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        if why is not None and _lifts_append_only_for(table_key, commit, following, cuts, rewrites):
            why = None
        if why is not None:
            found.append(f"v{commit.version} {commit.operation} ({why})")
    return found


def _lifts_append_only_for(
    table_key: str, commit: Commit, following: Commit | None, cuts: frozenset[tuple[str, str]],
    rewrites: frozenset[tuple[str, int]],
) -> bool:  # fmt: skip
    """Whether a commit only turned delta.appendOnly off for the next one: a DELETE of batches retention
    cut, or a rewrite the privacy migration recorded."""
    if commit.operation.upper() != "SET TBLPROPERTIES" or following is None:
        return False
    if _properties(commit.parameters.get("properties")) != {"delta.appendOnly": "false"}:
        return False
    if (table_key, following.version) in rewrites:
        return True
    return following.operation.upper() == "DELETE" and deletes_only_cut_batches(
        table_key, str(following.parameters.get("predicate") or ""), cuts
    )


def _unexpected(
    settings: Settings, table_key: str, commit: Commit, chain: Sequence[Mapping[str, Any]], now_ms: int,
    cuts: frozenset[tuple[str, str]] = frozenset(),
) -> str | None:  # fmt: skip
    """Why a commit is not one the project makes, or None when it is."""
    operation = commit.operation.upper()
    parameters = commit.parameters
    if operation.startswith("CREATE TABLE") or operation.startswith("CREATE OR REPLACE TABLE"):
        return None if commit.version == 0 and "REPLACE" not in operation else "the table was created again"
    if operation == "WRITE":
        mode = str(parameters.get("mode", "Append"))
        return None if mode.lower() == "append" else f"mode {mode}: rows replaced"
    if operation == "MERGE":
        return None if table_key in CHAINED_TABLES else "the chain is written by appends only"
    if operation in MAINTENANCE_OPERATIONS:
        return None
    if operation == "SET TBLPROPERTIES":
        declared = dict(table_spec(table_key).properties)
        changed = _properties(parameters.get("properties"))
        undeclared = {k: v for k, v in changed.items() if declared.get(k) != v}
        return None if changed and not undeclared else f"properties {json.dumps(undeclared or changed, sort_keys=True)}"
    if operation == "DELETE" and deletes_only_cut_batches(table_key, str(parameters.get("predicate") or ""), cuts):
        return None
    if operation == "DELETE" and table_key == ACCESS_TABLE:
        return _not_a_prune(settings, commit, chain, now_ms)
    predicate = parameters.get("predicate")
    return f"predicate {predicate}" if predicate else "rows removed or changed"


def _not_a_prune(settings: Settings, commit: Commit, chain: Sequence[Mapping[str, Any]], now_ms: int) -> str | None:
    """Why a DELETE of the access log is not `access-log prune`'s, or None when retention allows it by `now_ms`."""
    predicate = str(commit.parameters.get("predicate") or "")
    batch_ids = whole_batch_ids(predicate)
    if batch_ids is None:
        return f"predicate {predicate or '(none)'}: not a prune of whole batches"
    links = {link["batch_id"]: link for link in chain if link["table_key"] == ACCESS_TABLE}
    for batch_id in batch_ids:
        link = links.get(batch_id)
        if link is None:
            return f"deletes batch {batch_id!r}, which no link names"
        if not pruned_by_retention(settings, link, now_ms):
            return f"deletes batch {batch_id!r}, linked inside access_log.retention_days"
    return None


def _properties(value: Any) -> dict[str, str]:
    """The properties a SET TBLPROPERTIES commit names (delta-rs and Spark record them as JSON text)."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {"": value}
        if isinstance(loaded, Mapping):
            return {str(k): str(v) for k, v in loaded.items()}
    return {}
