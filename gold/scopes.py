"""What a caller may see: roles, scopes (domains, platforms, entity types, urn prefixes) and masked fields.

A scope narrows the audit rows a principal reads; it is one more condition of the search's sqlglot tree
(`scope_condition`), so Spark SQL and the in-process engine apply the same rule, totals included. The
fields a principal without the sensitive role must not see are removed from what it is sent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from sqlglot import exp

from conf.errors import AuthError, InputError

AUDIT_READ = "audit-read"
AUDIT_READ_SENSITIVE = "audit-read-sensitive"
ADMIN = "admin"
# A role grants the roles after it: admin reads everything, sensitive fields included.
IMPLIED_ROLES: dict[str, tuple[str, ...]] = {
    ADMIN: (AUDIT_READ_SENSITIVE, AUDIT_READ),
    AUDIT_READ_SENSITIVE: (AUDIT_READ,),
}
# The fields of an audit event only audit-read-sensitive (or admin) sees: who sent it from where, and how.
SENSITIVE_EVENT_FIELDS = ("sourceIP", "userAgent", "rawUsageEvent")
# Scope kinds as written on the command line and in settings (`kind=value`) -> Scope field.
SCOPE_KINDS = {
    "domain": "domains",
    "platform": "platforms",
    "entity-type": "entity_types",
    "prefix": "entity_prefixes",
}
_LIKE_SPECIAL = re.compile(r"([\\%_])")


@dataclass(frozen=True)
class Scope:
    """The audit rows a principal may see: each non-empty kind must match (values of one kind are OR-ed).

    Attributes:
        domains: domain urns (`urn:li:domain:finance`) the entity must belong to.
        platforms: data platform names (`hive`) the entity must live on.
        entity_types: entity types (`dataset`).
        entity_prefixes: entity urn prefixes.
        nothing: the scope matches no row (two scopes with nothing in common were intersected).
    """

    domains: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    entity_types: tuple[str, ...] = ()
    entity_prefixes: tuple[str, ...] = ()
    nothing: bool = False

    @property
    def restricted(self) -> bool:
        """Whether the scope narrows the rows at all."""
        return self.nothing or bool(self.domains or self.platforms or self.entity_types or self.entity_prefixes)

    def to_specs(self) -> list[str]:
        """The scope as `kind=value` texts (`parse_scope` reads them back)."""
        specs = [f"{kind}={value}" for kind, name in SCOPE_KINDS.items() for value in getattr(self, name)]
        return specs + (["nothing"] if self.nothing else [])

    def intersect(self, other: Scope) -> Scope:
        """The rows both scopes allow: per kind the common values (urn prefixes: the longer of two nested ones)."""
        merged: dict[str, Any] = {"nothing": self.nothing or other.nothing}
        for name in ("domains", "platforms", "entity_types"):
            mine, theirs = getattr(self, name), getattr(other, name)
            common = tuple(v for v in mine if v in theirs) if mine and theirs else mine or theirs
            merged["nothing"] |= bool(mine and theirs and not common)
            merged[name] = common
        mine, theirs = self.entity_prefixes, other.entity_prefixes
        if mine and theirs:
            common = tuple(dict.fromkeys(
                [a for a in mine if any(a.startswith(b) for b in theirs)]
                + [b for b in theirs if any(b.startswith(a) for a in mine)]
            ))  # fmt: skip
            merged["nothing"] |= not common
        else:
            common = mine or theirs
        merged["entity_prefixes"] = common
        return Scope(**merged)


UNSCOPED = Scope()


def parse_scope(specs: Iterable[str], name: str = "--scope") -> Scope:
    """Read `kind=value` texts (kinds: domain, platform, entity-type, prefix) into a Scope.

    Raises:
        InputError: naming `name` and the text that is not a known kind with a value.
    """
    values: dict[str, list[str]] = {field_name: [] for field_name in SCOPE_KINDS.values()}
    nothing = False
    for spec in specs:
        if spec == "nothing":
            nothing = True
            continue
        kind, sep, value = spec.partition("=") if isinstance(spec, str) else ("", "", "")
        if not sep or kind.strip() not in SCOPE_KINDS or not value.strip():
            raise InputError(f"{name}: {spec!r} is not kind=value (kinds: {', '.join(SCOPE_KINDS)})")
        values[SCOPE_KINDS[kind.strip()]].append(value.strip())
    return Scope(**{k: tuple(dict.fromkeys(v)) for k, v in values.items()}, nothing=nothing)


def scope_within(inner: Scope, outer: Scope) -> bool:
    """Whether every row `inner` allows is one `outer` allows, judged kind by kind (a narrower or equal scope).

    Conservative: a scope narrowed only by another kind (an entity type against an urn prefix) is not
    within.
    """
    if inner.nothing:
        return True
    if outer.nothing:
        return False
    for name in ("domains", "platforms", "entity_types"):
        mine, theirs = getattr(inner, name), getattr(outer, name)
        if theirs and not (mine and set(mine) <= set(theirs)):
            return False
    if outer.entity_prefixes:
        return bool(inner.entity_prefixes) and all(
            any(prefix.startswith(allowed) for allowed in outer.entity_prefixes) for prefix in inner.entity_prefixes
        )
    return True


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: who, with which roles, limited to which scope.

    Attributes:
        name: what the access log records: `token:<id>` or `jwt:<issuer>#<subject>`.
        actor: the urn the caller acts as.
        roles: the roles granted (implied roles included, see `IMPLIED_ROLES`).
        scope: the rows the caller may see.
    """

    name: str
    actor: str
    roles: tuple[str, ...]
    scope: Scope = UNSCOPED

    @property
    def sees_sensitive(self) -> bool:
        """Whether the caller sees source IPs, user agents and raw events."""
        return AUDIT_READ_SENSITIVE in self.roles


