"""The landing hook: staged rows pseudonymised, and the identities they held recorded encrypted first."""

from __future__ import annotations

from pyspark.sql import DataFrame

from bronze.pseudonyms import pseudonymise_snapshots, pseudonymise_usage
from conf.settings import Settings
from conf.locations import Location
from pipelines.privacy.identities import identities_of_lines, record_staged_identities
from pipelines.privacy.keystore import key_store_for

USAGE_FAMILY = "bronze.usage_events"


def pseudonymise_staged(
    settings: Settings, family: str, lines_df: DataFrame, staged_df: DataFrame, scratch: Location
) -> DataFrame:
    """Record the identities of the input lines (encrypted per person), then return their staged rows pseudonymous.

    Args:
        settings: the lakehouse settings (privacy.key_file; the key store is created on first use).
        family: the bronze table the rows go to (usage events or aspect snapshots).
        lines_df: the input lines (their raw text is searched for identities: no second JSON parse).
        staged_df: the staged rows as parsed from them.
        scratch: a folder of the batch's scratch for the identities staged on their way to the table.
    """
    keys = key_store_for(settings, create=True)
    record_staged_identities(staged_df.sparkSession, settings, keys, identities_of_lines(lines_df, family), scratch)
    secret = keys.pseudonym_secret()
    if family == USAGE_FAMILY:
        return pseudonymise_usage(staged_df, secret)
    return pseudonymise_snapshots(staged_df, secret)
