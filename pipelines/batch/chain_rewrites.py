"""The record of table rewrites the privacy migration made (ops.privacy_migrations), as `verify` reads it.

`lakehouse privacy enable` rewrites each table once, with every personal value pseudonymised, then
appends one row per table naming the Delta version its rewrite committed, links those rows in the audit
chain, and links every chained batch again with its new digest. `verify` accepts an overwrite of a
chained table (and the append-only property lifted just before it) only at a version a linked migration
row names: any other rewrite stays a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from pipelines.runtime.io import read_table

MIGRATIONS_TABLE = "ops.privacy_migrations"


def rewritten_versions(
    spark: SparkSession, settings: Settings, latest: Mapping[tuple[str, str], Mapping[str, Any]]
) -> frozenset[tuple[str, int]]:
    """(table, Delta version) of every rewrite a migration linked in the chain names."""
    linked = sorted(batch for table, batch in latest if table == MIGRATIONS_TABLE)
    if not linked:
        return frozenset()
    rows = read_table(spark, settings, MIGRATIONS_TABLE).filter(F.col("batch_id").isin(linked))
    return frozenset((r.table_key, int(r.delta_version)) for r in rows.select("table_key", "delta_version").collect())
