"""Scoped BI roles over real psycopg logins: each sees the rows a token of its scope sees, nothing else.

The rows each role should see are computed here from delta-rs reads of the Delta tables, filtered in
Python by the scope kinds as docs/api.md defines them, not by the code under test.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg
import psycopg.conninfo
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from conf.settings import Settings
from conf.tables import table_location
from gold.scopes import SENSITIVE_EVENT_FIELDS
from pipelines.bi.access import SENSITIVE_COLUMNS
from pipelines.bi.cluster import writer_conninfo
from pipelines.bi.sync import sync_replica
from tests.pipelines.bi.conftest import overrides, reader_conninfo
from tests.pipelines.cli.test_cli import run_cli

pytestmark = pytest.mark.slow

FINANCE = "urn:li:domain:finance"
# name -> (scope options, sensitive, predicate over (entity urn, entity type, domain of the entity))
ROLES: dict[str, tuple[list[str], bool, Callable[[str | None, str | None, str | None], bool]]] = {
    "finance_bi": (["domain=" + FINANCE], False, lambda urn, kind, domain: domain == FINANCE),
    "postgres_datasets": (
        ["platform=postgres", "entity-type=dataset"], False,
        lambda urn, kind, domain: kind == "dataset" and urn is not None
        and ("urn:li:dataPlatform:postgres," in urn or re.match(r"urn:li:[^:]+:\(postgres,", urn) is not None),
    ),
    "dashboards_sensitive": (["prefix=urn:li:dashboard:"], True, lambda urn, kind, domain: (urn or "").startswith("urn:li:dashboard:")),
}  # fmt: skip


def _login(port: int, role: str) -> str:
    return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=port, dbname="lakehouse", user=role,
                                          password=f"{role}-pw", connect_timeout=5)  # fmt: skip


def _delta(settings: Settings, table_key: str, columns: list[str]) -> list[dict]:
    table = DeltaTable(str(table_location(settings, table_key)))
    return pa.RecordBatchReader.from_stream(table.scan(columns=columns)).read_all().to_pylist()


def _entity_domains(settings: Settings) -> dict[str, str | None]:
    """Each entity's domain: the one on its newest audit row (ties: no domain first), as docs/api.md says."""
    newest: dict[str, tuple] = {}
    for row in _delta(settings, "gold.audit_events", ["entity_urn", "timestamp", "domain"]):
        if row["entity_urn"] is None:
            continue
        rank = (-row["timestamp"], (0, "") if row["domain"] is None else (1, row["domain"]))
        if row["entity_urn"] not in newest or rank < newest[row["entity_urn"]][0]:
            newest[row["entity_urn"]] = (rank, row["domain"])
    return {urn: domain for urn, (_, domain) in newest.items()}


def _expected(settings: Settings, role: str) -> dict[str, set]:
    """The keys of the rows `role` should see in each table it may read."""
    visible = ROLES[role][2]
    domains = _entity_domains(settings)
    audit = _delta(settings, "gold.audit_events", ["event_id", "entity_urn", "entity_type", "domain"])
    changes = _delta(settings, "silver.entity_change_events", ["event_id", "aspect_entity_urn", "aspect_entity_type"])
    openmetadata = _delta(settings, "gold.openmetadata_change_events", ["id", "source_entity_urn", "source_entity_type"])
    state = _delta(settings, "silver.aspect_state", ["entity_urn", "entity_type", "aspect_name"])
    return {
        "gold.audit_events": {r["event_id"] for r in audit if visible(r["entity_urn"], r["entity_type"], r["domain"])},
        "silver.entity_change_events": {
            r["event_id"] for r in changes
            if visible(r["aspect_entity_urn"], r["aspect_entity_type"], domains.get(r["aspect_entity_urn"]))
        },
        "gold.openmetadata_change_events": {
            r["id"] for r in openmetadata
            if visible(r["source_entity_urn"], r["source_entity_type"], domains.get(r["source_entity_urn"]))
        },
        "silver.aspect_state": {
            (r["entity_urn"], r["aspect_name"]) for r in state if visible(r["entity_urn"], r["entity_type"], domains.get(r["entity_urn"]))
        },
    }  # fmt: skip


