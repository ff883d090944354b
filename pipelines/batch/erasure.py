"""Erasure of one person: their key destroyed, the erasure recorded in ops.erasures and linked in the audit chain.

With privacy.pseudonymise on, the tables hold the person only as a pseudonym; the identity is in
ops.identities, encrypted under the person's key in the key store. Destroying that key makes every
copy of the identity unreadable at once: every table version, every backup of the tables, the BI
replica's next sync. Counts and events stay (under the pseudonym), and no row changes, so `verify`
passes. The erasure is recorded (who asked, when, why, the pseudonym; never the identity) as its own
batch of ops.erasures, linked in the chain before the key is destroyed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.pseudonyms import PERSON_PREFIX, pseudonym_of
from conf.errors import InputError
from conf.settings import Settings
from conf.tables import table_spec
from pipelines.batch.audit_chain import link_batches
from pipelines.batch.legal_holds import active_holds, holds_on_actor
from pipelines.privacy.identities import IDENTITIES_TABLE
from pipelines.privacy.keystore import key_store_for
from pipelines.runtime.io import append, read_table

ERASURES_TABLE = "ops.erasures"


@dataclass(frozen=True)
class Erasure:
    """One erasure done: its id, the person's pseudonym and how many identity rows its key encrypted."""

    erasure_id: str
    pseudonym: str
    identities: int


def erase_actor(spark: SparkSession, settings: Settings, actor_urn: str, reason: str, requested_by: str) -> Erasure:
    """Erase one person: refuse a held or unknown one, record and link the erasure, then destroy the key.

    Args:
        spark: the session.
        settings: the lakehouse settings (privacy.key_file).
        actor_urn: the person's urn as they know it (urn:li:corpuser:...).
        reason: why (the request's reference); recorded.
        requested_by: who asked; recorded.

    Raises:
        InputError: naming the field for a value that is not a person urn, an empty reason, a person no
            identity row names (unknown, or erased already), or a person under a legal hold.
        ConfigError: naming privacy.key_file when the key store is missing (nothing is changed).
    """
    if not actor_urn.startswith(PERSON_PREFIX) or actor_urn == PERSON_PREFIX:
        raise InputError(f"--actor: {actor_urn!r} is not a person urn ({PERSON_PREFIX}<id>)")
    if not reason.strip():
        raise InputError("--reason: '' must say why (the erasure request's reference)")
    keys = key_store_for(settings)
    pseudonym = pseudonym_of(actor_urn, keys.pseudonym_secret())
    held = holds_on_actor(active_holds(spark, settings), actor_urn) + holds_on_actor(active_holds(spark, settings), pseudonym)
    if held:
        listed = ", ".join(f"{h.hold_id} ({h.reason})" for h in held)
        raise InputError(f"--actor: {actor_urn!r} is under legal hold {listed}; remove the hold first (`lakehouse hold remove`)")
    owned = read_table(spark, settings, IDENTITIES_TABLE).filter(F.col("owner") == F.lit(pseudonym)).count()
    if owned == 0 or not keys.has_person(pseudonym):
        state = "erased already" if owned else "no identity of that person was landed"
        raise InputError(f"--actor: {actor_urn!r} is unknown ({state}); nothing was changed")
    erasure_id = f"erasure-{uuid.uuid4().hex[:12]}"
    row = (erasure_id, pseudonym, reason.strip(), requested_by, int(time.time() * 1000), owned, erasure_id)
    append(spark.createDataFrame([row], table_spec(ERASURES_TABLE).columns), settings, ERASURES_TABLE)
    link_batches(spark, settings, [ERASURES_TABLE], [erasure_id], appended=True)
    keys.destroy(pseudonym)
    return Erasure(erasure_id, pseudonym, owned)
