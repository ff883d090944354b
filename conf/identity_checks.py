"""The value checks of the identity and access_log settings, each problem naming its key."""

from __future__ import annotations

from collections.abc import Callable

from conf.settings_sections import AccessLogSettings, IdentitySettings

# Asymmetric signatures only: a shared-secret (HS*) or unsigned (none) token proves nothing about its issuer.
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
SCOPE_CLAIM_KINDS = ("domain", "platform", "entity-type", "prefix")


def check_identity(identity: IdentitySettings, ok: Callable[..., bool]) -> list[str]:
    """Return the problems with the identity section's values."""
    problems = []
    if ok("identity.jwt_issuer", "identity.jwt_audience") and bool(identity.jwt_issuer) != bool(identity.jwt_audience):
        problems.append(
            f"identity.jwt_audience: {identity.jwt_audience!r}; bearer JWTs need both jwt_issuer and jwt_audience"
        )
    if ok("identity.jwt_issuer", "identity.jwks_url", "identity.jwks_file") and identity.jwt_issuer:
        if bool(identity.jwks_url) == bool(identity.jwks_file):
            problems.append(
                f"identity.jwks_url: {identity.jwks_url!r}; with jwt_issuer set, give exactly one of jwks_url and jwks_file"
            )
    if ok("identity.jwks_url") and identity.jwks_url and not identity.jwks_url.startswith(("https://", "http://")):
        problems.append(f"identity.jwks_url: {identity.jwks_url!r} is not an http(s) URL")
    if ok("identity.jwt_algorithms"):
        bad = [a for a in identity.jwt_algorithms if a not in JWT_ALGORITHMS]
        if bad or not identity.jwt_algorithms:
            problems.append(
                f"identity.jwt_algorithms: {list(identity.jwt_algorithms)!r}; allowed: {', '.join(JWT_ALGORITHMS)}"
            )
    for name in ("jwks_refresh_seconds", "jwks_min_refresh_seconds"):
        if ok(f"identity.{name}") and getattr(identity, name) <= 0:
            problems.append(f"identity.{name}: {getattr(identity, name)!r} must be above 0")
    if ok("identity.jwt_leeway_seconds") and identity.jwt_leeway_seconds < 0:
        problems.append(f"identity.jwt_leeway_seconds: {identity.jwt_leeway_seconds!r} must be 0 or more")
    if ok("identity.scope_claims"):
        for kind in identity.scope_claims:
            if kind not in SCOPE_CLAIM_KINDS:
                problems.append(f"identity.scope_claims.{kind}: unknown scope kind (known: {', '.join(SCOPE_CLAIM_KINDS)})")
    if ok("identity.role_scopes"):
        for role, specs in identity.role_scopes.items():
            for spec in specs:
                kind, sep, value = spec.partition("=")
                if not sep or kind not in SCOPE_CLAIM_KINDS or not value:
                    problems.append(
                        f"identity.role_scopes.{role}: {spec!r} is not kind=value (kinds: {', '.join(SCOPE_CLAIM_KINDS)})"
                    )
    return problems


def check_access_log(access_log: AccessLogSettings, ok: Callable[..., bool]) -> list[str]:
    """Return the problems with the access_log section's values."""
    problems = []
    if ok("access_log.flush_seconds") and access_log.flush_seconds <= 0:
        problems.append(f"access_log.flush_seconds: {access_log.flush_seconds!r} must be above 0")
    if ok("access_log.max_buffered") and access_log.max_buffered < 1:
        problems.append(f"access_log.max_buffered: {access_log.max_buffered!r} must be at least 1")
    if ok("access_log.retention_days") and access_log.retention_days < 0:
        problems.append(f"access_log.retention_days: {access_log.retention_days!r} must be 0 or more")
    return problems
