"""Chain links for batches written with delta-rs by a process without a session (the API's access log).

The link's digest is the one `verify` recomputes from the table; links are appended under the chain's
lock (`pipelines.audit_trail.chain_keys.chain_lock`), one writer at a time across processes, and each new head
is written to audit_chain.checkpoint when it is set.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conf.errors import InputError
from conf.locations import parse_location
from conf.settings import Settings
from conf.tables import table_location, table_spec
from gold.audit_chain import CHAINED_TABLES, BatchDigest, canonical_json_lines, new_link, next_link_position
from pipelines.audit_trail.chain_checkpoint import write_checkpoint_or_log
from pipelines.audit_trail.chain_keys import CHAIN_TABLE, DIGEST_CHUNK_ROWS, chain_key, chain_lock
from pipelines.runtime.storage import delta_storage_options, open_source, table_exists

_LINK_COLUMN_TYPES = {"BIGINT": pa.int64(), "STRING": pa.string()}
# Links appended one commit each by a long-running process: a checkpoint every so many keeps the log short.
CHECKPOINT_EVERY = 100


def arrow_digest(table: pa.Table, table_key: str) -> tuple[int, str]:
    """(row count, digest) of one batch's rows given as Arrow (the declared columns, in canonical order)."""
    ordered = table.select(list(table_spec(table_key).column_names)).sort_by([(CHAINED_TABLES[table_key], "ascending")])
    hasher = BatchDigest()
    for offset in range(0, ordered.num_rows, DIGEST_CHUNK_ROWS):
        hasher.add_lines(canonical_json_lines(ordered.slice(offset, DIGEST_CHUNK_ROWS)))
    return hasher.row_count, hasher.hexdigest()


def last_link(table: Any, location: str) -> dict[str, Any] | None:
    """The chain's link with the greatest seq (its seq and link_digest), None for an empty chain.

    Read from the one file the log's statistics say holds it: the API's workers each link their flushes,
    so the head moves under each of them between two links, and reading every link each time would cost
    a read of the whole chain.

    Args:
        table: the chain's DeltaTable, at the version to read.
        location: its storage location (the files' paths are relative to it).
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return None
    if "max.seq" in actions.column_names and not actions.column("max.seq").null_count:
        newest = actions.column("path")[pc.index(actions.column("max.seq"), pc.max(actions.column("max.seq"))).as_py()]
        with open_source(str(parse_location(location) / unquote(newest.as_py()))) as source:
            links = pq.read_table(source, columns=["seq", "link_digest"]).to_pylist()
    else:  # a file without statistics: every link is read
        links = table.to_pyarrow_table(columns=["seq", "link_digest"]).to_pylist()
    return max(links, key=lambda link: link["seq"]) if links else None


class ArrowChainLinker:
    """Links batches a process wrote with delta-rs (no session) into the chain, appending with delta-rs.

    The API server links each flush of its access log this way; the digest is the one `verify` recomputes
    from the table. The chain's head is remembered between links and read again only when another
    process appended to the chain since.

    Args:
        settings: the lakehouse settings (chain location, signing key).
    """

    def __init__(self, settings: Settings):
        self._settings = settings
        self._location = str(table_location(settings, CHAIN_TABLE))
        self._options = delta_storage_options(self._location)
        self._key = chain_key(settings)
        self._table: Any = None
        self._head: tuple[int, int, str] | None = None  # (chain version, next seq, head digest)
        spec = table_spec(CHAIN_TABLE)
        self._schema = pa.schema([(name, _LINK_COLUMN_TYPES[kind]) for name, kind in spec.column_types])

    def _current_head(self) -> tuple[int, str]:
        """(next seq, head digest) of the chain as it is now."""
        from deltalake import DeltaTable

        if self._table is None:
            if not table_exists(self._location):
                return next_link_position([])
            self._table = DeltaTable(self._location, storage_options=self._options)
        else:
            self._table.update_incremental()
        version = int(self._table.version())
        if self._head is None or self._head[0] != version:
            last = last_link(self._table, self._location)
            self._head = (version, *next_link_position([last] if last else []))
        return self._head[1], self._head[2]

    def link(self, table_key: str, batch_id: str, table: pa.Table, version: int) -> dict[str, Any]:
        """Append the link of one written batch.

        Args:
            table_key: a chained table.
            batch_id: the batch written.
            table: its rows (at least the table's declared columns).
            version: the table version the write made.

        Returns:
            The link appended.

        Raises:
            InputError: for a table that is not chained.
        """
        from deltalake import DeltaTable, write_deltalake

        if table_key not in CHAINED_TABLES:
            raise InputError(f"table_key: {table_key!r} not chained (chained: {', '.join(CHAINED_TABLES)})")
        count, digest = arrow_digest(table, table_key)
        with chain_lock(self._settings):
            seq, head = self._current_head()
            link = new_link(seq, table_key, batch_id, version, count, digest, head, int(time.time() * 1000), self._key)
            rows = pa.Table.from_pylist([link], schema=self._schema)
            if self._table is None:
                write_deltalake(self._location, rows, mode="append",
                                configuration=dict(table_spec(CHAIN_TABLE).properties))  # fmt: skip
                self._table = DeltaTable(self._location, storage_options=self._options)
            else:
                write_deltalake(self._table, rows, mode="append")
            written = int(self._table.version())
            if written % CHECKPOINT_EVERY == 0:
                self._table.create_checkpoint()
            self._head = (written, seq + 1, link["link_digest"])
            # A failure is logged, never raised: the flush that called this wrote its rows and must not retry them.
            write_checkpoint_or_log(self._settings, link)
        return link