def _seen(port: int, role: str) -> dict[str, set]:
    with psycopg.connect(_login(port, role)) as conn:
        return {
            "gold.audit_events": {r[0] for r in conn.execute("SELECT event_id FROM gold.audit_events")},
            "silver.entity_change_events": {r[0] for r in conn.execute("SELECT event_id FROM silver.entity_change_events")},
            "gold.openmetadata_change_events": {r[0] for r in conn.execute("SELECT id FROM gold.openmetadata_change_events")},
            "silver.aspect_state": {tuple(r) for r in conn.execute("SELECT entity_urn, aspect_name FROM silver.aspect_state")},
        }  # fmt: skip


@pytest.fixture(scope="module")
def roles(replica, tmp_path_factory):
    """The ROLES added through `lakehouse sql-role add` on the package's server; yields (settings, port)."""
    settings, port, _ = replica
    folder = tmp_path_factory.mktemp("bi-roles")
    cli_overrides = [a for o in overrides(port) for a in ("--set", o)]
    for name, (scope, sensitive, _) in ROLES.items():
        password_file = folder / name
        password_file.write_text(f"{name}-pw\n")
        options = [o for spec in scope for o in ("--scope", spec)] + (["--sensitive"] if sensitive else [])
        run_cli(*cli_overrides, "sql-role", "add", name, *options, "--password-file", str(password_file), home=settings.home)
    yield settings, port


def test_each_scoped_role_sees_exactly_the_rows_of_its_scope(roles):
    settings, port = roles
    for role in ROLES:
        expected = _expected(settings, role)
        assert expected["gold.audit_events"], f"{role}: the fixture has audit rows in its scope"
        assert _seen(port, role) == expected, role
    with psycopg.connect(writer_conninfo(settings)) as conn:
        total = conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
    assert len(_expected(settings, "finance_bi")["gold.audit_events"]) < total


def test_a_scoped_role_counts_the_audit_rows_the_in_process_search_engine_finds_for_its_scope(roles):
    import time

    from gold.scopes import parse_scope
    from gold.search_request import SearchRequest
    from pipelines.serving.engine import InProcessEngine

    settings, port = roles
    engine = InProcessEngine(settings)
    now_ms = int(time.time() * 1000)
    for role, (scope, _, _) in ROLES.items():
        request = SearchRequest(start_time=0, end_time=now_ms, size=10000, include_raw=False, scope=parse_scope(scope))
        response = engine.search(request, now_ms)
        found = sorted((e["timestamp"], e["actorUrn"], e.get("entityUrn"), e["eventType"]) for e in response["usageEvents"])
        with psycopg.connect(_login(port, role)) as conn:
            seen = sorted(conn.execute(
                'SELECT "timestamp", actor_urn, entity_urn, event_type FROM gold.audit_events WHERE "timestamp" < %s', (now_ms,)
            ).fetchall())  # fmt: skip
        assert response["total"] == len(found), "the page holds every match"
        assert seen == found and found, role


