"""API bearer tokens: issue, hash (salted HMAC-SHA256 of a 256-bit secret) and verify; expiry and scopes.

A token is `lh.<id>.<secret>` with a 256-bit random secret, so a slow KDF adds nothing: the stored hash is
one HMAC-SHA256 keyed by a per-token salt. An unknown id is checked against a stand-in record the same
way, so known and unknown ids cost the same. Records written by earlier versions hold a PBKDF2 hash
(`pbkdf2_sha256`); they still verify, and the token file rewrites them on first use (`upgraded`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from conf.errors import AuthError, InputError
from gold.scopes import (
    AUDIT_READ,
    UNSCOPED,
    Principal,
    Scope,
    require_role,
    scope_from_json,
    scope_json,
    with_implied_roles,
)

__all__ = [
    "AUDIT_READ", "TokenRecord", "bearer_token", "hash_secret", "issue_token", "principal_of", "require_role",
    "rotate_secret", "split_token", "verify_token",
]  # fmt: skip

# Roles are names the endpoints check (gold.scopes); other names are accepted so that tokens can be
# issued for future endpoints without changing stored tokens.
_ROLE_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
TOKEN_PREFIX = "lh"
HASH_ALGORITHM = "hmac_sha256"
LEGACY_ALGORITHM = "pbkdf2_sha256"
_ID_BYTES = 6
_SECRET_BYTES = 32
# What issued ids and secrets look like; anything else is refused before any lookup.
_ID_PATTERN = re.compile(r"[0-9a-f]{1,64}")
_SECRET_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Checked in place of a record when the id is unknown: the same HMAC and comparison as a known id.
_STAND_IN_SALT = secrets.token_hex(16)
_STAND_IN_HASH = secrets.token_hex(32)


@dataclass(frozen=True)
class TokenRecord:
    """What is stored about one token: never the token itself, only a salted hash of its secret.

    Attributes:
        token_id: the public id, also the token's second part (`lh.<id>.<secret>`).
        actor: the urn the token acts as.
        roles: what the token may do, e.g. `audit-read`.
        salt: hex key of the hash.
        hash: hex HMAC-SHA256 of the secret (PBKDF2-SHA256 for `pbkdf2_sha256` records).
        created_at: epoch ms when the token was issued (or last rotated).
        expires_at: epoch ms from which it is refused, or None (never).
        scope: the audit rows it may see.
        algorithm: `hmac_sha256`, or `pbkdf2_sha256` for a record from an earlier version.
        iterations: PBKDF2 iterations of a `pbkdf2_sha256` record (0 otherwise).
    """

    token_id: str
    actor: str
    roles: tuple[str, ...]
    salt: str
    hash: str
    created_at: int
    expires_at: int | None = None
    scope: Scope = UNSCOPED
    algorithm: str = HASH_ALGORITHM
    iterations: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the record as stored in the tokens file."""
        stored = {
            "id": self.token_id,
            "actor": self.actor,
            "roles": list(self.roles),
            "algorithm": self.algorithm,
            "salt": self.salt,
            "hash": self.hash,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "scope": scope_json(self.scope),
        }
        return {**stored, "iterations": self.iterations} if self.algorithm == LEGACY_ALGORITHM else stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenRecord:
        """Read one stored record (either algorithm).

        Raises:
            InputError: naming the field that is missing or of the wrong kind.
        """
        if not isinstance(data, Mapping):
            raise InputError(f"token record: expected an object, got {data!r}")
        # A record without an algorithm predates the field, when PBKDF2 was the only one.
        algorithm = data.get("algorithm", LEGACY_ALGORITHM)
        if algorithm not in (HASH_ALGORITHM, LEGACY_ALGORITHM):
            raise InputError(f"token record {data.get('id')!r}: unsupported algorithm {algorithm!r}")
        try:
            expires_at = data.get("expires_at")
            return cls(
                token_id=str(data["id"]),
                actor=str(data["actor"]),
                roles=tuple(str(r) for r in data["roles"]),
                salt=str(data["salt"]),
                hash=str(data["hash"]),
                created_at=int(data.get("created_at", 0)),
                expires_at=None if expires_at is None else int(expires_at),
                scope=scope_from_json(data.get("scope"), f"token record {data.get('id')!r}: scope"),
                algorithm=algorithm,
                iterations=int(data["iterations"]) if algorithm == LEGACY_ALGORITHM else 0,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"token record {data.get('id')!r}: missing or bad field ({exc})") from None


def hash_secret(secret: str, salt: str) -> str:
    """Return the hex HMAC-SHA256 of a token secret keyed by a hex salt."""
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


def _legacy_hash(secret: str, salt: str, iterations: int) -> str:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), iterations).hex()


def _check_roles(actor: str, roles: Sequence[str]) -> None:
    parts = actor.split(":", 3) if isinstance(actor, str) else []
    if len(parts) != 4 or parts[0] != "urn" or parts[1] != "li" or not parts[2] or not parts[3]:
        raise InputError(f"actor: {actor!r} is not an urn:li:<type>:<id>")
    if not roles:
        raise InputError(f"roles: {list(roles)!r} is empty; give at least one (e.g. {AUDIT_READ})")
    bad = [r for r in roles if not isinstance(r, str) or not _ROLE_PATTERN.fullmatch(r)]
    if bad:
        raise InputError(f"roles: {bad} are not role names (lower-case words joined by '-', e.g. {AUDIT_READ})")


