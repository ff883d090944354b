"""The replica's `privacy.identities` over real psycopg logins: who may read it, and an erasure's next sync.

A pseudonymised home is synced into a database of its own on the package's server; the identities the
roles read are compared with the people landed, and after an erasure no table of that database holds
the erased person's identity, source IP or user agent.
"""

from __future__ import annotations

import dataclasses

import psycopg
import psycopg.conninfo
import pytest

from gold.scopes import parse_scope
from pipelines.bi.access import BiRole, save_role
from pipelines.bi.cluster import writer_conninfo
from pipelines.bi.replica import prepare_reader
from pipelines.bi.sync import sync_replica
from pipelines.privacy.display import person_pseudonym
from pipelines.privacy.identities import ERASED_SUBJECT
from pipelines.serving.erasure import erase_person
from tests.pipelines.bi.conftest import PASSWORD
from tests.pipelines.privacy.people import ERASED, ERASED_AGENT, ERASED_IP, KEPT, KEPT_IP, landed_home

pytestmark = pytest.mark.slow

DATABASE = "privacy_replica"
# name -> (scope, sensitive): only an unrestricted role that sees sensitive fields reads identities.
ROLES = {"people_sensitive": ((), True), "people_plain": ((), False), "people_scoped": (("entity-type=dataset",), True)}
LOGINS = "SELECT i.identity FROM gold.audit_events a JOIN privacy.identities i ON i.pseudonym = a.actor_urn WHERE a.event_type = 'LogInEvent'"


def _login(port: int, role: str, password: str) -> str:
    return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=port, dbname=DATABASE, user=role, password=password,
                                          connect_timeout=5)  # fmt: skip


@pytest.fixture(scope="module")
def synced(spark, replica, tmp_path_factory):
    """The pseudonymised home synced into its own database of the package's server, with ROLES; yields (settings, port)."""
    server_settings, port, _ = replica
    writer = writer_conninfo(server_settings)
    with psycopg.connect(writer, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    dsn = psycopg.conninfo.make_conninfo(writer, dbname=DATABASE)
    settings = landed_home(spark, tmp_path_factory.mktemp("bi-identities") / "home")
    settings = dataclasses.replace(settings, bi=dataclasses.replace(settings.bi, dsn=dsn))
    sync_replica(settings)
    with psycopg.connect(dsn, autocommit=True) as conn:
        prepare_reader(conn, None, 0)
        for name, (scope, sensitive) in ROLES.items():
            save_role(conn, BiRole(name, parse_scope(scope), sensitive), f"{name}-pw", 0)
    yield settings, port


def test_bi_reader_and_a_sensitive_role_read_who_acted_and_other_roles_cannot(synced):
    settings, port = synced
    with psycopg.connect(_login(port, "bi_reader", PASSWORD)) as conn:
        assert sorted(r[0] for r in conn.execute(LOGINS)) == [KEPT, ERASED]
        ips = dict(conn.execute("SELECT pseudonym, identity FROM privacy.identities WHERE pseudonym LIKE 'ip-%'").fetchall())
        assert sorted(ips.values()) == sorted([ERASED_IP, KEPT_IP])
    with psycopg.connect(_login(port, "people_sensitive", "people_sensitive-pw")) as conn:
        assert sorted(r[0] for r in conn.execute(LOGINS)) == [KEPT, ERASED]
    for role in ("people_plain", "people_scoped"):
        with psycopg.connect(_login(port, role, f"{role}-pw")) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM privacy.identities")


def test_the_next_sync_after_an_erasure_leaves_the_identity_in_no_table(synced):
    settings, port = synced
    erase_person(settings, ERASED, "erasure request 2026-17", "dpo")
    sync_replica(settings)
    with psycopg.connect(_login(port, "bi_reader", PASSWORD)) as conn:
        assert sorted(r[0] for r in conn.execute(LOGINS)) == [ERASED_SUBJECT, KEPT]
        erased = conn.execute("SELECT identity FROM privacy.identities WHERE pseudonym = %s", (person_pseudonym(settings, ERASED),))
        assert erased.fetchone()[0] == ERASED_SUBJECT
    with psycopg.connect(psycopg.conninfo.make_conninfo(settings.bi.dsn), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        holding = [
            (table, needle)
            for (table,) in tables
            for needle in (ERASED, ERASED_IP, ERASED_AGENT)
            if conn.execute(f"SELECT 1 FROM {table} t WHERE strpos(t::text, %s) > 0 LIMIT 1", (needle,)).fetchone()
        ]
    assert len(tables) > 10 and holding == []
