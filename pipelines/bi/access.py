"""Scoped BI roles: the HTTP API's access scopes as PostgreSQL login roles with row-level security.

A scoped role sees what a token of the same scope sees over HTTP. Every replicated table has row-level
security on; each role reads it through its own policy:

- `gold.audit_events`: the audit search's scope rule (`gold.scopes.scope_condition`) on the same columns;
- the change events (`silver.entity_change_events`, `gold.openmetadata_change_events`) and the aspect
  state tables: the rule over the entity whose aspect was written (`gold.scopes.change_event_condition`),
  an entity's domain being the one on its newest audit row, as the HTTP change search reads it;
- the per-actor aggregates (`gold.actor_activity_daily`, `gold.actor_anomalies`) and the views over them:
  not granted to a restricted role at all, as HTTP answers 403 to a scoped principal there.

The gold views run with the rights of the role reading them (`security_invoker`), so they are narrowed
by the same policies. Without `sensitive`, a role cannot read the columns HTTP leaves out without the
audit-read-sensitive role (source IP, user agent, raw event). bi_reader keeps reading everything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import sqlglot
from psycopg import Connection, sql
from sqlglot import exp

from conf.errors import ConfigError, InputError
from conf.tables import (
    ACTOR_ACTIVITY_DAILY,
    ACTOR_ANOMALIES,
    ASPECT_STATE,
    ASPECT_STATE_LOG,
    AUDIT_EVENTS,
    ENTITY_CHANGE_EVENTS,
    LINEAGE_EDGES,
    OPENMETADATA_CHANGE_EVENTS,
    table_spec,
)
from gold.scopes import (
    SENSITIVE_EVENT_FIELDS, Scope, change_event_condition, newest_domain_query, scope_condition, scope_from_json, scope_json,
)  # fmt: skip
from pipelines.bi.replica import (
    INVOKER_VIEWS_VERSION,
    READER_ROLE,
    REPLICA_SCHEMAS,
    STATE_TABLE,
    SYNC_LOCK_KEY,
    SYNC_SCHEMA,
    replica_column_names,
    replica_table,
    replicated_tables,
)
from pipelines.bi.lockdown import ACCESS_SCHEMA, VERIFIERS_TABLE, remember_verifier, set_role_defaults
from pipelines.runtime.views import VIEW_LAYER, load_views

ROLES_TABLE = "bi_roles"
# Each entity's domain (`gold.scopes.newest_domain_query`, as every scoped read decides it). Kept by the
# sync as audit rows arrive, so a domain-scoped query looks it up by domain.
ENTITY_DOMAINS = "entity_domains"
AUDIT_TABLE = AUDIT_EVENTS
# The HTTP API's sensitive audit fields -> their gold.audit_events columns.
SENSITIVE_COLUMNS = {"sourceIP": "source_ip", "userAgent": "user_agent", "rawUsageEvent": "raw_event"}
# Per-actor figures over every entity: no scope narrows them (HTTP: 403 for a scoped principal). A
# lineage edge names two entities, either of which may be outside the scope.
SCOPE_REFUSED_TABLES = (ACTOR_ACTIVITY_DAILY, ACTOR_ANOMALIES, LINEAGE_EDGES)
# Tables whose rows are matched by the entity whose aspect was written: its urn and type columns.
ASPECT_ENTITY_COLUMNS = {
    ENTITY_CHANGE_EVENTS: ("aspect_entity_urn", "aspect_entity_type"),
    OPENMETADATA_CHANGE_EVENTS: ("source_entity_urn", "source_entity_type"),
    ASPECT_STATE: ("entity_urn", "entity_type"),
    ASPECT_STATE_LOG: ("entity_urn", "entity_type"),
}
READER_POLICY = "bi_reader_all"
# The sync state a scoped role may read: versions and times, not the tables' whole row counts.
STATE_COLUMNS = ("table_key", "delta_version", "mode", "synced_at")
_ROLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_RESERVED_ROLES = {READER_ROLE, "lakehouse_admin", "postgres", "public"}


@dataclass(frozen=True)
class BiRole:
    """A named BI login role.

    Attributes:
        name: the PostgreSQL role.
        scope: the rows it sees (unrestricted: every row of every table).
        sensitive: whether it reads source IPs, user agents and raw events.
    """

    name: str
    scope: Scope
    sensitive: bool = False


def check_role_name(name: str) -> str:
    """Check a BI role name: lower-case letters, digits and `_`, starting with a letter, not a reserved role.

    Raises:
        InputError: naming the value.
    """
    if not _ROLE_NAME.fullmatch(name) or name in _RESERVED_ROLES or name.startswith("pg_"):
        raise InputError(
            f"NAME: {name!r} is not a BI role name (lower-case letters, digits and _, starting with a letter, "
            f"at most 40; not {', '.join(sorted(_RESERVED_ROLES))} or pg_*)"
        )
    return name


def domain_function(role: str) -> sql.Identifier:
    """The function returning the urns of the entities in `role`'s domains (only that role may call it)."""
    return sql.Identifier(ACCESS_SCHEMA, f"{role}_domain_entities")


