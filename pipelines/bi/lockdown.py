"""What BI roles cannot reach beyond their grants: table statistics, write paths, their own settings and password.

Row-level security narrows the rows a scoped role reads, but PostgreSQL shows every role more than its
grants: each table's row count (`pg_class.reltuples`, the statistics views and functions, the size
functions), a way to store data no grant covers (large objects), and ALTER ROLE on itself (its session
defaults, such as `default_transaction_read_only`, and its password). On a server where the sync's role
is a superuser (the managed one) these are closed: the statistics are revoked from PUBLIC and granted to
bi_reader alone (it reads every row anyway), large objects cannot be created, and each sync puts back
the settings and password of a role that changed its own. EXPLAIN's estimates cannot be refused: they
are derived from the whole table's statistics (docs/bi.md says what they show).
"""

from __future__ import annotations

from psycopg import Connection, sql

ACCESS_SCHEMA = "lakehouse_access"
VERIFIERS_TABLE = "role_verifiers"
# pg_class columns that count a table's rows and pages.
COUNTING_CLASS_COLUMNS = ("reltuples", "relpages", "relallvisible")
STATISTICS_VIEWS = (
    "pg_stat_all_tables", "pg_stat_user_tables", "pg_stat_sys_tables", "pg_stat_xact_all_tables",
    "pg_stat_xact_user_tables", "pg_stat_xact_sys_tables", "pg_statio_all_tables", "pg_statio_user_tables",
    "pg_statio_sys_tables", "pg_stat_all_indexes", "pg_stat_user_indexes", "pg_stat_sys_indexes",
    "pg_statio_all_indexes", "pg_statio_user_indexes", "pg_statio_sys_indexes", "pg_stat_database",
)  # fmt: skip
SIZE_FUNCTIONS = ("pg_relation_size", "pg_table_size", "pg_indexes_size", "pg_total_relation_size", "pg_database_size")
LARGE_OBJECT_CREATORS = ("lo_create", "lo_creat", "lo_from_bytea")
# Databases every role may connect to after initdb: their statistics views count the replica's database too.
OTHER_DATABASES = ("postgres", "template1")


def is_superuser(conn: Connection) -> bool:
    """Whether the connected role is a superuser (the managed server's sync role; rarely a bi.dsn role)."""
    return conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]


def role_defaults(idle_transaction_timeout_seconds: int) -> list[str]:
    """A BI role's session defaults as pg_db_role_setting keeps them (`name=value`)."""
    defaults = ["default_transaction_read_only=on"]
    if idle_transaction_timeout_seconds > 0:
        defaults.append(f"idle_in_transaction_session_timeout={idle_transaction_timeout_seconds}s")
    return defaults


def set_role_defaults(conn: Connection, role: str, idle_transaction_timeout_seconds: int) -> None:
    """Give a BI role its session defaults (and no other): read-only transactions, idle transactions ended."""
    name = sql.Identifier(role)
    conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(name))
    for setting in role_defaults(idle_transaction_timeout_seconds):
        key, value = setting.split("=", 1)
        conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(name, sql.Identifier(key), sql.Literal(value)))


