"""Who is calling: stored bearer tokens, or JWTs of an identity provider verified against its JWKS (PyJWT).

`Authenticator` turns an `Authorization` header into a `Principal` (roles and scope) and notes it on the
request's access record; a refused request is noted with whom it claimed to be.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jwt
from starlette.concurrency import run_in_threadpool

from conf.errors import AuthError, ConfigError
from conf.settings import Settings
from gold.scopes import SCOPE_KINDS, Principal, parse_scope, require_role, scope_of_roles, with_implied_roles
from pipelines.serving.access_log import current_note
from pipelines.serving.auth import TOKEN_PREFIX, bearer_token, principal_of
from pipelines.serving.tokens import TokenVerifier

# The most bytes of a JWKS document read from the identity provider.
_MAX_JWKS_BYTES = 1_048_576
_JWKS_TIMEOUT_SECONDS = 5.0
# The longest principal a refused JWT's unverified claims may name in the access log.
_MAX_CLAIMED_CHARS = 512


class JwksKeys:
    """The identity provider's signing keys by kid: fetched once, again every refresh interval, and on an
    unknown kid, but never sooner than the floor interval after the last fetch (an attacker sending
    random kids cannot make the server hammer the provider).

    Args:
        url: the JWKS URL, or None when `path` is given.
        path: a JWKS file.
        refresh_seconds: the keys' lifetime.
        min_refresh_seconds: the least time between two fetches.
    """

    def __init__(self, url: str | None, path: Path | None, refresh_seconds: float, min_refresh_seconds: float):
        self._url, self._path = url, path
        self._refresh, self._floor = refresh_seconds, min_refresh_seconds
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, jwt.PyJWK]:
        if self._url:
            with urllib.request.urlopen(self._url, timeout=_JWKS_TIMEOUT_SECONDS) as response:  # noqa: S310 - settings URL
                text = response.read(_MAX_JWKS_BYTES + 1)
            if len(text) > _MAX_JWKS_BYTES:
                raise ConfigError(f"identity.jwks_url: {self._url!r} answered more than {_MAX_JWKS_BYTES} bytes")
        else:
            text = self._path.read_bytes()
        keys = jwt.PyJWKSet.from_dict(json.loads(text)).keys
        return {key.key_id or "": key for key in keys}

    def key(self, kid: str | None) -> jwt.PyJWK:
        """Return the signing key named `kid` (the only key when the token names none).

        Raises:
            AuthError: (401) when no key has that kid, even after a permitted refresh.
        """
        now = time.monotonic()
        with self._lock:
            stale = self._fetched_at is None or now - self._fetched_at >= self._refresh
            unknown = (kid or "") not in self._keys and not (kid is None and len(self._keys) == 1)
            may_fetch = self._fetched_at is None or now - self._fetched_at >= self._floor
            if stale or (unknown and may_fetch):
                # A failed fetch counts as one too: a provider that is down is not asked again per request.
                self._fetched_at = now
                try:
                    self._keys = self._load()
                except (OSError, ValueError, jwt.PyJWKSetError, jwt.PyJWKError) as exc:
                    if not self._keys:
                        raise AuthError(f"the identity provider's keys cannot be read ({type(exc).__name__})", 401) from None
            if kid is None and len(self._keys) == 1:
                return next(iter(self._keys.values()))
            key = self._keys.get(kid or "")
        if key is None:
            raise AuthError("invalid bearer token (unknown signing key)", status=401)
        return key


def _claim_values(claims: Mapping[str, Any], name: str) -> list[str]:
    """A claim as a list of strings (a space-separated string counts as a list, as OAuth `scope` does)."""
    value = claims.get(name)
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, (str, int))]
    return []


def scope_claim_values(claims: Mapping[str, Any], name: str, kind: str) -> list[str]:
    """The values of a configured scope claim: a non-empty list of non-empty strings, or a space-separated string.

    A scope claim narrows what the caller reads, so one that is missing, empty or malformed refuses the
    token: read as "no values" it would leave the caller unscoped.

    Raises:
        AuthError: (401) naming the claim and what is wrong with it.
    """
    if name not in claims:
        raise AuthError(f"invalid bearer token (scope claim {name!r} for {kind} is missing)", status=401)
    value = claims[name]
    values = value.split() if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise AuthError(
            f"invalid bearer token (scope claim {name!r} for {kind} is not a list of non-empty strings)", status=401
        )
    if not values:
        raise AuthError(f"invalid bearer token (scope claim {name!r} for {kind} is empty)", status=401)
    return [v.strip() for v in values]


class JwtVerifier:
    """Verify bearer JWTs of the configured identity provider and map their claims to a principal.

    Args:
        settings: the lakehouse settings (the identity section).
    """

    def __init__(self, settings: Settings):
        identity = settings.identity
        self._identity = identity
        path = settings.secret_path(identity.jwks_file) if identity.jwks_file else None
        self._keys = JwksKeys(identity.jwks_url, path, identity.jwks_refresh_seconds, identity.jwks_min_refresh_seconds)

    def principal(self, token: str) -> Principal:
        """Return the principal of a JWT after checking signature, issuer, audience, expiry and not-before.

        Raises:
            AuthError: 401 for a token that fails any check; the claims are never trusted before that.
        """
        identity = self._identity
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in identity.jwt_algorithms:
                raise AuthError(f"invalid bearer token (algorithm {header.get('alg')!r} not accepted)", 401)
            claims = jwt.decode(
                token,
                self._keys.key(header.get("kid")),
                algorithms=list(identity.jwt_algorithms),
                audience=identity.jwt_audience,
                issuer=identity.jwt_issuer,
                leeway=identity.jwt_leeway_seconds,
                options={"require": ["exp", "iss", "aud", identity.actor_claim]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("bearer token expired", status=401) from None
        except jwt.InvalidTokenError as exc:
            raise AuthError(f"invalid bearer token ({type(exc).__name__})", status=401) from None
        return self._to_principal(claims)

    def _to_principal(self, claims: Mapping[str, Any]) -> Principal:
        identity = self._identity
        subject = str(claims[identity.actor_claim])
        actor = subject if subject.startswith("urn:li:") else f"urn:li:corpuser:{subject}"
        roles = [role for value in _claim_values(claims, identity.roles_claim) for role in identity.role_map.get(value, ())]
        kinds = {kind: scope_claim_values(claims, claim, kind) for kind, claim in identity.scope_claims.items()}
        claimed = parse_scope([f"{kind}={value}" for kind, values in kinds.items() if kind in SCOPE_KINDS for value in values])
        scope = claimed.intersect(scope_of_roles(roles, identity.role_scopes))
        return Principal(
            name=f"jwt:{claims.get('iss')}#{subject}",
            actor=actor,
            roles=with_implied_roles(roles),
            scope=scope,
        )


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


class Authenticator:
    """Authenticate API callers by stored token or JWT and check their role.

    Args:
        settings: the lakehouse settings (token file, identity section).
        tokens: the token verifier (default: one over settings.tokens_path).
    """

    def __init__(self, settings: Settings, tokens: TokenVerifier | None = None):
        self.tokens = tokens or TokenVerifier(settings.tokens_path)
        self.jwts = JwtVerifier(settings) if settings.identity.jwt_issuer else None
        self._role_scopes = settings.identity.role_scopes
        self._actor_claim = settings.identity.actor_claim

    def principal(self, authorization: str | None) -> Principal:
        """Return the principal of an `Authorization` header.

        Raises:
            AuthError: 401 for a missing, malformed, unknown, expired or wrongly signed credential.
        """
        token = bearer_token(authorization)
        if self.jwts is not None and _looks_like_jwt(token):
            return self.jwts.principal(token)
        record = self.tokens.verify(token)
        return principal_of(record, scope_of_roles(record.roles, self._role_scopes))

    def authenticate(self, authorization: str | None, role: str) -> Principal:
        """Return the principal after checking it has `role`; note it (or the refusal) on the access record.

        Raises:
            AuthError: 401 for a bad credential, 403 when the principal lacks `role`.
        """
        note = current_note()
        try:
            principal = self.principal(authorization)
        except AuthError:
            if note is not None:
                note.claimed = self._claimed(authorization)
            raise
        if note is not None:
            note.principal = principal
        require_role(principal, role)
        return principal

    async def authenticate_request(self, authorization: str | None, role: str) -> Principal:
        """`authenticate` for a request handler: a stored token at once (one HMAC), a JWT on a worker thread
        (its keys may have to be fetched from the identity provider).

        Raises:
            AuthError: as `authenticate`.
        """
        if self.jwts is not None and _looks_like_jwt((authorization or "").strip().partition(" ")[2].strip()):
            return await run_in_threadpool(self.authenticate, authorization, role)
        return self.authenticate(authorization, role)

    def close(self) -> None:
        """Write what the token verifier noted (last-used times)."""
        self.tokens.flush()

    def _claimed(self, authorization: str | None) -> str | None:
        """Whom a refused credential claimed to be, for the access record: a token id (only if well formed),
        or a JWT's `jwt:<iss>#<subject>` as its unverified claims say."""
        token = (authorization or "").strip().partition(" ")[2].strip()
        parts = token.split(".")
        if len(parts) == 3 and parts[0] == TOKEN_PREFIX and parts[1].isascii() and parts[1].isalnum() and len(parts[1]) <= 64:
            return f"token:{parts[1]}"
        if self.jwts is None or not _looks_like_jwt(token):
            return None
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            return None
        subject = claims.get(self._actor_claim) if isinstance(claims, dict) else None
        if not isinstance(subject, (str, int)):
            return None
        # Unverified: whatever the caller wrote, so bounded (the record is evidence, not an identity).
        return f"jwt:{claims.get('iss')}#{subject}"[:_MAX_CLAIMED_CHARS]