def issue_token(
    actor: str,
    roles: Sequence[str],
    created_at: int,
    *,
    expires_at: int | None = None,
    scope: Scope = UNSCOPED,
) -> tuple[str, TokenRecord]:
    """Create a new token for `actor` with `roles`.

    Args:
        actor: the urn the token acts as (`urn:li:<type>:<id>`).
        roles: at least one role name, e.g. `audit-read`.
        created_at: epoch ms of issue.
        expires_at: epoch ms from which the token is refused (None: never).
        scope: the audit rows the token may see.

    Returns:
        The token text (shown once: it cannot be recovered from the record) and the record to store.

    Raises:
        InputError: for an actor that is not an urn, no role, a malformed role name, or an expiry not
            after the issue time.
    """
    _check_roles(actor, roles)
    if expires_at is not None and expires_at <= created_at:
        raise InputError(f"expires_at: {expires_at!r} is not after the issue time {created_at}")
    record = TokenRecord(
        token_id=secrets.token_hex(_ID_BYTES),
        actor=actor,
        roles=tuple(dict.fromkeys(roles)),
        salt="",
        hash="",
        created_at=created_at,
        expires_at=expires_at,
        scope=scope,
    )
    return rotate_secret(record, created_at)


def rotate_secret(record: TokenRecord, rotated_at: int) -> tuple[str, TokenRecord]:
    """Give a token a new secret: the old text stops verifying; id, actor, roles and scope stay.

    An expiry moves with the rotation: the token lives as long again as it was issued for.

    Returns:
        The new token text (shown once) and the record to store.
    """
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    salt = secrets.token_hex(16)
    lifetime = None if record.expires_at is None else record.expires_at - record.created_at
    rotated = replace(
        record,
        salt=salt,
        hash=hash_secret(secret, salt),
        created_at=rotated_at,
        expires_at=None if lifetime is None else rotated_at + lifetime,
        algorithm=HASH_ALGORITHM,
        iterations=0,
    )
    return f"{TOKEN_PREFIX}.{record.token_id}.{secret}", rotated


def split_token(token: str) -> tuple[str, str]:
    """Split token text into (id, secret).

    Raises:
        AuthError: (401) when the text is not shaped like a token this service issues (any character
            outside the id's and secret's alphabets included).
    """
    parts = token.split(".") if isinstance(token, str) else []
    if (
        len(parts) != 3
        or parts[0] != TOKEN_PREFIX
        or not _ID_PATTERN.fullmatch(parts[1])
        or not _SECRET_PATTERN.fullmatch(parts[2])
    ):
        raise AuthError("invalid bearer token", status=401)
    return parts[1], parts[2]


def bearer_token(authorization: str | None) -> str:
    """Return the token of an `Authorization: Bearer <token>` header.

    Raises:
        AuthError: (401) when the header is missing or not a bearer credential.
    """
    if not authorization:
        raise AuthError("missing bearer token (send Authorization: Bearer <token>)", status=401)
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header is not a bearer token", status=401)
    return token.strip()


def verify_token(token: str, records: Mapping[str, TokenRecord], now_ms: int) -> TokenRecord:
    """Return the record (by id) whose hash the token's secret matches and that has not expired.

    An unknown id is compared with a stand-in record, so it costs what a wrong secret of a known id does.

    Raises:
        AuthError: (401) for a malformed token, an unknown id, a wrong secret or an expired token (one
            message for the first three).
    """
    token_id, secret = split_token(token)
    record = records.get(token_id)
    if record is not None and record.algorithm == LEGACY_ALGORITHM:
        matches = hmac.compare_digest(_legacy_hash(secret, record.salt, record.iterations), record.hash)
    else:
        salt, expected = (record.salt, record.hash) if record is not None else (_STAND_IN_SALT, _STAND_IN_HASH)
        matches = hmac.compare_digest(hash_secret(secret, salt), expected)
    if record is None or not matches:
        raise AuthError("invalid bearer token", status=401)
    if record.expires_at is not None and now_ms >= record.expires_at:
        raise AuthError("bearer token expired", status=401)  # no id: the error is sent to whoever holds the token
    return record


def upgraded(record: TokenRecord, token: str) -> TokenRecord:
    """The record of a verified legacy (PBKDF2) token rewritten with the current hash; others unchanged."""
    if record.algorithm != LEGACY_ALGORITHM:
        return record
    _, secret = split_token(token)
    salt = secrets.token_hex(16)
    return replace(record, algorithm=HASH_ALGORITHM, iterations=0, salt=salt, hash=hash_secret(secret, salt))


def principal_of(record: TokenRecord, role_scope: Scope = UNSCOPED) -> Principal:
    """The principal of a verified token: its roles (implied ones added) and its scope within `role_scope`."""
    return Principal(
        name=f"token:{record.token_id}",
        actor=record.actor,
        roles=with_implied_roles(record.roles),
        scope=record.scope.intersect(role_scope),
    )
