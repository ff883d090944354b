"""LIFECYCLE events: CREATE from the first version of a key aspect, HARD_DELETE from a DELETE of it, and
SOFT_DELETE / REINSTATE when `status.removed` turns true / false again.

An action request's CREATE comes from its actionRequestInfo (`silver.events.action_request`), with the
request's parameters; DataHub writes its `actionRequestKey` too, and that must not make a second one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver.aspects import is_key_aspect, parse_aspect
from silver.events import action_request
from silver.events.common import to_events


def to_lifecycle_events(pairs_df: DataFrame) -> DataFrame:
    """Return the LIFECYCLE events (no modifier, no parameters) of key aspect and `status` pairs.

    CREATE carries the new key aspect JSON as new_value; HARD_DELETE the deleted key aspect as old_value.
    A DELETE of a key that is already deleted emits nothing.
    """
    is_delete = F.col("is_delete")
    already_deleted = F.coalesce(F.upper(F.col("prev_change_type")) == "DELETE", F.lit(False))
    key_df = (
        pairs_df.filter(is_key_aspect("aspect_name", "entity_type"))
        .withColumn(
            "lifecycle_op",
            F.when(
                ~is_delete & F.col("prev_json").isNull() & (F.col("entity_type") != action_request.ENTITY_TYPE),
                F.lit("CREATE"),
            ).when(is_delete & ~already_deleted, F.lit("HARD_DELETE")),
        )
        .filter(F.col("lifecycle_op").isNotNull())
    )
    key_events_df = to_events(
        key_df,
        category="LIFECYCLE",
        operation=F.col("lifecycle_op"),
        old_value=F.when(is_delete, F.col("prev_json")),
        new_value=F.col("new_json"),
    )

    was = F.coalesce(parse_aspect("prev_json", "status")["removed"], F.lit(False))
    now = F.coalesce(parse_aspect("new_json", "status")["removed"], F.lit(False))
    status_df = (
        pairs_df.filter(F.col("aspect_name") == "status")
        .withColumn("lifecycle_op", F.when(~was & now, F.lit("SOFT_DELETE")).when(was & ~now, F.lit("REINSTATE")))
        .filter(F.col("lifecycle_op").isNotNull())
    )
    status_events_df = to_events(
        status_df,
        category="LIFECYCLE",
        operation=F.col("lifecycle_op"),
        old_value=F.col("prev_json"),
        new_value=F.col("new_json"),
    )
    return key_events_df.unionByName(status_events_df)