def test_the_gold_views_are_narrowed_as_their_tables(roles):
    settings, port = roles
    expected = _expected(settings, "postgres_datasets")["silver.entity_change_events"]
    with psycopg.connect(_login(port, "postgres_datasets")) as conn:
        timeline = {r[0] for r in conn.execute("SELECT event_id FROM gold.change_timeline")}
        counted = conn.execute("SELECT coalesce(sum(events), 0) FROM gold.daily_change_counts").fetchone()[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM gold.actor_summary")  # per-actor activity: refused to a scope, as over HTTP
    assert timeline == expected and counted == len(expected)


def test_per_actor_aggregates_and_lineage_edges_are_refused_to_a_scoped_role(roles):
    _, port = roles
    for table in ("gold.actor_activity_daily", "gold.actor_anomalies", "gold.lineage_edges"):
        with psycopg.connect(_login(port, "finance_bi")) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT count(*) FROM {table}")


def test_sensitive_columns_need_the_sensitive_option(roles):
    _, port = roles
    assert set(SENSITIVE_COLUMNS) == set(SENSITIVE_EVENT_FIELDS)
    for column in SENSITIVE_COLUMNS.values():
        with psycopg.connect(_login(port, "finance_bi")) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT {column} FROM gold.audit_events")
    with psycopg.connect(_login(port, "dashboards_sensitive")) as conn:
        raw = conn.execute("SELECT count(raw_event) FROM gold.audit_events").fetchone()[0]
    assert raw > 0


def test_a_scoped_role_cannot_lift_its_policies_or_borrow_another_role(roles):
    _, port = roles
    attempts = [
        "ALTER TABLE gold.audit_events DISABLE ROW LEVEL SECURITY",
        "DROP POLICY scope_finance_bi ON gold.audit_events",
        "SET row_security = off; SELECT count(*) FROM gold.audit_events",
        "SELECT * FROM lakehouse_access.postgres_datasets_domain_entities()",
        "SELECT * FROM lakehouse_access.bi_roles",
        "SELECT rows FROM lakehouse_sync.table_versions",
        "SET ROLE bi_reader",
    ]
    for statement in attempts:
        with psycopg.connect(_login(port, "finance_bi"), autocommit=True) as conn:
            with pytest.raises(psycopg.Error):
                for part in statement.split("; "):
                    conn.execute(part)
    with psycopg.connect(_login(port, "finance_bi")) as conn:
        conn.execute("SET TRANSACTION READ WRITE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM gold.audit_events")


def test_policies_survive_a_swap_and_views_recreated_with_it(roles):
    settings, port = roles
    with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
        conn.execute("ALTER TABLE silver.entity_change_events DROP COLUMN source_file")  # an old replica's layout: copied whole
    synced = {r.table_key: r.mode for r in sync_replica(settings)}
    assert synced["silver.entity_change_events"] == "swap"
    assert _seen(port, "finance_bi") == _expected(settings, "finance_bi")
    with psycopg.connect(_login(port, "finance_bi")) as conn:
        timeline = conn.execute("SELECT count(*) FROM gold.change_timeline").fetchone()[0]
    assert timeline == len(_expected(settings, "finance_bi")["silver.entity_change_events"])


def test_an_entity_moved_to_another_domain_leaves_the_domain_scope_with_the_next_sync(roles):
    from deltalake import write_deltalake

    settings, port = roles
    location = str(table_location(settings, "gold.audit_events"))
    domains = _entity_domains(settings)
    changes = _expected(settings, "finance_bi")["silver.entity_change_events"]
    audit = DeltaTable(location).to_pyarrow_table()
    moved = next(u for u, d in sorted(domains.items()) if d == FINANCE and u in _change_entities(settings, changes))
    row = audit.filter(pa.compute.equal(audit["entity_urn"], moved)).slice(0, 1).to_pylist()[0]
    row.update(event_id="moved-to-sales", timestamp=pa.compute.max(audit["timestamp"]).as_py() + 1, domain="urn:li:domain:sales")
    write_deltalake(location, pa.Table.from_pylist([row], schema=audit.schema), mode="append")
    assert {r.table_key: r.mode for r in sync_replica(settings)}["gold.audit_events"] == "append"
    expected = _expected(settings, "finance_bi")
    assert expected["silver.entity_change_events"] < changes  # the moved entity's change events left the scope
    assert _seen(port, "finance_bi") == expected


def _change_entities(settings: Settings, event_ids: set) -> set:
    rows = _delta(settings, "silver.entity_change_events", ["event_id", "aspect_entity_urn"])
    return {r["aspect_entity_urn"] for r in rows if r["event_id"] in event_ids}


def test_roles_are_listed_and_removed(roles):
    settings, port = roles
    cli_overrides = [a for o in overrides(port) for a in ("--set", o)]
    listed = run_cli(*cli_overrides, "sql-role", "list", "--json", home=settings.home).stdout
    assert "finance_bi" in listed and "domain=" + FINANCE in listed
    run_cli(*cli_overrides, "sql-role", "remove", "dashboards_sensitive", home=settings.home)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(_login(port, "dashboards_sensitive")).close()
    with psycopg.connect(writer_conninfo(settings)) as conn:
        policies = conn.execute("SELECT count(*) FROM pg_policies WHERE policyname = 'scope_dashboards_sensitive'").fetchone()[0]
    assert policies == 0


def test_a_scoped_role_cannot_count_the_rows_of_whole_tables(roles):
    settings, port = roles
    counting = [
        "SELECT reltuples, relpages FROM pg_class WHERE relname = 'audit_events'",
        "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'audit_events'",
        "SELECT n_tup_ins FROM pg_stat_all_tables WHERE relname = 'audit_events'",
        "SELECT heap_blks_read FROM pg_statio_user_tables",
        "SELECT tup_inserted FROM pg_stat_database",
        "SELECT pg_stat_get_live_tuples('gold.audit_events'::regclass)",
        "SELECT pg_stat_get_tuples_inserted('gold.audit_events'::regclass)",
        "SELECT pg_relation_size('gold.audit_events')",
        "SELECT pg_total_relation_size('gold.audit_events')",
    ]
    for statement in counting:
        with psycopg.connect(_login(port, "finance_bi")) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
    with psycopg.connect(_login(port, "finance_bi")) as conn:
        # The catalog BI tools browse stays readable, and the column statistics of tables under row-level
        # security are hidden by PostgreSQL itself.
        names = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relnamespace = 'gold'::regnamespace")}
        assert "audit_events" in names
        assert conn.execute("SELECT count(*) FROM pg_stats WHERE schemaname IN ('gold', 'silver')").fetchone()[0] == 0
        # EXPLAIN cannot be refused: its estimates come from the whole table's statistics (docs/bi.md).
        plan = conn.execute("EXPLAIN (FORMAT JSON) SELECT event_id FROM gold.audit_events").fetchone()[0]
        assert plan[0]["Plan"]["Plan Rows"] >= 1
    with psycopg.connect(writer_conninfo(settings)) as conn:
        total = conn.execute("SELECT count(*) FROM gold.audit_events").fetchone()[0]
    with psycopg.connect(reader_conninfo(port)) as conn:  # bi_reader reads every row: it keeps the statistics
        assert conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'gold.audit_events'::regclass").fetchone()[0] > 0
        assert conn.execute("SELECT pg_stat_get_live_tuples('gold.audit_events'::regclass)").fetchone()[0] >= 0
        assert total > 0


def test_a_scoped_role_that_turns_read_only_off_still_cannot_write_anything(roles):
    _, port = roles
    writes = [
        "CREATE TEMP TABLE kept (x int)",
        "CREATE TABLE public.kept (x int)",
        "SELECT lo_create(0)",
        "SELECT lo_from_bytea(0, 'data')",
        "INSERT INTO gold.audit_events (event_id) VALUES ('forged')",
    ]
    for statement in writes:
        with psycopg.connect(_login(port, "finance_bi"), autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    for database in ("postgres", "template1"):
        with pytest.raises(psycopg.OperationalError, match="permission denied"):
            psycopg.connect(psycopg.conninfo.make_conninfo(_login(port, "finance_bi"), dbname=database)).close()


def test_a_role_that_changes_its_own_settings_or_password_gets_them_back(roles):
    import time

    _, port = roles
    with psycopg.connect(_login(port, "postgres_datasets"), autocommit=True) as conn:
        # PostgreSQL lets every role do this to itself; the server puts both back.
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("ALTER ROLE postgres_datasets SET default_transaction_read_only = off")
        conn.execute("ALTER ROLE postgres_datasets SET idle_in_transaction_session_timeout = 0")
        conn.execute("ALTER ROLE postgres_datasets PASSWORD 'chosen-by-the-role-1'")
    deadline = time.monotonic() + 20
    while True:
        try:
            with psycopg.connect(_login(port, "postgres_datasets")) as conn:
                read_only = conn.execute("SHOW default_transaction_read_only").fetchone()[0]
                idle = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0]
            if read_only == "on" and idle == "10min":
                break
        except psycopg.OperationalError:
            pass
        assert time.monotonic() < deadline, "the server did not put the role's settings and password back"
        time.sleep(0.5)
    changed = psycopg.conninfo.make_conninfo(_login(port, "postgres_datasets"), password="chosen-by-the-role-1")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(changed).close()


def test_bi_sessions_idle_in_a_transaction_are_ended_after_the_documented_time(roles):
    _, port = roles
    for login in (reader_conninfo(port), _login(port, "finance_bi")):
        with psycopg.connect(login) as conn:
            assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "10min"


def test_a_role_change_that_meets_an_open_transaction_says_so_in_one_line_and_changes_nothing(roles):
    settings, port = roles
    cli_overrides = [a for o in overrides(port) for a in ("--set", o)]
    reader = psycopg.connect(reader_conninfo(port))
    try:
        reader.execute("SELECT count(*) FROM gold.audit_events").fetchone()
        result = run_cli(*cli_overrides, "sql-role", "add", "blocked_bi", "--scope", "platform=hive", home=settings.home,
                         env={"LAKEHOUSE_BI_PASSWORD": "blocked-pw"}, check=False)  # fmt: skip
    finally:
        reader.close()
    assert result.returncode == 1
    assert result.stderr.startswith("error: sql-role: a BI session's open transaction held a replica table")
    assert len(result.stderr.strip().splitlines()) == 1
    with psycopg.connect(writer_conninfo(settings)) as conn:
        assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'blocked_bi'").fetchone()[0] == 0
