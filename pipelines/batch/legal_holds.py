"""Legal holds (ops.legal_holds): an actor or an entity whose records retention and erasure must leave alone.

The table is append-only: adding a hold appends an `add` row, removing it a `remove` row, so the holds
themselves keep their history. A hold is active while it has an `add` row and no `remove` row.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import table_spec
from gold.openmetadata_entities import to_urn_id
from pipelines.privacy.holds import LegalHold, active_holds_of
from pipelines.runtime.io import append, read_table

HOLDS_TABLE = "ops.legal_holds"
SUBJECT_KINDS = ("actor", "entity")


def active_holds(spark: SparkSession, settings: Settings) -> list[LegalHold]:
    """The holds added and not removed, oldest first."""
    return active_holds_of(row.asDict() for row in read_table(spark, settings, HOLDS_TABLE).collect())


def add_hold(spark: SparkSession, settings: Settings, subject_kind: str, subject_urn: str, reason: str) -> LegalHold:
    """Place a hold on an actor or an entity and return it.

    Raises:
        InputError: naming the field when the kind is not actor/entity, the urn is not an urn, or the reason is empty.
    """
    if subject_kind not in SUBJECT_KINDS:
        raise InputError(f"subject_kind: {subject_kind!r} is not one of {', '.join(SUBJECT_KINDS)}")
    if not subject_urn.startswith("urn:li:"):
        raise InputError(f"--{subject_kind}: {subject_urn!r} is not an urn (urn:li:<type>:<id>)")
    if not reason.strip():
        raise InputError("--reason: '' must say why the hold is placed (a case or matter reference)")
    hold = LegalHold(f"hold-{uuid.uuid4().hex[:12]}", subject_kind, subject_urn, reason.strip(), datetime.now(timezone.utc))
    _append_step(spark, settings, hold, "add")
    return hold


def remove_hold(spark: SparkSession, settings: Settings, hold_id: str) -> LegalHold:
    """Lift an active hold and return it.

    Raises:
        InputError: naming the hold id when no active hold has it.
    """
    held = {hold.hold_id: hold for hold in active_holds(spark, settings)}
    if hold_id not in held:
        known = ", ".join(held) or "none"
        raise InputError(f"hold_id: {hold_id!r} is no active hold (active: {known})")
    _append_step(spark, settings, held[hold_id], "remove")
    return held[hold_id]


def _append_step(spark: SparkSession, settings: Settings, hold: LegalHold, action: str) -> None:
    row = (hold.hold_id, hold.subject_kind, hold.subject_urn, hold.reason, action, datetime.now(timezone.utc))
    append(spark.createDataFrame([row], table_spec(HOLDS_TABLE).columns), settings, HOLDS_TABLE)


def held_rows(
    holds: list[LegalHold],
    actor_columns: tuple[str, ...],
    entity_columns: tuple[str, ...],
    text_columns: tuple[str, ...] = (),
    actor_id_columns: tuple[str, ...] = (),
) -> Column | None:
    """A condition true on the rows a hold covers, None without holds.

    Args:
        holds: the active holds.
        actor_columns: columns holding an actor urn (an actor hold matches them exactly).
        entity_columns: columns holding an entity urn (an entity hold matches them exactly).
        text_columns: columns of raw text (a record as it arrived): any hold's urn appearing in them matches.
        actor_id_columns: columns holding an actor urn's id part (OpenMetadata's user name `jdoe`).
    """
    conditions = []
    for hold in holds:
        columns = actor_columns if hold.subject_kind == "actor" else entity_columns
        conditions.extend(F.col(column) == F.lit(hold.subject_urn) for column in columns)
        conditions.extend(F.col(column).contains(hold.subject_urn) for column in text_columns)
        if hold.subject_kind == "actor":
            conditions.extend(F.col(column) == to_urn_id(F.lit(hold.subject_urn)) for column in actor_id_columns)
    if not conditions:
        return None
    condition = conditions[0]
    for other in conditions[1:]:
        condition = condition | other
    return F.coalesce(condition, F.lit(False))

