"""The people behind the replica's pseudonyms: `privacy.identities`, for the roles allowed to see them.

With `privacy.pseudonymise` on, the replica's tables hold people as pseudonyms, as the lakehouse's do.
Each sync keeps one more table, `privacy.identities (pseudonym, identity)`, the identities of
`ops.identities` decrypted with the home's key store (an erased person reads as an erased subject), so a
BI tool joins it on a pseudonym column (`actor_urn`, `actor`, `source_ip`, ...) to show who acted. It is
copied again whenever `ops.identities` or `ops.erasures` has a new version: after an erasure, the next
sync replaces the table, and its file with the identity, whole (TRUNCATE; the table is unlogged, so no
write-ahead log keeps it either). bi_reader reads it, as it reads every row; a scoped role reads it when
it sees sensitive fields and its scope is unrestricted (an identity is not narrowed by entity).
"""

from __future__ import annotations

from psycopg import Connection, sql

from conf.settings import Settings
from conf.tables import ERASURES, IDENTITIES, table_location
from pipelines.bi.access import grant_identities
from pipelines.bi.replica import STATE_TABLE, SYNC_SCHEMA
from pipelines.privacy.display import read_every_identity
from pipelines.runtime.storage import delta_storage_options, table_exists

PRIVACY_SCHEMA = "privacy"
IDENTITIES_TABLE = sql.Identifier(PRIVACY_SCHEMA, "identities")
NO_VERSION = -1


def source_versions(settings: Settings) -> dict[str, int]:
    """The Delta versions of ops.identities and ops.erasures (NO_VERSION: no table yet)."""
    versions = {}
    for key in (IDENTITIES, ERASURES):
        location = table_location(settings, key)
        if table_exists(location):
            from deltalake import DeltaTable

            versions[key] = DeltaTable(str(location), storage_options=delta_storage_options(location), without_files=True).version()
        else:
            versions[key] = NO_VERSION
    return versions


def sync_identities(conn: Connection, settings: Settings, replica_versions: dict[str, int]) -> int | None:
    """Copy the identities again when either source table changed since the last copy.

    Args:
        conn: the sync's connection (autocommit; the sync lock held).
        settings: the lakehouse settings (privacy, table locations).
        replica_versions: the versions the replica records (`pipelines.bi.sync.replica_versions`).

    Returns:
        The number of identities copied, or None when nothing was to copy (privacy off, or unchanged).
    """
    if not settings.privacy.pseudonymise:
        return None
    versions = source_versions(settings)
    exists = conn.execute("SELECT to_regclass(%s)", (f"{PRIVACY_SCHEMA}.identities",)).fetchone()[0] is not None
    if exists and all(replica_versions.get(key) == version for key, version in versions.items()):
        return None
    identities = read_every_identity(settings)
    state = sql.Identifier(SYNC_SCHEMA, STATE_TABLE)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(PRIVACY_SCHEMA)))
        conn.execute(sql.SQL(
            "CREATE UNLOGGED TABLE IF NOT EXISTS {} (pseudonym text PRIMARY KEY, identity text NOT NULL)"
        ).format(IDENTITIES_TABLE))  # fmt: skip
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(IDENTITIES_TABLE))
        conn.execute(sql.SQL("TRUNCATE {}").format(IDENTITIES_TABLE))
        with conn.cursor().copy(sql.SQL("COPY {} (pseudonym, identity) FROM STDIN").format(IDENTITIES_TABLE)) as copy:
            for pseudonym, identity in sorted(identities.items()):
                copy.write_row((pseudonym, identity))
        grant_identities(conn, PRIVACY_SCHEMA, IDENTITIES_TABLE)
        for key, version in versions.items():
            conn.execute(sql.SQL(
                "INSERT INTO {} (table_key, delta_version, rows, mode, synced_at) VALUES (%s, %s, %s, 'swap', now()) "
                "ON CONFLICT (table_key) DO UPDATE SET delta_version = EXCLUDED.delta_version, rows = EXCLUDED.rows, "
                "mode = EXCLUDED.mode, synced_at = EXCLUDED.synced_at"
            ).format(state), (key, version, len(identities)))  # fmt: skip
    return len(identities)