def close_side_doors(conn: Connection, reader_role: str) -> bool:
    """Revoke table statistics and large-object creation from PUBLIC (`reader_role`, reading every row, keeps the statistics).

    Catalog privileges belong to the superuser: on a server where the sync's role is not one (bi.dsn),
    nothing is changed.

    Returns:
        Whether they were closed.
    """
    if not is_superuser(conn):
        return False
    reader = sql.Identifier(reader_role)
    kept = [r[0] for r in conn.execute(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = 'pg_catalog.pg_class'::regclass AND attnum > 0 "
        "AND NOT attisdropped AND attname <> ALL(%s) ORDER BY attnum", (list(COUNTING_CLASS_COLUMNS),),
    )]  # fmt: skip
    conn.execute("REVOKE SELECT ON pg_catalog.pg_class FROM PUBLIC")
    conn.execute(sql.SQL("GRANT SELECT ({}) ON pg_catalog.pg_class TO PUBLIC").format(sql.SQL(", ").join(map(sql.Identifier, kept))))
    conn.execute(sql.SQL("GRANT SELECT ON pg_catalog.pg_class TO {}").format(reader))
    for view in STATISTICS_VIEWS:
        conn.execute(sql.SQL("REVOKE SELECT ON {} FROM PUBLIC").format(sql.Identifier("pg_catalog", view)))
        conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier("pg_catalog", view), reader))
    counting = [r[0] for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace "
        "AND ((p.proname LIKE 'pg\\_stat\\_get\\_%%' AND p.pronargs = 1 AND p.proargtypes[0] = 'oid'::regtype) "
        "OR p.proname = ANY(%s))", (list(SIZE_FUNCTIONS),),
    )]  # fmt: skip
    for function in counting:
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(sql.SQL(function)))
        conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(sql.SQL(function), reader))
    creators = [r[0] for r in conn.execute(
        "SELECT oid::regprocedure::text FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace AND proname = ANY(%s)",
        (list(LARGE_OBJECT_CREATORS),),
    )]  # fmt: skip
    for function in creators:
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(sql.SQL(function)))
    for database in OTHER_DATABASES:
        conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(sql.Identifier(database)))
    return True


def remember_verifier(conn: Connection, role: str, verifier: str) -> None:
    """Keep the SCRAM verifier the lakehouse gave `role` (readable by the sync's role alone), to put it back."""
    table = sql.Identifier(ACCESS_SCHEMA, VERIFIERS_TABLE)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(ACCESS_SCHEMA)))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (role_name text PRIMARY KEY, verifier text NOT NULL)").format(table))
    conn.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(table))
    conn.execute(sql.SQL(
        "INSERT INTO {} VALUES (%s, %s) ON CONFLICT (role_name) DO UPDATE SET verifier = EXCLUDED.verifier"
    ).format(table), (role, verifier))  # fmt: skip


def restore_roles(conn: Connection, roles: list[str], idle_transaction_timeout_seconds: int) -> list[str]:
    """Put back the session defaults and password of BI roles that changed their own (ALTER ROLE on itself).

    PostgreSQL lets every role change its own session defaults and password; neither can be refused, so
    each sync undoes it. Needs a superuser (pg_authid); elsewhere nothing is checked.

    Returns:
        What was put back, one `role: what` each.
    """
    if not roles or not is_superuser(conn):
        return []
    expected = sorted(role_defaults(idle_transaction_timeout_seconds))
    restored = []
    settings = conn.execute(
        "SELECT r.rolname, s.setdatabase, s.setconfig FROM pg_roles r JOIN pg_db_role_setting s ON s.setrole = r.oid "
        "WHERE r.rolname = ANY(%s)", (roles,),
    ).fetchall()  # fmt: skip
    own = {name: sorted(config or []) for name, database, config in settings if database == 0}
    for name, database, _ in settings:
        if database != 0:
            dbname = conn.execute("SELECT datname FROM pg_database WHERE oid = %s", (database,)).fetchone()[0]
            conn.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(sql.Identifier(name), sql.Identifier(dbname)))
            restored.append(f"{name}: its settings in database {dbname}")
    for name in roles:
        if own.get(name, []) != expected:
            set_role_defaults(conn, name, idle_transaction_timeout_seconds)
            restored.append(f"{name}: its session defaults")
    if conn.execute("SELECT to_regclass(%s)", (f"{ACCESS_SCHEMA}.{VERIFIERS_TABLE}",)).fetchone()[0] is not None:
        changed = conn.execute(sql.SQL(
            "SELECT v.role_name, v.verifier FROM {} v JOIN pg_authid a ON a.rolname = v.role_name "
            "WHERE v.role_name = ANY(%s) AND a.rolpassword IS DISTINCT FROM v.verifier"
        ).format(sql.Identifier(ACCESS_SCHEMA, VERIFIERS_TABLE)), (roles,)).fetchall()  # fmt: skip
        for name, verifier in changed:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(name), sql.Literal(verifier)))
            restored.append(f"{name}: its password")
    return restored