def with_domain_as_entities(condition: exp.Expression, entity_urn: str, function: str) -> exp.Expression:
    """Rewrite the scope's `domain IN (...)` as `<entity_urn> IN (SELECT <function>())`: rows carry no domain."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.In) and node.this.name == "domain":
            return exp.column(entity_urn).isin(query=sqlglot.parse_one(f"SELECT {function}()", read="postgres"))
        return node

    return condition.transform(rewrite)


def with_columns_renamed(condition: exp.Expression, names: dict[str, str]) -> exp.Expression:
    """Rename the condition's columns (`names`: old -> new)."""
    return condition.transform(lambda n: exp.column(names[n.name]) if isinstance(n, exp.Column) and n.name in names else n)


def row_condition(role: BiRole, table_key: str) -> str | None:
    """The PostgreSQL condition of the rows of `table_key` the role sees (None: every row; refused tables too).

    Args:
        role: the BI role.
        table_key: a replicated table's registry key.
    """
    if table_key == AUDIT_TABLE:
        condition = scope_condition(role.scope)
    elif table_key in ASPECT_ENTITY_COLUMNS:
        condition = change_event_condition(role.scope)
        if condition is not None:
            urn, kind = ASPECT_ENTITY_COLUMNS[table_key]
            condition = with_columns_renamed(condition, {"aspect_entity_urn": urn, "aspect_entity_type": kind})
            function = f"{ACCESS_SCHEMA}.{role.name}_domain_entities"
            condition = with_domain_as_entities(condition, urn, function)
    else:
        condition = None
    return None if condition is None else condition.sql(dialect="postgres")


def readable_tables(role: BiRole) -> list[str]:
    """The replicated tables the role may read: all, less the per-actor aggregates for a restricted scope."""
    return [k for k in replicated_tables() if not (role.scope.restricted and k in SCOPE_REFUSED_TABLES)]


def readable_views(role: BiRole) -> list[str]:
    """The gold views whose every table the role may read."""
    allowed = {f"{table_spec(k).layer}.{table_spec(k).name}" for k in readable_tables(role)}
    views = []
    for view in load_views():
        tables = {f"{t.db}.{t.name}" for t in sqlglot.parse_one(view.select_sql, read="spark").find_all(exp.Table) if t.db}
        if tables <= allowed:
            views.append(view.name)
    return views


