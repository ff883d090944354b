"""The identity table (ops.identities): each pseudonym's identity, encrypted under its person's key.

Landing records here every person urn, source IP and user agent it pseudonymised (`record_staged_identities`);
surfaces that may show identities turn pseudonyms back (`resolve_identities`): a pseudonym whose person
was erased reads as an erased subject.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from bronze.pseudonym_rules import PSEUDONYM_PREFIX, is_pseudonym, pseudonym_of
from conf.settings import Settings
from conf.tables import table_location, table_spec
from pipelines.privacy.keystore import KeyStore, decrypt_identity, encrypt_identity
from pipelines.runtime.storage import delta_storage_options, table_exists

if TYPE_CHECKING:  # the engine is imported by the functions that use it: the API's workers run without one
    from pyspark.sql import DataFrame, SparkSession

IDENTITIES_TABLE = "ops.identities"
ERASED_SUBJECT = "erased subject"
IDENTITY_PREFIXES = {"person": PSEUDONYM_PREFIX, "ip": "ip-", "user-agent": "ua-"}


def record_identities(
    spark: SparkSession, settings: Settings, keys: KeyStore, identities: Iterable[tuple[str, str, str]]
) -> int:
    """Encrypt and append the identities not recorded yet; return how many were appended.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        keys: the key store (each owner's key is created on first use).
        identities: (kind, identity, owner identity) triples: kind person, ip or user-agent; the owner is
            the person urn whose key encrypts it (a person owns itself).
    """
    from pyspark.sql import functions as F

    from pipelines.runtime.io import append, read_table

    wanted = _wanted(keys, identities)
    if not wanted:
        return 0
    stored_df = read_table(spark, settings, IDENTITIES_TABLE).filter(F.col("pseudonym").isin(sorted({p for p, _ in wanted})))
    stored = {(r.pseudonym, r.owner) for r in stored_df.select("pseudonym", "owner").collect()}
    rows = _sealed_rows(keys, wanted, stored)
    if rows:
        append(spark.createDataFrame(rows, table_spec(IDENTITIES_TABLE).columns), settings, IDENTITIES_TABLE)
    return len(rows)


def record_identities_without_engine(settings: Settings, keys: KeyStore, identities: Iterable[tuple[str, str, str]]) -> int:
    """`record_identities` with delta-rs, for a process without a session (the API's access log flush)."""
    from deltalake import DeltaTable

    wanted = _wanted(keys, identities)
    if not wanted:
        return 0
    location = str(table_location(settings, IDENTITIES_TABLE))
    options = delta_storage_options(location)
    stored: set[tuple[str, str]] = set()
    if table_exists(location):
        table = DeltaTable(location, storage_options=options).to_pyarrow_table(columns=["pseudonym", "owner"])
        stored = {(r["pseudonym"], r["owner"]) for r in table.to_pylist()}
    rows = _sealed_rows(keys, wanted, stored)
    _append_without_engine(settings, rows)
    return len(rows)


def record_staged_identities(spark: SparkSession, settings: Settings, keys: KeyStore, identities_df: DataFrame) -> int:
    """`record_identities` for a landing batch's (kind, identity, owner) rows, in a request of constant size.

    The batch's identities (read by the engine from the staged rows) are made distinct, given their
    pseudonyms and anti-joined with the table in one query, so no request carries a list that grows with
    the people in a batch; only the identities not recorded yet reach this process, to be encrypted, and
    are appended with delta-rs.
    """
    from pyspark.sql import functions as F

    from bronze.pseudonyms import is_pseudonym as is_pseudonym_column
    from bronze.pseudonyms import to_pseudonym
    from pipelines.runtime.io import read_table

    secret = keys.pseudonym_secret()
    kind, identity = F.col("kind"), F.col("identity")
    pseudonym = F.coalesce(*(F.when(kind == name, to_pseudonym(identity, secret, prefix)) for name, prefix in IDENTITY_PREFIXES.items()))
    # A value already pseudonymous (a record landed again) names no one.
    named = F.coalesce(*(F.when(kind == name, ~is_pseudonym_column(identity, prefix)) for name, prefix in IDENTITY_PREFIXES.items()))
    # Distinct first: a batch repeats the same few people on most of its rows, and each pseudonym is an HMAC.
    named_df = identities_df.filter(identity.isNotNull() & (identity != "") & F.col("owner").isNotNull() & named)
    keyed_df = named_df.select(kind, identity, "owner").distinct().select(
        pseudonym.alias("pseudonym"), kind, identity, to_pseudonym(F.col("owner"), secret).alias("owner")
    )
    stored_df = read_table(spark, settings, IDENTITIES_TABLE).select("pseudonym", "owner")
    new = keyed_df.join(stored_df, ["pseudonym", "owner"], "left_anti").collect()
    wanted = {(r.pseudonym, r.owner): (r.kind, r.identity) for r in new}
    rows = _sealed_rows(keys, wanted, set())
    _append_without_engine(settings, rows)
    return len(rows)


def _append_without_engine(settings: Settings, rows: list[tuple]) -> None:
    """Append sealed identity rows (`_sealed_rows`) with delta-rs."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if not rows:
        return
    location = str(table_location(settings, IDENTITIES_TABLE))
    schema = pa.schema([("pseudonym", pa.string()), ("kind", pa.string()), ("owner", pa.string()),
                        ("ciphertext", pa.string()), ("recorded_at", pa.timestamp("us", tz="UTC"))])  # fmt: skip
    names = table_spec(IDENTITIES_TABLE).column_names
    write_deltalake(location, pa.Table.from_pylist([dict(zip(names, row)) for row in rows], schema=schema),
                    mode="append", storage_options=delta_storage_options(location))  # fmt: skip


def _wanted(keys: KeyStore, identities: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(pseudonym, owner pseudonym) -> (kind, identity) of the identities not pseudonymous already."""
    secret = keys.pseudonym_secret()
    wanted: dict[tuple[str, str], tuple[str, str]] = {}
    for kind, identity, owner in identities:
        if not identity or not owner or is_pseudonym(identity, IDENTITY_PREFIXES[kind]):
            continue  # already a pseudonym (a record landed again)
        pseudonym = pseudonym_of(identity, secret, IDENTITY_PREFIXES[kind])
        wanted[(pseudonym, pseudonym_of(owner, secret))] = (kind, identity)
    return wanted


def _sealed_rows(
    keys: KeyStore, wanted: Mapping[tuple[str, str], tuple[str, str]], stored: set[tuple[str, str]]
) -> list[tuple]:
    """The ops.identities rows of the wanted identities not stored yet, each encrypted under its owner's key."""
    now = datetime.now(timezone.utc)
    new = {(pseudonym, owner): found for (pseudonym, owner), found in sorted(wanted.items()) if (pseudonym, owner) not in stored}
    owner_keys = keys.person_keys({owner for _, owner in new}, create=True)
    return [
        (pseudonym, kind, owner, encrypt_identity(owner_keys[owner], pseudonym, identity), now)
        for (pseudonym, owner), (kind, identity) in new.items()
    ]


def resolve_identities(
    spark: SparkSession, settings: Settings, keys: KeyStore, pseudonyms: Iterable[str]
) -> dict[str, str]:
    """pseudonym -> identity for the given pseudonyms: ERASED_SUBJECT once the owner's key is destroyed.

    A pseudonym no identity row names (a value landed before pseudonymisation, say) is left out.
    """
    from pyspark.sql import functions as F

    from pipelines.runtime.io import read_table

    wanted = sorted({p for p in pseudonyms if p})
    if not wanted:
        return {}
    rows = read_table(spark, settings, IDENTITIES_TABLE).filter(F.col("pseudonym").isin(wanted)).collect()
    return resolve_rows([r.asDict() for r in rows], keys)


def resolve_rows(rows: Iterable[Mapping[str, str]], keys: KeyStore) -> dict[str, str]:
    """pseudonym -> identity of identity rows (no engine: the API's workers read the rows themselves)."""
    rows = list(rows)
    owner_keys = keys.person_keys({row["owner"] for row in rows})
    resolved: dict[str, str] = {}
    for row in rows:
        identity = decrypt_identity(owner_keys[row["owner"]], row["pseudonym"], row["ciphertext"])
        if identity is not None or row["pseudonym"] not in resolved:
            resolved[row["pseudonym"]] = identity if identity is not None else ERASED_SUBJECT
    return resolved
