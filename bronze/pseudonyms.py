"""Keyed pseudonyms for personal identifiers, as Column functions applied when records land.

A person's urn (`urn:li:corpuser:<id>`) becomes `urn:li:corpuser:p-<24 hex>`: the first 96 bits of
HMAC-SHA256(secret, urn). It is stable (every record of one person gets the same pseudonym, so joins,
aggregates and the chain's digests work on it unchanged), shaped as an urn (every check and view that
expects one accepts it), and says nothing of the person without the secret. Source IPs and user agents
become `ip-<hex>` / `ua-<hex>` the same way. The engine computes HMAC from SHA-256 (RFC 2104: the key
padded and XORed with the two pads), so no Python runs per row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bronze.pseudonym_rules import PERSON_PREFIX, PERSON_URN_PATTERN, PSEUDONYM_HEX, PSEUDONYM_PREFIX, pseudonym_pattern
from bronze.records import SNAPSHOT_HASH_FIELDS, USAGE_HASH_FIELDS, is_landable, record_hash

_BLOCK = 64


def _hmac_hex(value: Column, secret: bytes) -> Column:
    """HMAC-SHA256(secret, value) as hex, from the engine's SHA-256."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    key = key.ljust(_BLOCK, b"\0")
    inner_pad = bytes(b ^ 0x36 for b in key)
    outer_pad = bytes(b ^ 0x5C for b in key)
    inner = F.unhex(F.sha2(F.concat(F.lit(inner_pad), F.encode(value, "UTF-8")), 256))
    return F.sha2(F.concat(F.lit(outer_pad), inner), 256)


def is_pseudonym(value: Column, prefix: str = PSEUDONYM_PREFIX) -> Column:
    """Whether each value is a whole pseudonym with this prefix (`bronze.pseudonym_rules.pseudonym_pattern`)."""
    # `\z`, not `$`: the JVM's `$` also matches before a final line break. The prefix test first: most
    # values have none, and the engine skips the pattern for a batch where none has.
    return value.startswith(prefix) & value.rlike(f"^{pseudonym_pattern(prefix)}\\z")


def to_pseudonym(value: Column, secret: bytes, prefix: str = PSEUDONYM_PREFIX) -> Column:
    """The pseudonym of each value (null stays null; a value that is already a pseudonym stays as it is)."""
    return F.when(value.isNull() | is_pseudonym(value, prefix), value).otherwise(_keyed(value, secret, prefix))


def _keyed(value: Column, secret: bytes, prefix: str) -> Column:
    """The pseudonym of each value, which is not one already."""
    return F.concat(F.lit(prefix), F.substring(_hmac_hex(value, secret), 1, PSEUDONYM_HEX))


def to_person_urns(text: Column) -> Column:
    """The person urns (not pseudonyms) a text holds, as an array."""
    found = F.regexp_extract_all(F.coalesce(text, F.lit("")), F.lit(PERSON_URN_PATTERN), 0)
    return F.filter(found, lambda urn: ~is_pseudonym(urn))


def with_pseudonymous_text(
    text: Column, secret: bytes, found_urns: Column | None = None, rebuilt: Column | None = None
) -> Column:
    """The text with every person urn in it replaced by its pseudonym.

    Urns are replaced longest-first among those sharing a prefix (descending order puts `...:ann2` before
    `...:ann`), so one urn is never replaced inside a longer one. A text holding a urn that pseudonyms
    start with is rebuilt at its urns instead (`_rebuilt_at_urns`).

    Args:
        text: the text.
        secret: the pseudonym secret.
        found_urns: `to_person_urns(text)` when a column already holds it (landing keeps it for the identities).
        rebuilt: `holds_pseudonym_start` of the text's urns, or of all the row's texts, when the caller has
            it (landing computes it once per row): then the text is rebuilt at its urns.
    """
    urns = F.sort_array(F.array_distinct(to_person_urns(text) if found_urns is None else found_urns), asc=False)
    replaced = F.aggregate(urns, text, lambda acc, urn: F.replace(acc, urn, _keyed(urn, secret, PSEUDONYM_PREFIX)))
    rebuilt = holds_pseudonym_start(urns) if rebuilt is None else rebuilt
    return F.when(text.isNull(), text).when(rebuilt, _rebuilt_at_urns(text, secret)).otherwise(replaced)


