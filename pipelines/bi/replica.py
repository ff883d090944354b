"""The replica's layout in PostgreSQL: tables with mapped types, search indexes, the gold views, the reader role.

Gold and the silver tables the gold views read are copied into schemas `gold` and `silver`, whatever the
lakehouse's own catalog and schema names are, so BI users see one stable layout. Replica tables are
UNLOGGED: they are rebuilt from Delta at will, and after a crash PostgreSQL empties them together with
the sync state (also unlogged), so the next sync copies everything again.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import sqlglot
from psycopg import Connection, sql
from sqlglot import exp

from conf.errors import ConfigError
from conf.settings import Settings
from conf.settings_sections import CatalogSettings
from conf.tables import TABLES, table_spec
from pipelines.runtime.views import VIEW_LAYER, ViewSpec, load_views, qualify_select

READER_ROLE = "bi_reader"
SYNC_SCHEMA = "lakehouse_sync"
# One sync (or change of BI roles) at a time per replica database: the server's own loop, a publish and
# `sql-role` may all start one.
SYNC_LOCK_KEY = 0x4C48_4249  # "LHBI"
STATE_TABLE = "table_versions"
REPLICA_SCHEMAS = ("gold", "silver")
# The columns BI tools filter on (time, actor, entity, type) and the partition column deletes use; "a, b"
# is one index on both. Audit events per actor and day (the first chart of a dashboard) are counted from
# the (event_date, actor_urn) index alone once the table's pages are all-visible.
SEARCH_INDEXES = {
    "gold.audit_events": ("timestamp", "actor_urn", "entity_urn", "event_type", "event_date, actor_urn"),
    "gold.actor_activity_daily": ("activity_date", "actor_urn"),
    "gold.openmetadata_change_events": ("timestamp", "user_name", "entity_urn", "event_type", "event_date"),
    "gold.actor_anomalies": ("window_start", "actor", "kind", "window_date"),
    "silver.entity_change_events": ("event_time", "actor", "entity_urn", "category", "event_date"),
    "silver.aspect_state": ("entity_urn", "aspect_name"),
    "silver.aspect_state_log": ("entity_urn", "aspect_name"),
}
_SCALAR_TYPES = {
    "STRING": "text",
    "BIGINT": "bigint",
    "INT": "integer",
    "INTEGER": "integer",
    "SMALLINT": "smallint",
    "DOUBLE": "double precision",
    "FLOAT": "real",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamptz",
    "TIMESTAMP_NTZ": "timestamp",
    "BINARY": "bytea",
}
JSON_TYPE_PREFIXES = ("MAP<", "STRUCT<", "ARRAY<")
INVOKER_VIEWS_VERSION = 150000  # PostgreSQL 15: views with security_invoker


@functools.cache
def replicated_tables() -> tuple[str, ...]:
    """Every gold table, then the silver tables the gold views read (registry keys, in that order).

    Parsed once per process: the views are files shipped with the code, and a sync runs every few seconds.
    """
    gold = [key for key, spec in TABLES.items() if spec.layer == "gold"]
    silver = {
        f"{table.db}.{table.name}"
        for view in load_views()
        for table in sqlglot.parse_one(view.select_sql, read="spark").find_all(exp.Table)
        if table.db == "silver"
    }
    return (*gold, *sorted(silver))


def postgres_type(spark_type: str) -> str:
    """Return the PostgreSQL type of a Spark SQL column type: maps, structs and arrays as jsonb.

    Raises:
        ConfigError: for a type with no mapping.
    """
    upper = spark_type.strip().upper()
    if upper.startswith(JSON_TYPE_PREFIXES):
        return "jsonb"
    decimal = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", upper)
    if decimal:
        return f"numeric({decimal.group(1)},{decimal.group(2)})"
    if upper not in _SCALAR_TYPES:
        raise ConfigError(f"spark_type: {spark_type!r} has no PostgreSQL mapping")
    return _SCALAR_TYPES[upper]


def is_json_column(spark_type: str) -> bool:
    """Whether a column of this Spark type is stored as jsonb (its values are sent as JSON text)."""
    return spark_type.strip().upper().startswith(JSON_TYPE_PREFIXES)


def replica_table(table_key: str, suffix: str = "") -> sql.Identifier:
    """The replica table of a registry key: `<layer>.<name><suffix>`."""
    spec = table_spec(table_key)
    return sql.Identifier(spec.layer, spec.name + suffix)


def create_table_sql(table_key: str, suffix: str = "") -> sql.Composed:
    """`CREATE UNLOGGED TABLE` for a replicated table, its columns typed for PostgreSQL."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(postgres_type(kind)))
        for name, kind in table_spec(table_key).column_types
    )
    return sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(replica_table(table_key, suffix), columns)


def search_indexes(table_key: str) -> list[tuple[str, ...]]:
    """The columns of each search index of the table (those whose columns it has)."""
    names = set(table_spec(table_key).column_names)
    indexes = [tuple(c.strip() for c in entry.split(",")) for entry in SEARCH_INDEXES.get(table_key, ())]
    return [columns for columns in indexes if set(columns) <= names]


def index_name(table_key: str, columns: tuple[str, ...], suffix: str = "") -> str:
    """The name of a search index: `<table>_<columns>_idx<suffix>` (PostgreSQL keeps 63 bytes of it)."""
    return f"{table_spec(table_key).name}_{'_'.join(columns)}_idx{suffix}"[:63]