def with_implied_roles(roles: Sequence[str]) -> tuple[str, ...]:
    """The roles with those they imply, in the order given then implied."""
    expanded = list(roles)
    for role in roles:
        expanded.extend(IMPLIED_ROLES.get(role, ()))
    return tuple(dict.fromkeys(expanded))


def require_role(principal: Principal, role: str) -> None:
    """Check that a principal has `role` (directly or implied).

    Raises:
        AuthError: (403) naming the missing role.
    """
    if role not in principal.roles:
        raise AuthError(f"{principal.name} lacks the {role!r} role", status=403)


def scope_of_roles(roles: Sequence[str], role_scopes: Mapping[str, Sequence[str]]) -> Scope:
    """The scope the settings give `roles` (intersected); roles without one leave it open.

    Raises:
        InputError: for a settings scope text that is not kind=value.
    """
    scope = UNSCOPED
    for role in roles:
        if role in role_scopes:
            scope = scope.intersect(parse_scope(role_scopes[role], f"identity.role_scopes.{role}"))
    return scope


def _like_prefix(prefix: str) -> str:
    return _LIKE_SPECIAL.sub(r"\\\1", prefix)


def _any_of(conditions: list[exp.Expression]) -> exp.Expression:
    return exp.paren(exp.or_(*conditions, copy=False)) if len(conditions) > 1 else conditions[0]


def _platform_condition(platform: str) -> exp.Expression:
    """An entity on `platform`: its urn names `urn:li:dataPlatform:<platform>` or starts with `(<platform>,`."""
    escaped = _like_prefix(platform)
    entity = exp.column("entity_urn")
    return _any_of([
        exp.Like(this=entity, expression=exp.Literal.string(f"%urn:li:dataPlatform:{escaped},%")),
        exp.Like(this=entity.copy(), expression=exp.Literal.string(f"urn:li:%:({escaped},%")),
    ])  # fmt: skip


def scope_condition(scope: Scope) -> exp.Expression | None:
    """Return the condition of the audit rows `scope` allows (None: every row).

    Kinds are AND-ed, values of one kind OR-ed; rows without an entity (logins) match no restricted
    scope. `domain` is the column the publish carries from the entity's `domains` aspect.
    """
    if scope.nothing:
        return exp.false()
    if not scope.restricted:
        return None
    conditions: list[exp.Expression] = []
    if scope.domains:
        conditions.append(exp.column("domain").isin(*[exp.Literal.string(v) for v in scope.domains]))
    if scope.entity_types:
        conditions.append(exp.column("entity_type").isin(*[exp.Literal.string(v) for v in scope.entity_types]))
    if scope.platforms:
        conditions.append(_any_of([_platform_condition(p) for p in scope.platforms]))
    if scope.entity_prefixes:
        conditions.append(_any_of([
            exp.Like(this=exp.column("entity_urn"), expression=exp.Literal.string(_like_prefix(p) + "%"))
            for p in scope.entity_prefixes
        ]))  # fmt: skip
    return exp.and_(*conditions, copy=False)


# The audit row's entity is the entity whose aspect was written: its columns in silver change events.
CHANGE_EVENT_COLUMNS = {"entity_urn": "aspect_entity_urn", "entity_type": "aspect_entity_type"}