def holds_pseudonym_start(urns: Column) -> Column:
    """Whether the person urns (not pseudonyms) hold one that pseudonyms start with (`urn:li:corpuser:p`, `...:p-1`).

    Replacing such a urn wherever it occurs would also rewrite the pseudonyms already in a text, or put
    there by the urns replaced before it.
    """
    return F.exists(urns, lambda urn: (urn == F.lit(PSEUDONYM_PREFIX[:-1])) | urn.startswith(PSEUDONYM_PREFIX))


def _rebuilt_at_urns(text: Column, secret: bytes) -> Column:
    """The text cut at its person urns and joined again with each urn's pseudonym: one pass, each urn once."""
    urns = F.regexp_extract_all(text, F.lit(PERSON_URN_PATTERN), 0)
    pieces = F.split(text, PERSON_URN_PATTERN)
    # One piece more than urns: `get` past the last urn is null, and the last piece is followed by nothing.
    following = lambda index: F.coalesce(to_pseudonym(F.get(urns, index), secret), F.lit(""))  # noqa: E731
    return F.array_join(F.transform(pieces, lambda piece, index: F.concat(piece, following(index))), "")


def _replace_value(text: Column, value: Column, pseudonym: Column) -> Column:
    """`text` with the (non-empty) value replaced by its pseudonym."""
    return F.when(value.isNull() | (F.length(value) == 0), text).otherwise(F.replace(text, value, pseudonym))


def pseudonymise_usage(staged_df: DataFrame, secret: bytes) -> DataFrame:
    """Staged usage rows with actor, entity, source IP, user agent and the raw document pseudonymous.

    The record hash is recomputed from the pseudonymous fields: a hash of the identity would let anyone
    holding a guess test it. FOUND_IDENTITIES lists the identities replaced; the
    source IP and user agent are owned by the actor, read from a quarantined record's text when it has no
    typed fields.
    """
    texts = ("actor_urn", "entity_urn", "raw_document", "raw_text", "reason")
    quarantined_text = F.col("raw_text").isNotNull() & F.col("source_ip").isNull()

    def typed_or_quoted(name: str, path: str) -> Column:
        return F.when(quarantined_text, F.get_json_object(F.col("raw_text"), path)).otherwise(F.col(name))

    ip = to_pseudonym(F.col("source_ip"), secret, "ip-")
    agent = to_pseudonym(F.col("user_agent"), secret, "ua-")
    owner = typed_or_quoted("actor_urn", "$.actorUrn")
    owned = [
        F.struct(F.lit("ip").alias("kind"), typed_or_quoted("source_ip", "$.sourceIP").alias("identity"), owner.alias("owner")),
        F.struct(F.lit("user-agent").alias("kind"), typed_or_quoted("user_agent", "$.userAgent").alias("identity"), owner.alias("owner")),
    ]  # fmt: skip
    found_df = _with_found_urns(staged_df, texts)

    def pseudonymous_document(name: str) -> Column:
        text = with_pseudonymous_text(F.col(name), secret, F.col(_found(name)), F.col(_REBUILT))
        return _replace_value(_replace_value(text, F.col("source_ip"), ip), F.col("user_agent"), agent)

    # A quarantined record keeps its text and a reason quoting it: both are pseudonymised as the document.
    pseudonymous_df = found_df.withColumns({
        "actor_urn": with_pseudonymous_text(F.col("actor_urn"), secret, F.col(_found("actor_urn")), F.col(_REBUILT)),
        "entity_urn": with_pseudonymous_text(F.col("entity_urn"), secret, F.col(_found("entity_urn")), F.col(_REBUILT)),
        "raw_document": pseudonymous_document("raw_document"),
        "source_ip": ip,
        "user_agent": agent,
        "raw_text": pseudonymous_document("raw_text"),
        "reason": pseudonymous_document("reason"),
        FOUND_IDENTITIES: F.concat(_as_people(F.col(_PEOPLE)), F.filter(F.array(*owned), _named)),
    })  # fmt: skip
    return _with_record_hash(_without_found_urns(pseudonymous_df, texts), USAGE_HASH_FIELDS)


