"""API bearer tokens: issue, hash (salted PBKDF2-SHA256) and verify; roles decide what a token may do."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conf.errors import AuthError, InputError

AUDIT_READ = "audit-read"
# Roles are names the endpoints check; audit search needs audit-read. Other names are accepted so that
# tokens can be issued for future endpoints without changing stored tokens.
_ROLE_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
TOKEN_PREFIX = "lh"
HASH_ALGORITHM = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 120_000
_ID_BYTES = 6
_SECRET_BYTES = 32


@dataclass(frozen=True)
class TokenRecord:
    """What is stored about one token: never the token itself, only a salted hash of its secret.

    Attributes:
        token_id: the public id, also the token's second part (`lh.<id>.<secret>`).
        actor: the urn the token acts as.
        roles: what the token may do, e.g. `audit-read`.
        salt: hex salt of the hash.
        hash: hex PBKDF2-SHA256 of the secret.
        iterations: PBKDF2 iterations.
        created_at: epoch ms when the token was issued.
    """

    token_id: str
    actor: str
    roles: tuple[str, ...]
    salt: str
    hash: str
    iterations: int
    created_at: int

    def to_json(self) -> dict[str, Any]:
        """Return the record as stored in the tokens file."""
        return {
            "id": self.token_id,
            "actor": self.actor,
            "roles": list(self.roles),
            "algorithm": HASH_ALGORITHM,
            "iterations": self.iterations,
            "salt": self.salt,
            "hash": self.hash,
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenRecord:
        """Read one stored record.

        Raises:
            InputError: naming the field that is missing or of the wrong kind.
        """
        if not isinstance(data, Mapping):
            raise InputError(f"token record: expected an object, got {data!r}")
        if data.get("algorithm", HASH_ALGORITHM) != HASH_ALGORITHM:
            raise InputError(f"token record {data.get('id')!r}: unsupported algorithm {data.get('algorithm')!r}")
        try:
            record = cls(
                token_id=str(data["id"]),
                actor=str(data["actor"]),
                roles=tuple(str(r) for r in data["roles"]),
                salt=str(data["salt"]),
                hash=str(data["hash"]),
                iterations=int(data["iterations"]),
                created_at=int(data.get("created_at", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"token record {data.get('id')!r}: missing or bad field ({exc})") from None
        return record


def hash_secret(secret: str, salt: str, iterations: int) -> str:
    """Return the hex PBKDF2-HMAC-SHA256 of a token secret with a hex salt."""
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), iterations).hex()


def issue_token(
    actor: str, roles: Sequence[str], created_at: int, iterations: int = DEFAULT_ITERATIONS
) -> tuple[str, TokenRecord]:
    """Create a new token for `actor` with `roles`.

    Args:
        actor: the urn the token acts as (`urn:li:<type>:<id>`).
        roles: at least one role name, e.g. `audit-read`.
        created_at: epoch ms of issue.
        iterations: PBKDF2 iterations for the stored hash.

    Returns:
        The token text (shown once: it cannot be recovered from the record) and the record to store.

    Raises:
        InputError: for an actor that is not an urn, no role or a malformed role name.
    """
    parts = actor.split(":", 3) if isinstance(actor, str) else []
    if len(parts) != 4 or parts[0] != "urn" or parts[1] != "li" or not parts[2] or not parts[3]:
        raise InputError(f"actor: {actor!r} is not an urn:li:<type>:<id>")
    if not roles:
        raise InputError(f"roles: {list(roles)!r} is empty; give at least one (e.g. {AUDIT_READ})")
    bad = [r for r in roles if not isinstance(r, str) or not _ROLE_PATTERN.fullmatch(r)]
    if bad:
        raise InputError(f"roles: {bad} are not role names (lower-case words joined by '-', e.g. {AUDIT_READ})")
    if iterations < 1:
        raise InputError(f"iterations: {iterations!r} must be at least 1")
    token_id = secrets.token_hex(_ID_BYTES)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    salt = secrets.token_hex(16)
    record = TokenRecord(
        token_id=token_id,
        actor=actor,
        roles=tuple(dict.fromkeys(roles)),
        salt=salt,
        hash=hash_secret(secret, salt, iterations),
        iterations=iterations,
        created_at=created_at,
    )
    return f"{TOKEN_PREFIX}.{token_id}.{secret}", record


def split_token(token: str) -> tuple[str, str]:
    """Split token text into (id, secret).

    Raises:
        AuthError: (401) when the text is not shaped like a token this service issues.
    """
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
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


def verify_token(token: str, records: Iterable[TokenRecord]) -> TokenRecord:
    """Return the record whose hash the token's secret matches.

    Raises:
        AuthError: (401) for a malformed token, an unknown id or a wrong secret (one message for all).
    """
    token_id, secret = split_token(token)
    for record in records:
        if hmac.compare_digest(record.token_id, token_id):
            if hmac.compare_digest(hash_secret(secret, record.salt, record.iterations), record.hash):
                return record
            break
    raise AuthError("invalid bearer token", status=401)


def require_role(record: TokenRecord, role: str) -> None:
    """Check that a verified token has `role`.

    Raises:
        AuthError: (403) naming the missing role.
    """
    if role not in record.roles:
        raise AuthError(f"token {record.token_id} lacks the {role!r} role", status=403)