def change_event_condition(scope: Scope, domain_entities: Sequence[str] | None = None) -> exp.Expression | None:
    """Return `scope_condition` over silver change events (None: every row).

    The audit row's entity columns become the aspect entity's (`CHANGE_EVENT_COLUMNS`). Change events
    carry no domain: with `domain_entities` (the urns of the entities in the scope's domains) the domain
    kind becomes `aspect_entity_urn IN (...)`; without, a domain scope keeps its `domain` column (the
    caller joins one).
    """
    condition = scope_condition(scope)
    if condition is None:
        return None

    def on_change_events(node: exp.Expression) -> exp.Expression:
        if domain_entities is not None and isinstance(node, exp.In) and node.this.name == "domain":
            entity = exp.column(CHANGE_EVENT_COLUMNS["entity_urn"])
            return entity.isin(*[exp.Literal.string(u) for u in domain_entities]) if domain_entities else exp.false()
        if isinstance(node, exp.Column) and node.name in CHANGE_EVENT_COLUMNS:
            return exp.column(CHANGE_EVENT_COLUMNS[node.name])
        return node

    return condition.transform(on_change_events)


def newest_domain_query(audit_table: str, entity_condition: exp.Expression | None = None) -> exp.Select:
    """Return the query of each entity's domain: the one on its newest audit row (every scoped read's rule).

    Publish sets a row's `domain` from the silver state's `domains` aspect, so the newest row holds the
    entity's domain as of the last publish: what the audit search filters on, and all a reader of gold
    can see. Rows of one timestamp: no domain first, then the smallest urn, so a tie never widens a scope
    and the answer does not depend on file order. One tree for Spark SQL, PostgreSQL and the server's
    read engine.

    Args:
        audit_table: the name the engine knows the audit rows by (a table or a view).
        entity_condition: which rows to read besides (say, the entities of a batch); None: all.

    Returns:
        SELECT entity_urn, "timestamp", domain: one row per entity with an audit row.
    """
    ranked = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column("entity_urn")],
        order=exp.Order(expressions=[
            exp.Ordered(this=exp.column("timestamp", quoted=True), desc=True, nulls_first=False),
            exp.Ordered(this=exp.column("domain"), desc=False, nulls_first=True),
        ]),
    )  # fmt: skip
    where = exp.column("entity_urn").is_(exp.null()).not_()
    if entity_condition is not None:
        where = exp.and_(where, entity_condition)
    # Quoted: `timestamp` is a keyword of PostgreSQL.
    columns = [exp.column("entity_urn"), exp.column("timestamp", quoted=True), exp.column("domain")]
    rows = (
        exp.select(*columns, exp.alias_(ranked, "recency"))
        .from_(exp.to_table(audit_table))
        .where(where)
    )
    newest = exp.select(*(column.copy() for column in columns))
    return newest.from_(rows.subquery("ranked")).where(exp.column("recency").eq(1))


@functools.lru_cache(maxsize=256)
def like_to_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of a SQL LIKE pattern (`%`, `_`, backslash escapes), matching whole texts."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            parts.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    return re.compile("".join(parts), re.DOTALL)


def mask_event(event: dict[str, Any]) -> dict[str, Any]:
    """Remove the sensitive fields of one audit event (`SENSITIVE_EVENT_FIELDS`)."""
    for name in SENSITIVE_EVENT_FIELDS:
        event.pop(name, None)
    return event


def visible_events(events: list[dict[str, Any]], principal: Principal) -> list[dict[str, Any]]:
    """The events as `principal` may see them: sensitive fields removed unless it has the sensitive role."""
    return events if principal.sees_sensitive else [mask_event(e) for e in events]


def scope_json(scope: Scope) -> dict[str, Any]:
    """The scope as stored with a token or a subscription (empty kinds left out)."""
    stored = {f.name: list(getattr(scope, f.name)) for f in fields(Scope) if f.name != "nothing" and getattr(scope, f.name)}
    return {**stored, "nothing": True} if scope.nothing else stored


def scope_from_json(data: Any, name: str) -> Scope:
    """Read a scope stored by `scope_json`.

    Raises:
        InputError: naming `name` for a value that is not such an object.
    """
    if data is None:
        return UNSCOPED
    if not isinstance(data, Mapping):
        raise InputError(f"{name}: expected a scope object, got {data!r}")
    known = {f.name for f in fields(Scope)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"{name}: unknown scope field(s) {unknown} (known: {', '.join(sorted(known))})")
    try:
        values = {k: (bool(v) if k == "nothing" else tuple(str(x) for x in v)) for k, v in data.items()}
    except TypeError:
        raise InputError(f"{name}: scope values must be lists of strings, got {data!r}") from None
    return replace(UNSCOPED, **values)