def pseudonymise_snapshots(staged_df: DataFrame, secret: bytes) -> DataFrame:
    """Staged aspect snapshot rows with every person urn in every text field pseudonymous (hash recomputed).

    FOUND_IDENTITIES lists the person urns replaced, as plain urns (each person its own owner: a third of
    the bytes of the structs, staged with every row); `found_identities` reads them as structs.
    """
    texts = ("entity_urn", "created_actor", "aspect_json", "system_metadata", "raw_text", "reason")
    pseudonymous_df = _with_found_urns(staged_df, texts).withColumns({
        **{name: with_pseudonymous_text(F.col(name), secret, F.col(_found(name)), F.col(_REBUILT)) for name in texts},
        FOUND_IDENTITIES: F.col(_PEOPLE),
    })  # fmt: skip
    return _with_record_hash(_without_found_urns(pseudonymous_df, texts), SNAPSHOT_HASH_FIELDS)


# The identities a staged row held before it was pseudonymised: an array of (kind, identity, owner)
# structs, kind person (owner: itself), ip or user-agent (owner: the actor), or of person urns alone.
# Landing records them from the staged rows (`pipelines.privacy.landing`), so the text is searched for
# urns once.
FOUND_IDENTITIES = "found_identities"


def found_identities(staged_df: DataFrame) -> Column:
    """The FOUND_IDENTITIES of staged rows as (kind, identity, owner) structs, whichever form they were staged in."""
    column = F.col(FOUND_IDENTITIES)
    element = staged_df.schema[FOUND_IDENTITIES].dataType.elementType.simpleString()
    return _as_people(column) if element == "string" else column


def _found(name: str) -> str:
    return f"_found_urns_{name}"


# The distinct person urns of all a row's texts, and whether its texts are rebuilt at their urns
# (`with_pseudonymous_text`): both decided once per row, from the urns each text holds.
_PEOPLE = "_found_people"
_REBUILT = "_rebuilt_at_urns"


def _with_found_urns(staged_df: DataFrame, texts: Iterable[str]) -> DataFrame:
    """Each text's person urns in a column of its own, computed once for both the replacement and the identities.

    _PEOPLE holds the row's distinct urns and _REBUILT whether one of them starts every pseudonym; all
    these columns are dropped by `_without_found_urns`.
    """
    found_df = staged_df.withColumns({_found(name): to_person_urns(F.col(name)) for name in texts})
    people_df = found_df.withColumn(_PEOPLE, F.array_distinct(F.flatten(F.array(*(F.col(_found(name)) for name in texts)))))
    return people_df.withColumn(_REBUILT, holds_pseudonym_start(F.col(_PEOPLE)))


def _without_found_urns(staged_df: DataFrame, texts: Iterable[str]) -> DataFrame:
    """The rows without the columns `_with_found_urns` added."""
    return staged_df.drop(*map(_found, texts), _PEOPLE, _REBUILT)


def _as_people(urns: Column) -> Column:
    """(person, urn, urn) structs of person urns."""
    return F.transform(urns, lambda urn: F.struct(F.lit("person").alias("kind"), urn.alias("identity"), urn.alias("owner")))


def _named(identity: Column) -> Column:
    """An owned identity worth recording: a value and an owner, neither empty."""
    return (
        identity["identity"].isNotNull() & (F.length(identity["identity"]) > 0)
        & identity["owner"].isNotNull() & (F.length(identity["owner"]) > 0)
    )  # fmt: skip


def _with_record_hash(staged_df: DataFrame, hash_fields: Iterable[str]) -> DataFrame:
    """The record hash of the pseudonymous fields, for the rows staging gave one (`bronze.records`' rule).

    The condition is staging's own (`is_landable`), not "had a hash": naming the identity's hash here would make the
    engine compute it only to test it for null, a second SHA-256 over every record.
    """
    return staged_df.withColumn("record_hash", F.when(is_landable(), record_hash(hash_fields)))