def prepare_access_schema(conn: Connection) -> None:
    """Create the schema and table the BI roles are kept in (readable by the writer alone)."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(ACCESS_SCHEMA)))
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (role_name text PRIMARY KEY, scope jsonb NOT NULL, sensitive boolean NOT NULL, "
        "updated_at timestamptz NOT NULL)"
    ).format(sql.Identifier(ACCESS_SCHEMA, ROLES_TABLE)))  # fmt: skip
    conn.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM PUBLIC").format(sql.Identifier(ACCESS_SCHEMA)))


def bi_roles(conn: Connection) -> list[BiRole]:
    """The named BI roles, by name (none before the first is added)."""
    exists = conn.execute("SELECT to_regclass(%s)", (f"{ACCESS_SCHEMA}.{ROLES_TABLE}",)).fetchone()[0]
    if exists is None:
        return []
    rows = conn.execute(sql.SQL("SELECT role_name, scope, sensitive FROM {} ORDER BY role_name").format(
        sql.Identifier(ACCESS_SCHEMA, ROLES_TABLE)
    )).fetchall()  # fmt: skip
    return [BiRole(name, scope_from_json(scope, f"{ROLES_TABLE}.{name}"), sensitive) for name, scope, sensitive in rows]


def existing_tables(conn: Connection) -> list[str]:
    """The replicated tables (registry keys) the replica has."""
    found = {r[0] for r in conn.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = ANY(%s) AND c.relkind = 'r'", (list(REPLICA_SCHEMAS),),
    )}  # fmt: skip
    return [k for k in replicated_tables() if f"{table_spec(k).layer}.{table_spec(k).name}" in found]


def apply_access(conn: Connection, table_keys: list[str] | tuple[str, ...] | None = None) -> None:
    """Turn row-level security on and (re)write each role's policy and grants on the tables and every view.

    Inside the caller's transaction; a swap calls it for the table it swapped in (and the views it recreated).

    Args:
        table_keys: the tables to apply it to (default: every replicated table that exists).
    """
    roles = bi_roles(conn)
    reader = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone() is not None
    keys = replicated_tables() if table_keys is None else table_keys
    existing = existing_tables(conn)
    for key in (k for k in keys if k in existing):
        table = replica_table(key)
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(table))
        if reader:
            # A table moved in from the stage schema has none of the schema's default privileges.
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(table, sql.Identifier(READER_ROLE)))
            _replace_policy(conn, table, READER_POLICY, READER_ROLE, None)
        for role in roles:
            _grant_table(conn, role, key)
    created_views = {r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'v'",
        (VIEW_LAYER,),
    )}  # fmt: skip
    if conn.execute("SELECT to_regclass('privacy.identities')").fetchone()[0] is not None:
        grant_identities(conn, "privacy", sql.Identifier("privacy", "identities"))
    for role in roles:
        views = set(readable_views(role))
        for view in (v for v in load_views() if v.name in created_views):
            verb = "GRANT SELECT ON {} TO {}" if view.name in views else "REVOKE ALL ON {} FROM {}"
            conn.execute(sql.SQL(verb).format(sql.Identifier(VIEW_LAYER, view.name), sql.Identifier(role.name)))


def grant_identities(conn: Connection, schema: str, table: sql.Identifier) -> None:
    """Let bi_reader and each unrestricted role that sees sensitive fields read the identities table; no one else.

    Inside the caller's transaction. An identity is not narrowed by entity, so a scoped role never reads it.
    """
    readers = [READER_ROLE] if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone() else []
    for role in bi_roles(conn):
        allowed = role.sensitive and not role.scope.restricted
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(table, sql.Identifier(role.name)))
        if allowed:
            readers.append(role.name)
    for name in readers:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(name)))
        conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(table, sql.Identifier(name)))


def _replace_policy(conn: Connection, table: sql.Identifier, policy: str, role: str, condition: str | None) -> None:
    conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(policy), table))
    conn.execute(sql.SQL("CREATE POLICY {} ON {} FOR SELECT TO {} USING ({})").format(
        sql.Identifier(policy), table, sql.Identifier(role), sql.SQL(condition or "true")
    ))  # fmt: skip


def _grant_table(conn: Connection, role: BiRole, table_key: str) -> None:
    table, name = replica_table(table_key), sql.Identifier(role.name)
    conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(table, name))
    conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(f"scope_{role.name}"), table))
    if table_key not in readable_tables(role):
        return
    hidden = set() if role.sensitive or table_key != AUDIT_TABLE else set(SENSITIVE_COLUMNS.values())
    columns = [c for c in replica_column_names(table_key) if c not in hidden]
    conn.execute(sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(sql.SQL(", ").join(map(sql.Identifier, columns)), table, name))
    _replace_policy(conn, table, f"scope_{role.name}", role.name, row_condition(role, table_key))


def _domain_entities_sql(conn: Connection, domains: tuple[str, ...]) -> str:
    """The urns of the entities whose newest audit row names one of `domains` (kept in ENTITY_DOMAINS)."""
    literals = ", ".join(sql.Literal(d).as_string(conn) for d in domains) or "NULL"
    return f"SELECT entity_urn FROM {ACCESS_SCHEMA}.{ENTITY_DOMAINS} WHERE domain IN ({literals})"


def refresh_entity_domains(conn: Connection, entity_urns: set[str] | None) -> None:
    """Bring the newest domain of entities up to date from the replica's gold.audit_events.

    Kept only once a role has been saved (the table exists); inside the caller's transaction, so BI
    queries see it change with the audit rows.

    Args:
        entity_urns: the entities with new audit rows (an append), or None to rebuild it (a copy of
            the whole table, rewritten partitions).
    """
    table = sql.Identifier(ACCESS_SCHEMA, ENTITY_DOMAINS)
    if conn.execute("SELECT to_regclass(%s)", (f"{ACCESS_SCHEMA}.{ENTITY_DOMAINS}",)).fetchone()[0] is None:
        return
    if entity_urns is None:
        # DELETE, not TRUNCATE: a BI session's open transaction may hold this table (through its scope's
        # lookup function), and TRUNCATE would wait for it.
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
        conn.execute(sql.SQL("INSERT INTO {} {}").format(table, sql.SQL(newest_domain_query(AUDIT_EVENTS).sql("postgres"))))
        return
    urns = sorted(u for u in entity_urns if u is not None)
    if urns:
        of_entities = exp.column("entity_urn").eq(exp.Anonymous(this="ANY", expressions=[exp.Placeholder()]))
        conn.execute(sql.SQL(
            'INSERT INTO {} {} ON CONFLICT (entity_urn) DO UPDATE SET "timestamp" = EXCLUDED."timestamp", domain = EXCLUDED.domain'
        ).format(table, sql.SQL(newest_domain_query(AUDIT_EVENTS, of_entities).sql("postgres"))), (urns,))  # fmt: skip


def prepare_entity_domains(conn: Connection) -> None:
    """Create and fill the newest domain of each entity when missing (the domain scopes' lookup)."""
    table = sql.Identifier(ACCESS_SCHEMA, ENTITY_DOMAINS)
    if conn.execute("SELECT to_regclass(%s)", (f"{ACCESS_SCHEMA}.{ENTITY_DOMAINS}",)).fetchone()[0] is not None:
        return
    # Unlogged as the replica it is derived from: emptied with it after a crash, rebuilt by the copy.
    conn.execute(sql.SQL(
        'CREATE UNLOGGED TABLE {} (entity_urn text PRIMARY KEY, "timestamp" bigint, domain text)'
    ).format(table))  # fmt: skip
    conn.execute(sql.SQL("CREATE INDEX ON {} (domain)").format(table))
    conn.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(table))
    if AUDIT_EVENTS in existing_tables(conn):
        refresh_entity_domains(conn, None)