def create_indexes_sql(table_key: str, suffix: str = "") -> list[sql.Composed]:
    """One b-tree index per search index of the table."""
    return [
        sql.SQL("CREATE INDEX {} ON {} ({})").format(
            sql.Identifier(index_name(table_key, columns, suffix)), replica_table(table_key, suffix),
            sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        )  # fmt: skip
        for columns in search_indexes(table_key)
    ]


def with_timestamp_millis_as_to_timestamp(tree: exp.Expression) -> exp.Expression:
    """Rewrite Spark's `timestamp_millis(ms)` (no PostgreSQL function) as `to_timestamp(ms / 1000.0)`."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == "timestamp_millis":
            millis = node.expressions[0]
            return exp.func("to_timestamp", exp.Div(this=exp.paren(millis, copy=False), expression=exp.Literal.number("1000.0")))
        return node

    return tree.transform(rewrite)


def with_json_paths_on_json(tree: exp.Expression) -> exp.Expression:
    """Cast the text argument of `get_json_object` to json: PostgreSQL's path functions take json, not text."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.JSONExtractScalar, exp.JSONExtract)) and not isinstance(node.this, exp.Cast):
            node.set("this", exp.cast(node.this, "json"))
        return node

    return tree.transform(rewrite)


def view_select_sql(settings: Settings, view: ViewSpec) -> str:
    """The view's SELECT in the postgres dialect, reading the replica's `gold` / `silver` schemas.

    Raises:
        ConfigError: when the SQL does not parse or names an undeclared table (qualify_select's checks).
    """
    plain = dataclasses.replace(settings, catalog=CatalogSettings())
    tree = qualify_select(plain, view)
    for rule in (with_timestamp_millis_as_to_timestamp, with_json_paths_on_json):
        tree = rule(tree)
    return tree.sql(dialect="postgres", pretty=True)


def create_views(conn: Connection, settings: Settings) -> None:
    """(Re)create every gold view, in file-name order, inside the caller's transaction.

    From PostgreSQL 15 the views read with the rights of the role querying them (`security_invoker`), so
    the tables' row-level security narrows them as it narrows the tables (a view otherwise reads as its owner).
    """
    invoker = sql.SQL(" WITH (security_invoker = true)" if conn.info.server_version >= INVOKER_VIEWS_VERSION else "")
    for view in load_views():
        name = sql.Identifier(VIEW_LAYER, view.name)
        conn.execute(sql.SQL("DROP VIEW IF EXISTS {} CASCADE").format(name))
        conn.execute(sql.SQL("CREATE VIEW {}{} AS {}").format(name, invoker, sql.SQL(view_select_sql(settings, view))))


def prepare_schemas(conn: Connection, settings: Settings) -> bool:
    """Create the schemas, the sync state table, every missing replica table (empty) and the views.

    Objects the connected role creates in these schemas later are readable by bi_reader (default privileges).

    Returns:
        Whether a table or the views were (re)created (their row-level security is then to be applied).
    """
    with conn.transaction():
        for schema in (*REPLICA_SCHEMAS, SYNC_SCHEMA):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE UNLOGGED TABLE IF NOT EXISTS {} (table_key text PRIMARY KEY, delta_version bigint NOT NULL, "
                "rows bigint NOT NULL, mode text NOT NULL, synced_at timestamptz NOT NULL)"
            ).format(sql.Identifier(SYNC_SCHEMA, STATE_TABLE))
        )
        existing = dict(conn.execute(
            "SELECT n.nspname || '.' || c.relname, array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'v') AND a.attnum > 0 AND NOT a.attisdropped GROUP BY 1",
            (list(REPLICA_SCHEMAS),),
        ).fetchall())  # fmt: skip
        created = False
        for key in replicated_tables():
            columns = existing.get(key)
            if columns is None:
                conn.execute(create_table_sql(key))
                for statement in create_indexes_sql(key):
                    conn.execute(statement)
                created = True
            if columns != list(table_spec(key).column_names):
                # New, or declared with other columns since it was copied (a lakehouse upgrade): copy it whole.
                conn.execute(sql.SQL("DELETE FROM {} WHERE table_key = %s").format(sql.Identifier(SYNC_SCHEMA, STATE_TABLE)), (key,))
        missing_views = [v.name for v in load_views() if f"{VIEW_LAYER}.{v.name}" not in existing]
        if conn.info.server_version >= INVOKER_VIEWS_VERSION:
            # Views made by an earlier version read as their owner, past the row-level security of scoped roles.
            missing_views += [r[0] for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                "AND c.relkind = 'v' AND NOT coalesce('security_invoker=true' = ANY(c.reloptions), false)", (VIEW_LAYER,),
            )]  # fmt: skip
        if created or missing_views:
            create_views(conn, settings)
        return bool(created or missing_views)


def prepare_reader(conn: Connection, password: str | None) -> None:
    """Create or update the read-only role bi_reader: SELECT on the replica only, read-only transactions.

    The password travels as a SCRAM verifier computed here, never as plain text in SQL.

    Raises:
        ConfigError: when the role does not exist yet and no password is given.
    """
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone()
    if not exists and not password:
        raise ConfigError(
            f"{READER_ROLE} password: not given; pass --password-file FILE or set LAKEHOUSE_BI_PASSWORD "
            "(never on the command line)"
        )
    role = sql.Identifier(READER_ROLE)
    database = conn.info.dbname
    with conn.transaction():
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT").format(role))
        if password:
            verifier = conn.pgconn.encrypt_password(password.encode(), READER_ROLE.encode(), b"scram-sha-256")
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(verifier.decode())))
        conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role))
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(database)))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), role))
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
        for schema in (*REPLICA_SCHEMAS, SYNC_SCHEMA):
            name = sql.Identifier(schema)
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(name, role))
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(name, role))
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(name, role))