# Columns that hold a source IP or a user agent, and the raw documents that repeat them.
_IP_COLUMNS = ("source_ip",)
_AGENT_COLUMNS = ("user_agent",)
_RAW_COLUMNS = ("raw_document", "raw_event")
_QUARANTINED_TEXT = "raw_text"
# OpenMetadata's user name: the id part of an actor urn (`jdoe`), repeated inside its JSON documents.
_USER_NAME_COLUMN = "user_name"
_USER_NAME_DOCUMENTS = ("change_description", "entity")


def with_pseudonymous_columns(df: DataFrame, secret: bytes, keep: Iterable[str] = ()) -> DataFrame:
    """Every personal value of a stored table's rows as landing would have written it with pseudonyms on.

    Person urns in every string, array-of-string and map-of-string column; source IPs and user agents
    (and their copies in the raw documents); OpenMetadata's user name (the id part of the pseudonym).

    Args:
        df: the rows of a table.
        secret: the pseudonym secret.
        keep: columns left as they are (hashes that other tables refer to by value).
    """
    kept = set(keep)
    changes: dict[str, Column] = {}
    for field in df.schema.fields:
        name, kind = field.name, field.dataType.simpleString()
        if name in kept:
            continue
        if name in _IP_COLUMNS:
            changes[name] = to_pseudonym(F.col(name), secret, "ip-")
        elif name in _AGENT_COLUMNS:
            changes[name] = to_pseudonym(F.col(name), secret, "ua-")
        elif name == _USER_NAME_COLUMN:
            changes[name] = _pseudonymous_user_name(F.col(name), secret)
        elif kind == "string":
            changes[name] = with_pseudonymous_text(F.col(name), secret)
        elif kind == "array<string>":
            changes[name] = F.transform(F.col(name), lambda value: with_pseudonymous_text(value, secret))
        elif kind == "map<string,string>":
            values = F.transform(F.map_values(F.col(name)), lambda value: with_pseudonymous_text(value, secret))
            changes[name] = F.when(F.col(name).isNull(), F.col(name)).otherwise(F.map_from_arrays(F.map_keys(F.col(name)), values))
    if _QUARANTINED_TEXT in changes:
        # A quarantined record has no typed columns: its source IP and user agent are read from its text.
        for path, prefix in (("$.sourceIP", "ip-"), ("$.userAgent", "ua-")):
            value = F.get_json_object(F.col(_QUARANTINED_TEXT), path)
            for name in (_QUARANTINED_TEXT, "reason"):
                if name in changes:
                    changes[name] = _replace_value(changes[name], value, to_pseudonym(value, secret, prefix))
    for raw in _RAW_COLUMNS:
        if raw in changes:
            for column, prefix in [(c, "ip-") for c in _IP_COLUMNS] + [(c, "ua-") for c in _AGENT_COLUMNS]:
                if column in df.columns:
                    changes[raw] = _replace_value(changes[raw], F.col(column), to_pseudonym(F.col(column), secret, prefix))
    if _USER_NAME_COLUMN in df.columns:
        quoted = lambda value: F.concat(F.lit('"'), value, F.lit('"'))  # noqa: E731 - a JSON string of a value
        for document in _USER_NAME_DOCUMENTS:
            if document in changes:
                changes[document] = _replace_value(
                    changes[document], quoted(F.col(_USER_NAME_COLUMN)), quoted(_pseudonymous_user_name(F.col(_USER_NAME_COLUMN), secret))
                )  # fmt: skip
    return df.withColumns(changes) if changes else df


def _pseudonymous_user_name(user_name: Column, secret: bytes) -> Column:
    """The id part of the pseudonym of `urn:li:corpuser:<user_name>` (`p-<hex>`); a pseudonymous one stays."""
    # `to_pseudonym` keeps a pseudonymous urn (and null) as it is, so its id part is the name itself.
    pseudonym = to_pseudonym(F.concat(F.lit(PERSON_PREFIX), user_name), secret)
    return F.substring(pseudonym, len(PERSON_PREFIX) + 1, 2 + PSEUDONYM_HEX)
