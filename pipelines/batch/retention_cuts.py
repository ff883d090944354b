"""The record of batches retention deleted (ops.retention_cuts), as `verify` and the chain's linking read it.

`lakehouse retention apply` appends one row per batch it is about to delete and links those rows in the
audit chain before the DELETE. A linked batch that is gone, and the DELETE commit that removed it, are
then accepted only when a cut linked in the chain names that batch of that table: a deletion nobody
recorded (or recorded without a link) stays a finding, so a cut is told apart from a forged truncation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from pipelines.runtime.io import read_table

CUTS_TABLE = "ops.retention_cuts"

_QUOTED = re.compile(r"'((?:[^']|'')*)'")
# What a whole-batch DELETE's predicate holds once its quoted batch ids are taken out: `batch_id IN ( ... )`.
_WHOLE_BATCHES = re.compile(r"[\s\[\]\"(),]*batch_id\s+IN[\s\[\]\"(),]*", re.IGNORECASE)


def whole_batch_ids(predicate: str) -> list[str] | None:
    """The batch ids a DELETE's predicate names when it deletes whole batches (`batch_id IN ('a', 'b')`), else None."""
    batch_ids = [match.replace("''", "'") for match in _QUOTED.findall(predicate)]
    if not batch_ids or not _WHOLE_BATCHES.fullmatch(_QUOTED.sub("", predicate).replace(",", " ")):
        return None
    return batch_ids


def cut_batches(
    spark: SparkSession, settings: Settings, latest: Mapping[tuple[str, str], Mapping[str, Any]]
) -> frozenset[tuple[str, str]]:
    """(table, batch) of every batch a cut linked in the chain names as deleted by retention.

    Args:
        spark: the session.
        settings: the lakehouse settings.
        latest: the newest link of each (table, batch): only cuts whose own batch is linked count (verify
            checks their digests like any linked batch's, so an altered cut is a finding of its own).
    """
    linked = sorted(batch for table, batch in latest if table == CUTS_TABLE)
    if not linked:
        return frozenset()
    rows = read_table(spark, settings, CUTS_TABLE).filter(F.col("batch_id").isin(linked))
    return frozenset((r.table_key, r.deleted_batch_id) for r in rows.select("table_key", "deleted_batch_id").collect())


def deletes_only_cut_batches(table_key: str, predicate: str, cuts: Iterable[tuple[str, str]]) -> bool:
    """Whether a DELETE of `table_key` with this predicate removed whole batches that cuts name, and nothing else."""
    batch_ids = whole_batch_ids(predicate)
    cut = {batch for table, batch in cuts if table == table_key}
    return batch_ids is not None and all(batch in cut for batch in batch_ids)
