"""`lakehouse privacy enable`: an existing home migrated in place to pseudonyms, the chain extended to prove it.

In order, under the run lock:

1. `verify` must pass (a home with findings is not migrated: the migration would hide them).
2. Every identity the tables hold (person urns anywhere, source IPs and user agents with the person whose
   event carried them) is recorded in ops.identities, encrypted under its person's key.
3. Each table holding personal values is rewritten once with them pseudonymised as landing would have
   written them (`bronze.pseudonyms.with_pseudonymous_columns`), staged to scratch Parquet first.
4. One row per rewritten table (the Delta version of its rewrite) goes to ops.privacy_migrations and is
   linked in the chain; then every chained batch is linked again with its new digest.
5. Each rewritten table is vacuumed with no retention and its log cut at a checkpoint of its newest
   version, so no earlier version (time travel, or the log's file statistics) holds an identity.

`verify` then passes again: the newest link of each batch names its pseudonymous digest, and the
rewrites are accepted at exactly the versions the linked migration names.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.pseudonym_rules import PERSON_PREFIX
from bronze.pseudonyms import is_pseudonym, to_person_urns, with_pseudonymous_columns
from conf.errors import InputError
from conf.settings import Settings
from conf.tables import TABLES, table_name, table_spec
from gold.audit_chain import CHAINED_TABLES
from pipelines.batch.audit_chain import link_batches
from pipelines.batch.chain_verification import verify_chain
from pipelines.batch.chain_rewrites import MIGRATIONS_TABLE
from pipelines.privacy.identities import record_identities
from pipelines.privacy.keystore import key_store_for
from pipelines.runtime.home import home_of
from pipelines.runtime.io import append, read_table, replace_where, write_scratch
from pipelines.runtime.maintenance import maintenance_for

# The proofs and the privacy tables themselves: never rewritten (they hold no identity in clear).
UNTOUCHED = frozenset({
    "ops.audit_chain", "ops.retention_cuts", "ops.legal_holds", "ops.identities", "ops.erasures", MIGRATIONS_TABLE,
    "ops.stage_progress", "bronze.landed_files", "bronze.kafka_offsets",
})  # fmt: skip
# Hashes other tables refer to by value (record hashes link silver rows to their bronze records).
KEPT_COLUMNS = ("record_hash", "prev_record_hash", "source_id", "event_id", "batch_id", "prev_batch_id")
_PERSONAL_TYPES = ("string", "array<string>", "map<string,string>")


@dataclass(frozen=True)
class Migration:
    """What `privacy enable` did: its id, rows rewritten per table, links appended, identities recorded."""

    migration_id: str
    rewritten: dict[str, int]
    links: int
    identities: int


def enable_privacy(spark: SparkSession, settings: Settings) -> Migration:
    """Migrate the home's tables to pseudonyms and extend the chain (see the module docstring).

    Raises:
        InputError: when privacy.pseudonymise is off (new batches would land identities again) or
            verify finds problems before the migration (naming the first).
    """
    if not settings.privacy.pseudonymise:
        raise InputError(
            "privacy.pseudonymise: false; set it to true first (in the home's settings), so that new batches land "
            "pseudonymised too, then run `lakehouse privacy enable` again"
        )
    before = verify_chain(spark, settings)
    if not before.ok:
        problem = before.broken
        raise InputError(f"verify: the chain is broken before the migration ({problem.table_key}: {problem.reason}); nothing was changed")
    keys = key_store_for(settings, create=True)
    tables = [key for key in TABLES if key not in UNTOUCHED and _personal_columns(key)]
    identities = record_identities(spark, settings, keys, _stored_identities(spark, settings, tables))
    secret = keys.pseudonym_secret()
    maintenance = maintenance_for(settings, spark)
    migration_id = f"migration-{uuid.uuid4().hex[:12]}"
    rewritten, rows = {}, []
    for table_key in tables:
        count = read_table(spark, settings, table_key).count()
        if count == 0:
            continue
        version = _rewrite(spark, settings, table_key, secret, migration_id)
        rewritten[table_key] = count
        rows.append((f"{table_key}@{version}", table_key, version, count, int(time.time() * 1000), migration_id))
    links = 0
    if rows:
        append(spark.createDataFrame(rows, table_spec(MIGRATIONS_TABLE).columns), settings, MIGRATIONS_TABLE)
        links += link_batches(spark, settings, [MIGRATIONS_TABLE], [migration_id], appended=True)
        chained = [key for key in CHAINED_TABLES if key in rewritten]
        batch_ids = sorted({
            r.batch_id for key in chained
            for r in read_table(spark, settings, key).select("batch_id").distinct().collect() if r.batch_id
        })  # fmt: skip
        if chained and batch_ids:
            links += link_batches(spark, settings, chained, batch_ids, appended=True)
        for table_key in rewritten:
            maintenance.vacuum(table_key, 0)
            _forget_earlier_versions(settings, table_key)
    return Migration(migration_id, rewritten, links, identities)


def _forget_earlier_versions(settings: Settings, table_key: str) -> None:
    """Checkpoint the table, then delete its log files before the checkpoint: their file statistics
    (each column's least and greatest value) held identities, and time travel to those versions ends."""
    from deltalake import DeltaTable

    home = home_of(settings)
    location = home.table_location(table_key)
    table = DeltaTable(str(location), storage_options=home.storage_options or None)
    table.create_checkpoint()
    newest = table.version()
    for stored in home.list(location / "_delta_log"):
        stem = stored.location.name.split(".")[0]
        if stem.isdigit() and int(stem) < newest:
            home.storage.delete(stored.location)


def _personal_columns(table_key: str) -> list[str]:
    """The columns of a table that may hold a personal value."""
    return [name for name, kind in table_spec(table_key).column_types
            if kind.lower().replace(" ", "") in _PERSONAL_TYPES and name not in KEPT_COLUMNS]  # fmt: skip


def _stored_identities(spark: SparkSession, settings: Settings, tables: list[str]) -> list[tuple[str, str, str]]:
    """(kind, identity, owner) of every identity the tables hold in clear."""
    found: set[tuple[str, str, str]] = set()
    for table_key in tables:
        df = read_table(spark, settings, table_key)
        columns = [c for c in _personal_columns(table_key) if dict(table_spec(table_key).column_types)[c].lower() == "string"]
        if columns:
            urns = F.flatten(F.array(*[to_person_urns(F.col(c)) for c in columns]))
            found |= {("person", r.identity, r.identity) for r in df.select(F.explode(urns).alias("identity")).distinct().collect()}
        if "user_name" in df.columns:
            names = df.filter(F.col("user_name").isNotNull() & ~is_pseudonym(F.col("user_name"), "p-")).select("user_name").distinct()
            found |= {("person", PERSON_PREFIX + r.user_name, PERSON_PREFIX + r.user_name) for r in names.collect()}
        actor = next((c for c in ("actor_urn", "actor") if c in df.columns), None)
        for column, kind in (("source_ip", "ip"), ("user_agent", "user-agent")):
            if actor and column in df.columns:
                pairs = df.filter(F.col(column).isNotNull() & F.col(actor).isNotNull()).select(column, actor).distinct()
                found |= {(kind, r[column], r[actor]) for r in pairs.collect() if r[actor].startswith(PERSON_PREFIX)}
    return sorted(found)


def _rewrite(spark: SparkSession, settings: Settings, table_key: str, secret: bytes, migration_id: str) -> int:
    """Rewrite one table pseudonymised (staged first); return the Delta version of the rewrite."""
    home = home_of(settings)
    scratch = home.scratch("privacy", migration_id, table_key)
    staged_df: DataFrame = write_scratch(
        with_pseudonymous_columns(read_table(spark, settings, table_key), secret, KEPT_COLUMNS), scratch, home.storage
    )
    name = table_name(settings, table_key)
    append_only = dict(table_spec(table_key).properties).get("delta.appendOnly") == "true"
    if append_only:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.appendOnly' = 'false')").collect()
    try:
        replace_where(staged_df, settings, table_key, "true")
        version = maintenance_for(settings, spark).version(table_key)
    finally:
        if append_only:
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.appendOnly' = 'true')").collect()
    home.storage.remove_tree(scratch)
    return version
