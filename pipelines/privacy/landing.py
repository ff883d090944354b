"""The landing hook: staged rows pseudonymised, and the identities they held recorded encrypted first."""

from __future__ import annotations

from pyspark.sql import DataFrame

from bronze.pseudonyms import pseudonymise_snapshots, pseudonymise_usage
from conf.settings import Settings
from pipelines.privacy.identities import identities_of_staged, record_identities
from pipelines.privacy.keystore import key_store_for

USAGE_FAMILY = "bronze.usage_events"


def pseudonymise_staged(settings: Settings, family: str, staged_df: DataFrame) -> DataFrame:
    """Record the identities of staged rows (encrypted per person), then return the rows pseudonymous.

    Args:
        settings: the lakehouse settings (privacy.key_file; the key store is created on first use).
        family: the bronze table the rows go to (usage events or aspect snapshots).
        staged_df: the staged rows as parsed.
    """
    keys = key_store_for(settings, create=True)
    triples = identities_of_staged(staged_df, family).collect()
    record_identities(staged_df.sparkSession, settings, keys, [(r.kind, r.identity, r.owner) for r in triples])
    secret = keys.pseudonym_secret()
    if family == USAGE_FAMILY:
        return pseudonymise_usage(staged_df, secret)
    return pseudonymise_snapshots(staged_df, secret)
