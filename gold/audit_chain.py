"""The audit hash chain, pure parts: canonical row form, batch digests, chain links and their signatures.

Everything here is deterministic and free of I/O, so an outside party can recompute a digest from the
description in docs/audit-trail.md (or from these functions) without the lakehouse.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from conf.tables import ADDED_COLUMNS

# The tables the chain covers and the column that identifies a row within a batch (the canonical order).
CHAINED_TABLES: dict[str, str] = {
    "silver.entity_change_events": "event_id",
    "gold.audit_events": "event_id",
    "gold.openmetadata_change_events": "id",
    "ops.access_log": "access_id",
    "ops.retention_cuts": "entry_id",
    "ops.erasures": "erasure_id",
    "ops.privacy_migrations": "entry_id",
}
GENESIS_DIGEST = "0" * 64
# Columns a chained table gained after links were recorded: left out of a row's canonical form while
# null, so a row written before the column existed keeps the digest its link recorded.
OMITTED_WHEN_NULL = frozenset(name for names in ADDED_COLUMNS.values() for name in names)
LINK_FIELDS = ("seq", "table_key", "batch_id", "delta_version", "row_count", "batch_digest", "prev_digest", "recorded_at_ms")


def canonical_value(value: Any) -> Any:
    """Return the JSON-ready canonical form of one column value.

    Strings, integers, booleans and null stay as they are; decimals become their plain string
    (`1.0`); dates `YYYY-MM-DD`; timestamps UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`; maps objects (keys
    sorted on output); arrays lists. Floats are refused: no chained column has one, and their text
    form differs between implementations.

    Raises:
        InputError: naming the value's type when it has no canonical form.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_value(v) for v in value]
    raise InputError(f"value: {type(value).__name__} {value!r} has no canonical form")


# One encoder for every row: json.dumps with options builds a new encoder per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(row: Mapping[str, Any]) -> str:
    """Return the canonical JSON text of one row: every column (but a null OMITTED_WHEN_NULL one), keys sorted,
    no spaces, UTF-8 text unescaped."""
    return _ENCODER.encode(
        {str(k): canonical_value(v) for k, v in row.items() if not (v is None and k in OMITTED_WHEN_NULL)}
    )


# The characters json's encoder escapes in a string (ensure_ascii off): quote, backslash, controls.
_ESCAPED_CHARACTERS = r'["\\\x00-\x1f]'


def canonical_column_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Return an Arrow column as a list of canonical values (`canonical_value` of each).

    Raises:
        InputError: naming the type of a column that has no canonical form (floating point, binary).
    """
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return column.to_pylist()
    if pa.types.is_date(kind) or pa.types.is_decimal(kind):
        return pc.cast(column, pa.string()).to_pylist()
    if pa.types.is_map(kind):
        return [None if v is None else {str(k): x for k, x in v} for v in column.to_pylist()]
    if pa.types.is_timestamp(kind) or pa.types.is_list(kind) or pa.types.is_struct(kind):
        return [canonical_value(v) for v in column.to_pylist()]
    raise InputError(f"column type: {kind} has no canonical form")


def _json_texts(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value's canonical JSON text, computed by Arrow kernels (Python only for strings needing escapes)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.fill_null(pc.cast(column, pa.string()), "null")
    if pa.types.is_date(kind) or pa.types.is_decimal(kind):
        column = pc.cast(column, pa.string())
    elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return pa.array(
            ["null" if v is None else _ENCODER.encode(v) for v in canonical_column_values(column)], pa.string()
        )  # fmt: skip
    quoted = pc.binary_join_element_wise('"', column, '"', "")
    escape = pc.fill_null(pc.match_substring_regex(column, _ESCAPED_CHARACTERS), False)
    if pc.any(escape).as_py():
        escaped = [encode_basestring(v) for v in pc.filter(column, escape).to_pylist()]
        quoted = pc.replace_with_mask(quoted, escape, pa.array(escaped, pa.string()))
    return pc.fill_null(quoted, "null")


def canonical_json_lines(table: pa.Table) -> pa.Array:
    """Return each row's canonical JSON text followed by a newline, as one Arrow string array.

    The same bytes as `canonical_json(row) + "\\n"` for every row, computed column by column.

    Raises:
        InputError: naming a column whose type has no canonical form.
    """
    names = sorted(table.column_names)
    pieces: list[Any] = []
    for index, name in enumerate(names):
        label = ("{" if index == 0 else ",") + encode_basestring(name) + ":"
        try:
            texts = _json_texts(table.column(name))
        except InputError as exc:
            raise InputError(f"{name}: {exc}") from None
        if name in OMITTED_WHEN_NULL and index > 0:
            present = pc.is_valid(table.column(name))
            pieces.append(pc.if_else(present, pc.binary_join_element_wise(label, texts, ""), ""))
        else:
            pieces.extend((label, texts))
    pieces.append("}\n" if names else "{}\n")
    if table.num_rows == 0:
        return pa.array([], pa.string())
    lines = pc.binary_join_element_wise(*pieces, "")
    if not isinstance(lines, (pa.Array, pa.ChunkedArray)):  # every column was a scalar piece: no columns
        lines = pa.array([lines.as_py()] * table.num_rows, pa.string())
    return lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines


class BatchDigest:
    """SHA-256 over a batch's rows fed in canonical order: each row's canonical JSON, UTF-8, then a newline.

    Feed the rows sorted by the table's key column (CHAINED_TABLES) ascending by code point.
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.row_count = 0

    def add(self, row: Mapping[str, Any]) -> None:
        """Add the next row (in canonical order)."""
        self._hash.update(canonical_json(row).encode("utf-8") + b"\n")
        self.row_count += 1

    def add_lines(self, lines: pa.Array) -> None:
        """Add rows given as `canonical_json_lines` (in canonical order): their bytes, as one buffer."""
        if len(lines) == 0:
            return
        offsets = lines.buffers()[1]
        first, last = (int.from_bytes(offsets[4 * i : 4 * i + 4], "little") for i in (lines.offset, lines.offset + len(lines)))
        self._hash.update(memoryview(lines.buffers()[2])[first:last])
        self.row_count += len(lines)

    def hexdigest(self) -> str:
        """The digest of the rows added so far (of no rows: SHA-256 of the empty string)."""
        return self._hash.hexdigest()


def batch_digest(rows: Iterable[Mapping[str, Any]], key_column: str) -> tuple[int, str]:
    """Return (row count, digest) of a batch's rows, sorting them by `key_column` first.

    Raises:
        InputError: when `key_column` is missing from a row.
    """
    materialized = list(rows)
    if any(key_column not in row for row in materialized):
        raise InputError(f"key_column: {key_column!r} is not a column of every row")
    digest = BatchDigest()
    for row in sorted(materialized, key=lambda r: r[key_column]):
        digest.add(row)
    return digest.row_count, digest.hexdigest()


def row_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of one row's canonical JSON: compares single rows when a batch digest differs."""
    return hashlib.sha256(canonical_json(row).encode("utf-8")).hexdigest()


def link_digest(link: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a link's canonical JSON over LINK_FIELDS (so the previous digest is bound in).

    Raises:
        InputError: naming the first field the link lacks.
    """
    missing = [name for name in LINK_FIELDS if name not in link]
    if missing:
        raise InputError(f"link: missing field {missing[0]!r}")
    return hashlib.sha256(canonical_json({name: link[name] for name in LINK_FIELDS}).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainKey:
    """Signing material: kind none, hmac (secret bytes) or ed25519 (32-byte raw private key)."""

    kind: str
    secret: bytes = b""

    def __post_init__(self) -> None:
        if self.kind not in ("none", "hmac", "ed25519"):
            raise InputError(f"kind: {self.kind!r} is not one of none, hmac, ed25519")
        if self.kind != "none" and not self.secret:
            raise InputError(f"secret: a {self.kind} key needs key bytes")

    @property
    def key_id(self) -> str | None:
        """What is stored beside a signature: the Ed25519 public key (hex), or `hmac-sha256:` + the key's fingerprint."""
        if self.kind == "hmac":
            return "hmac-sha256:" + hashlib.sha256(self.secret).hexdigest()[:16]
        if self.kind == "ed25519":
            return "ed25519:" + _ed25519_public_hex(self.secret)
        return None

    def sign(self, digest: str) -> str | None:
        """Sign a link digest (its hex text, ASCII); None when signing is off."""
        if self.kind == "hmac":
            return hmac.new(self.secret, digest.encode("ascii"), hashlib.sha256).hexdigest()
        if self.kind == "ed25519":
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            return Ed25519PrivateKey.from_private_bytes(self.secret).sign(digest.encode("ascii")).hex()
        return None


def _ed25519_public_hex(private: bytes) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.from_private_bytes(private).public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def signature_valid(digest: str, signature: str | None, key_id: str | None, key: ChainKey) -> bool:
    """Tell whether a stored signature matches a link digest.

    An Ed25519 signature is checked with the public key in `key_id` alone (no secret needed); an HMAC
    one needs `key` to be the same secret (its fingerprint must equal `key_id`). An unsigned link is
    valid only while signing is off.
    """
    if signature is None and key_id is None:
        return key.kind == "none"
    if key_id and key_id.startswith("ed25519:"):
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(key_id.split(":", 1)[1])).verify(
                bytes.fromhex(signature or ""), digest.encode("ascii")
            )
        except (InvalidSignature, ValueError):
            return False
        return True
    if key_id and key_id.startswith("hmac-sha256:"):
        if key.kind != "hmac" or key.key_id != key_id:
            return False
        return hmac.compare_digest(key.sign(digest) or "", signature or "")
    return False


def new_link(
    seq: int, table_key: str, batch_id: str, delta_version: int, row_count: int, digest: str, prev: str,
    recorded_at_ms: int, key: ChainKey,
) -> dict[str, Any]:  # fmt: skip
    """Return one chain row (every ops.audit_chain column), its digest and signature computed."""
    link = {
        "seq": seq,
        "table_key": table_key,
        "batch_id": batch_id,
        "delta_version": delta_version,
        "row_count": row_count,
        "batch_digest": digest,
        "prev_digest": prev,
        "recorded_at_ms": recorded_at_ms,
    }
    link["link_digest"] = link_digest(link)
    link["signature"] = key.sign(link["link_digest"])
    link["key_id"] = key.key_id
    return link


def next_link_position(links: Iterable[Mapping[str, Any]]) -> tuple[int, str]:
    """Where the next link goes: after the link with the greatest seq, whatever the links' count or order.

    Returns:
        (that seq + 1, that link's link_digest), the next link's seq and prev_digest; (0, GENESIS_DIGEST)
        for an empty chain.
    """
    newest = max(links, key=lambda link: int(link["seq"]), default=None)
    return (0, GENESIS_DIGEST) if newest is None else (int(newest["seq"]) + 1, newest["link_digest"])


def first_broken_link(links: list[Mapping[str, Any]], key: ChainKey) -> tuple[int, str] | None:
    """Check the chain itself: sequence, previous digests, link digests and signatures.

    Args:
        links: the chain rows sorted by seq.
        key: the configured signing key (none: unsigned links are expected).

    Returns:
        None when the chain holds, else (index of the first bad link, what is wrong with it).
    """
    prev = GENESIS_DIGEST
    for index, link in enumerate(links):
        if link["seq"] != index:
            return index, f"seq {link['seq']} where {index} was expected (a link was removed or inserted)"
        if link["prev_digest"] != prev:
            return index, f"prev_digest {link['prev_digest']} does not name the previous link ({prev})"
        recomputed = link_digest(link)
        if link["link_digest"] != recomputed:
            return index, f"link_digest {link['link_digest']} does not match its fields ({recomputed}): the link was edited"
        if not signature_valid(link["link_digest"], link.get("signature"), link.get("key_id"), key):
            return index, f"signature of link {index} does not verify (key {link.get('key_id')})"
        prev = link["link_digest"]
    return None


@dataclass(frozen=True)
class RowDiff:
    """How a batch's rows differ from the rows the chain recorded."""

    missing: tuple[str, ...]
    added: tuple[str, ...]
    changed: tuple[str, ...]


def diff_rows(recorded: Mapping[str, str], current: Mapping[str, str]) -> RowDiff:
    """Compare key -> row hash maps: keys gone, keys new, keys whose row differs (each sorted)."""
    return RowDiff(
        missing=tuple(sorted(k for k in recorded if k not in current)),
        added=tuple(sorted(k for k in current if k not in recorded)),
        changed=tuple(sorted(k for k in recorded if k in current and recorded[k] != current[k])),
    )
