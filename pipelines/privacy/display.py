"""Pseudonyms on the way in and identities on the way out, without an engine: the one resolution rule.

A request that names a person (`actorUrns: ["urn:li:corpuser:jdoe"]`, `?actor=`) is turned into one by
pseudonym; what a surface returns shows each person, source IP and user agent as who they are to a caller
allowed to see identities. A field that holds a pseudonym alone shows the identity, the pseudonym kept
beside it as `<field>Pseudonym`, and an erased person as an erased subject; a pseudonym inside other text
(a JSON value, an urn, a summary) is replaced by its identity, and stays as it is once its person was
erased. Formats with a fixed shape (exports, webhooks, reports) take the text rule alone.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable

from bronze.pseudonym_rules import PERSON_PREFIX, PSEUDONYM_PREFIX, pseudonym_of, pseudonym_pattern
from conf.settings import Settings
from conf.tables import table_location
from pipelines.privacy.identities import ERASED_SUBJECT, IDENTITIES_TABLE, resolve_rows
from pipelines.privacy.keystore import KeyStore, key_store_for
from pipelines.runtime.storage import delta_storage_options, table_exists

_BODY_PERSON_FIELDS = ("actorUrns",)
# A pseudonym wherever it stands: a person's urn, a source IP's or a user agent's, or the id part of a
# person's urn alone (OpenMetadata's user names).
PSEUDONYM_PATTERN = re.compile(
    rf"{pseudonym_pattern(PSEUDONYM_PREFIX)}|\b(?:{'|'.join(pseudonym_pattern(prefix) for prefix in ('ip-', 'ua-', 'p-'))})\b"
)
_PERSON_ID = PSEUDONYM_PREFIX[len(PERSON_PREFIX) :]
SHOWN_ROWS_PER_READ = 1000
# The identity table is read again, for a pseudonym it did not name, at most this often (a new row may name it).
TABLE_RECHECK_SECONDS = 1.0


@dataclass
class _Resolved:
    """The key store of one home as read at `stamp` (its file's inode, mtime and size), the identity rows
    (pseudonym -> rows with its owner and ciphertext) as last read, and the identities decrypted from them."""

    stamp: tuple[int, int, int]
    keys: KeyStore
    rows: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    read_at: float = float("-inf")
    identities: dict[str, str] = field(default_factory=dict)


_RESOLVED: dict[str, _Resolved] = {}
_RESOLVED_LOCK = threading.Lock()


def _resolved_for(settings: Settings) -> _Resolved:
    """The process's identities of this home, kept while its key file is unchanged.

    The key file is rewritten (a new file renamed into place) whenever a key is created or destroyed, so
    an erasure by any process is seen at the next response: every identity is then decrypted again.
    A server answers many responses from one read of the key file and of each identity row.
    """
    path = settings.secret_path(settings.privacy.key_file)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        key_store_for(settings)  # raises the error naming privacy.key_file
        raise
    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    with _RESOLVED_LOCK:
        entry = _RESOLVED.get(str(path))
        if entry is None or entry.stamp != stamp:
            entry = _RESOLVED[str(path)] = _Resolved(stamp, key_store_for(settings))
        return entry


def person_pseudonym(settings: Settings, urn: str | None) -> str | None:
    """The pseudonym a person urn is stored as (any other value, or privacy off: the value as given)."""
    if not urn or not settings.privacy.pseudonymise or not urn.startswith(PERSON_PREFIX):
        return urn
    return pseudonym_of(urn, _resolved_for(settings).keys.pseudonym_secret())


def pseudonymous_body(settings: Settings, body: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The search body with every person urn it filters on replaced by its pseudonym (as stored)."""
    if body is None or not settings.privacy.pseudonymise:
        return body
    changed = dict(body)
    for field in _BODY_PERSON_FIELDS:
        values = changed.get(field)
        if isinstance(values, list):
            changed[field] = [person_pseudonym(settings, v) if isinstance(v, str) else v for v in values]
    return changed


def pseudonyms_in(value: Any) -> set[str]:
    """Every pseudonym in a JSON-like value (dicts, lists, strings), keys aside."""
    if isinstance(value, str):
        return {_stored_form(found) for found in PSEUDONYM_PATTERN.findall(value)}
    if isinstance(value, Mapping):
        return set().union(*(pseudonyms_in(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(pseudonyms_in(v) for v in value)) if value else set()
    return set()


def _stored_form(pseudonym: str) -> str:
    """The pseudonym as ops.identities names it (a person's id part alone becomes its urn)."""
    return PERSON_PREFIX + pseudonym if pseudonym.startswith(_PERSON_ID) else pseudonym


def read_identities(settings: Settings, pseudonyms: Iterable[str]) -> dict[str, str]:
    """pseudonym -> identity (or the erased subject) read from ops.identities with delta-rs.

    Identities resolved earlier in this process are answered from memory while the key file is unchanged.
    """
    wanted = {p for p in pseudonyms if PSEUDONYM_PATTERN.fullmatch(p)}
    if not wanted:
        return {}
    identities = _Identities(settings)
    return {p: identities[p] for p in wanted if p in identities}


class _Identities:
    """pseudonym -> identity (or the erased subject), looked up as a response is shown, for one response.

    Answered from the process's identities of the home (`_resolved_for`); a pseudonym it does not hold has
    the identity table read again, at most once per response and once per TABLE_RECHECK_SECONDS.
    """

    def __init__(self, settings: Settings):
        self._settings = settings
        self._entry = _resolved_for(settings)
        self._reread = False

    def get(self, pseudonym: str, default: str | None = None) -> str | None:
        entry = self._entry
        with _RESOLVED_LOCK:
            if pseudonym in entry.identities:
                return entry.identities[pseudonym]
            rows = entry.rows.get(pseudonym)
            reread = rows is None and not self._reread and time.monotonic() - entry.read_at > TABLE_RECHECK_SECONDS
        if reread:
            self._reread = True
            every = _identity_rows(self._settings)
            with _RESOLVED_LOCK:
                entry.rows, entry.read_at = every, time.monotonic()
                rows = every.get(pseudonym)
        if rows is None:
            return default
        with _RESOLVED_LOCK:
            entry.identities.update(resolve_rows(rows, entry.keys))
            return entry.identities.get(pseudonym, default)

    def __contains__(self, pseudonym: object) -> bool:
        return isinstance(pseudonym, str) and self.get(pseudonym) is not None

    def __getitem__(self, pseudonym: str) -> str:
        found = self.get(pseudonym)
        if found is None:
            raise KeyError(pseudonym)
        return found


def _identity_rows(settings: Settings) -> dict[str, list[dict[str, str]]]:
    """Every row of ops.identities by pseudonym (one identity, such as an address, may have several owners)."""
    location = table_location(settings, IDENTITIES_TABLE)
    if not table_exists(location):
        return {}
    table = DeltaTable(str(location), storage_options=delta_storage_options(location))
    by_pseudonym: dict[str, list[dict[str, str]]] = {}
    for row in table.to_pyarrow_table(columns=["pseudonym", "owner", "ciphertext"]).to_pylist():
        by_pseudonym.setdefault(row["pseudonym"], []).append(row)
    return by_pseudonym


def read_every_identity(settings: Settings) -> dict[str, str]:
    """pseudonym -> identity (or the erased subject) of every identity recorded (the BI replica's copy)."""
    rows = [row for rows in _identity_rows(settings).values() for row in rows]
    return resolve_rows(rows, key_store_for(settings))


def show_identities(value: Any, resolved: Mapping[str, str] | _Identities, annotate: bool = True) -> Any:
    """`value` with the identities of `resolved` in place of their pseudonyms.

    Args:
        value: a JSON-like value (dicts, lists, strings).
        resolved: pseudonym -> identity or ERASED_SUBJECT (`read_identities`).
        annotate: a dict field holding a pseudonym alone shows its identity or the erased subject and gets
            `<field>Pseudonym`; False: only the text rule (fixed formats).
    """
    if isinstance(value, str):
        if "p-" not in value and "ua-" not in value:
            return value  # no pseudonym can be in it (most values): no regular expression run
        # A JSON document held as text (a raw event) gets its identities escaped as JSON strings require.
        in_json = value.startswith(("{", "["))
        return PSEUDONYM_PATTERN.sub(lambda m: _identity_in_text(m.group(0), resolved, in_json), value)
    if isinstance(value, Mapping):
        shown: dict[str, Any] = {}
        for key, item in value.items():
            if annotate and isinstance(item, str) and PSEUDONYM_PATTERN.fullmatch(item) and _stored_form(item) in resolved:
                identity = resolved[_stored_form(item)]
                shown[key] = identity if item == _stored_form(item) or identity == ERASED_SUBJECT else _id_part(identity)
                shown[f"{key}Pseudonym"] = item
            else:
                shown.setdefault(key, show_identities(item, resolved, annotate))
        return shown
    if isinstance(value, (list, tuple)):
        return [show_identities(item, resolved, annotate) for item in value]
    return value


def _identity_in_text(pseudonym: str, resolved: Mapping[str, str] | _Identities, in_json: bool = False) -> str:
    identity = resolved.get(_stored_form(pseudonym))
    if identity is None or identity == ERASED_SUBJECT:
        return pseudonym
    shown = identity if pseudonym == _stored_form(pseudonym) else _id_part(identity)
    return json.dumps(shown, ensure_ascii=False)[1:-1] if in_json else shown


def _id_part(identity: str) -> str:
    """A person urn's id part (how OpenMetadata names a user); any other identity as it is."""
    return identity[len(PERSON_PREFIX) :] if identity.startswith(PERSON_PREFIX) else identity


def with_identities(settings: Settings, value: Any, annotate: bool = True) -> Any:
    """`value` (a response, a row, a document) as a caller allowed to see identities sees it (as given when off)."""
    if not settings.privacy.pseudonymise:
        return value
    # One walk: each pseudonym is looked up as it is met (the process holds most of them already).
    return show_identities(value, _Identities(settings), annotate)


def shown_to(settings: Settings, value: Any, principal: Any) -> Any:
    """A response as a principal may see it: identities for one that sees sensitive fields, else pseudonyms."""
    return with_identities(settings, value) if principal.sees_sensitive else value


def rows_with_identities(settings: Settings, rows: Iterable[Any], annotate: bool = False) -> Iterator[Any]:
    """Stream rows with identities shown, reading the identities of SHOWN_ROWS_PER_READ rows at a time."""
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == SHOWN_ROWS_PER_READ:
            yield from with_identities(settings, chunk, annotate)
            chunk = []
    if chunk:
        yield from with_identities(settings, chunk, annotate)


def json_texts_with_identities(settings: Settings, texts: list[str]) -> list[str]:
    """JSON documents (as text) with identities in place of pseudonyms, escaped as JSON strings require."""
    if not settings.privacy.pseudonymise:
        return texts
    resolved = read_identities(settings, pseudonyms_in(texts))
    return [PSEUDONYM_PATTERN.sub(lambda m: _identity_in_text(m.group(0), resolved, True), text) for text in texts]


def json_lines_with_identities(settings: Settings, lines: Iterable[str]) -> Iterator[str]:
    """Stream JSON lines with identities in place of pseudonyms (SHOWN_ROWS_PER_READ lines per read)."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == SHOWN_ROWS_PER_READ:
            yield from json_texts_with_identities(settings, chunk)
            chunk = []
    if chunk:
        yield from json_texts_with_identities(settings, chunk)