def save_role(conn: Connection, role: BiRole, password: str | None, idle_transaction_timeout_seconds: int) -> None:
    """Create or update a scoped BI role: LOGIN, SELECT only, read-only sessions; then its policies and grants.

    The password travels as a SCRAM verifier computed here, never as plain text in SQL. Session defaults
    as bi_reader's (`set_role_defaults`).

    Raises:
        ConfigError: when the role is new and no password is given, or PostgreSQL is older than 15.
    """
    if conn.info.server_version < INVOKER_VIEWS_VERSION:
        raise ConfigError(f"bi roles: PostgreSQL {conn.info.server_version // 10000} lacks security_invoker views (15+ needed)")
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role.name,)).fetchone() is not None
    known = any(r.name == role.name for r in bi_roles(conn))
    if exists and not known:
        raise ConfigError(f"NAME: {role.name!r} is a PostgreSQL role the lakehouse did not create; choose another name")
    if not exists and not password:
        raise ConfigError(f"{role.name} password: not given; pass --password-file FILE or set LAKEHOUSE_BI_PASSWORD")
    name = sql.Identifier(role.name)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SYNC_LOCK_KEY,))
        prepare_access_schema(conn)
        prepare_entity_domains(conn)
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS").format(name))
        if password:
            verifier = conn.pgconn.encrypt_password(password.encode(), role.name.encode(), b"scram-sha-256").decode()
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(name, sql.Literal(verifier)))
            remember_verifier(conn, role.name, verifier)
        set_role_defaults(conn, role.name, idle_transaction_timeout_seconds)
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(conn.info.dbname), name))
        for schema in (*REPLICA_SCHEMAS, SYNC_SCHEMA, ACCESS_SCHEMA):
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), name))
        conn.execute(sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(
            sql.SQL(", ").join(map(sql.Identifier, STATE_COLUMNS)), sql.Identifier(SYNC_SCHEMA, STATE_TABLE), name
        ))  # fmt: skip
        conn.execute(sql.SQL(
            "INSERT INTO {} (role_name, scope, sensitive, updated_at) VALUES (%s, %s, %s, now()) ON CONFLICT (role_name) "
            "DO UPDATE SET scope = EXCLUDED.scope, sensitive = EXCLUDED.sensitive, updated_at = EXCLUDED.updated_at"
        ).format(sql.Identifier(ACCESS_SCHEMA, ROLES_TABLE)),
            (role.name, json.dumps(scope_json(role.scope)), role.sensitive),
        )  # fmt: skip
        # SECURITY DEFINER: it reads the domains of every entity (an entity's newest audit row may be outside
        # the scope); it takes no argument and only this role may run it, so it tells the role nothing beyond
        # its own domains.
        function = domain_function(role.name)
        conn.execute(sql.SQL(
            "CREATE OR REPLACE FUNCTION {}() RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER "
            "SET search_path = pg_catalog, pg_temp AS {}"
        ).format(function, sql.Literal(_domain_entities_sql(conn, role.scope.domains))))  # fmt: skip
        conn.execute(sql.SQL("REVOKE ALL ON FUNCTION {}() FROM PUBLIC").format(function))
        conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {}() TO {}").format(function, name))
        apply_access(conn)


def remove_role(conn: Connection, name: str) -> bool:
    """Drop a BI role, its policies, grants and function; return whether it existed.

    Raises:
        ConfigError: when PostgreSQL refuses (the role still has sessions' objects elsewhere, say).
    """
    if not any(r.name == name for r in bi_roles(conn)):
        return False
    role = sql.Identifier(name)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SYNC_LOCK_KEY,))
        for key in existing_tables(conn):
            conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(f"scope_{name}"), replica_table(key)))
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(domain_function(name)))
        conn.execute(sql.SQL("DELETE FROM {} WHERE role_name = %s").format(sql.Identifier(ACCESS_SCHEMA, ROLES_TABLE)), (name,))
        if conn.execute("SELECT to_regclass(%s)", (f"{ACCESS_SCHEMA}.{VERIFIERS_TABLE}",)).fetchone()[0] is not None:
            conn.execute(sql.SQL("DELETE FROM {} WHERE role_name = %s").format(sql.Identifier(ACCESS_SCHEMA, VERIFIERS_TABLE)), (name,))
        conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
        conn.execute(sql.SQL("DROP ROLE {}").format(role))
    return True
