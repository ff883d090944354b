"""The landing hooks: staged rows pseudonymised, and the identities they held recorded encrypted before the commit."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bronze.pseudonyms import found_identities, pseudonymise_snapshots, pseudonymise_usage
from conf.settings import Settings
from pipelines.privacy.identities import record_staged_identities
from pipelines.privacy.keystore import key_store_for

USAGE_FAMILY = "bronze.usage_events"


def pseudonymise_staged(settings: Settings, family: str, staged_df: DataFrame) -> DataFrame:
    """The staged rows pseudonymous, with the identities each held in FOUND_IDENTITIES.

    Args:
        settings: the lakehouse settings (privacy.key_file; the key store is created on first use).
        family: the bronze table the rows go to (usage events or aspect snapshots).
        staged_df: the staged rows as parsed from the input lines.
    """
    secret = key_store_for(settings, create=True).pseudonym_secret()
    if family == USAGE_FAMILY:
        return pseudonymise_usage(staged_df, secret)
    return pseudonymise_snapshots(staged_df, secret)


def record_found_identities(settings: Settings, staged_df: DataFrame) -> int:
    """Record, encrypted per person, the identities staged rows held (`pseudonymise_staged`); return how many were new.

    Landing calls it once the pseudonymous rows are staged and before it commits them: a batch that stops
    in between leaves identities without rows, never rows without their identities.

    Args:
        settings: the lakehouse settings.
        staged_df: the staged rows, read back with their FOUND_IDENTITIES column.
    """
    keys = key_store_for(settings, create=True)
    found = F.explode(found_identities(staged_df)).alias("found")
    identities_df = staged_df.select(found).select("found.kind", "found.identity", "found.owner")
    return record_staged_identities(staged_df.sparkSession, settings, keys, identities_df)
