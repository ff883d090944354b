"""`lakehouse sql-server`: the PostgreSQL endpoint BI tools connect to, a read-only replica of gold."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import typer

from conf.errors import ConfigError, SourceUnavailable
from pipelines.cli.console import print_error, print_json_lines, print_table, print_text

PASSWORD_ENV = "LAKEHOUSE_BI_PASSWORD"


def reader_password(password_file: Path | None) -> str | None:
    """The bi_reader password: the file's first line, else LAKEHOUSE_BI_PASSWORD, else None.

    Raises:
        ConfigError: when the file cannot be read or is empty.
    """
    if password_file is not None:
        try:
            lines = password_file.read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"--password-file: cannot read {password_file}: {exc.strerror}") from None
        password = lines[0].strip() if lines else ""
        if not password:
            raise ConfigError(f"--password-file: {password_file} is empty")
        return password
    return os.environ.get(PASSWORD_ENV) or None


@contextlib.contextmanager
def replica_writer(settings) -> Iterator:
    """The sync role's connection for a `sql-role` command, waiting at most bi.lock_timeout_ms for each lock.

    Raises:
        SourceUnavailable: when the replica does not answer, or a BI session's open transaction holds a
            table the change needs (nothing is changed: the change is one transaction).
    """
    import psycopg

    from pipelines.bi.cluster import writer_conninfo

    try:
        with psycopg.connect(writer_conninfo(settings), autocommit=True) as conn:
            conn.execute(f"SET lock_timeout = '{settings.bi.lock_timeout_ms}ms'")
            yield conn
    except psycopg.errors.LockNotAvailable:
        raise SourceUnavailable(
            f"sql-role: a BI session's open transaction held a replica table past bi.lock_timeout_ms "
            f"({settings.bi.lock_timeout_ms} ms); nothing was changed, try again (a transaction left idle ends after "
            "bi.idle_transaction_timeout_seconds)"
        ) from None
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"sql-role: the replica does not answer: {str(exc).strip()}") from None


def register(app: typer.Typer) -> None:
    """Add `sql-server` and the `sql-role` group."""
    from pipelines.cli.app import state_of

    register_roles(app)

    @app.command("sql-server")
    def sql_server_command(
        ctx: typer.Context,
        host: str | None = typer.Option(None, "--host", help="Address to listen on (default bi.host; 0.0.0.0: every interface)."),
        port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port to listen on (default bi.port)."),
        tls_cert: Path | None = typer.Option(None, "--tls-cert", exists=True, dir_okay=False, help="PEM certificate: logins then need TLS."),
        tls_key: Path | None = typer.Option(None, "--tls-key", exists=True, dir_okay=False, help="PEM private key of --tls-cert."),
        password_file: Path | None = typer.Option(
            None, "--password-file", dir_okay=False, help=f"File holding bi_reader's password (else {PASSWORD_ENV})."
        ),
        once: bool = typer.Option(False, "--once", help="Prepare the replica, sync it once and exit (stopping the server)."),
    ) -> None:
        """Serve gold to BI tools over the PostgreSQL protocol: start PostgreSQL (or use bi.dsn), copy gold
        and the silver tables its views read, create the views, then keep it in sync by Delta version."""
        from pipelines.bi.cluster import Tls, data_dir, open_logins, start_server, stop_server
        from pipelines.bi.server import SYNC_ERRORS, prepare_replica, prepare_until_synced, serve_forever

        settings = state_of(ctx).settings
        if (tls_cert is None) != (tls_key is None):
            raise ConfigError("--tls-cert / --tls-key: give both or neither")
        tls = Tls(tls_cert.resolve(), tls_key.resolve()) if tls_cert and tls_key else None
        if settings.bi.dsn and (host or port or tls):
            raise ConfigError("--host / --port / --tls-*: bi.dsn is set, so the replica is that server and none is started")
        password = reader_password(password_file)
        if not password and not settings.bi.dsn and not (data_dir(settings) / "PG_VERSION").exists():
            raise ConfigError(f"bi_reader password: not given; pass --password-file FILE or set {PASSWORD_ENV} "
                              "(never on the command line)")  # fmt: skip
        listen_host, listen_port = host or settings.bi.host, port or settings.bi.port
        # SIGTERM ends the command as Ctrl-C does, at any point, so PostgreSQL is always stopped with it.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        process = None if settings.bi.dsn else start_server(settings, listen_host, listen_port, tls)
        stop = threading.Event()
        try:
            if once:
                try:
                    results = prepare_replica(settings, password)
                except SYNC_ERRORS as exc:
                    if isinstance(exc, ConfigError):
                        raise
                    raise SourceUnavailable(f"sql-server: the replica could not be synced: {exc}".strip()) from None
            else:
                # Until the first sync ends, only the sync logs in (BI users would see empty tables).
                results = prepare_until_synced(settings, password, stop, process, on_error=print_error)
            print_table([r.__dict__ for r in results], ["table_key", "from_version", "to_version", "mode", "rows", "seconds"],
                        title="Replica synced")  # fmt: skip
            if once:
                return
            if process is not None:
                open_logins(settings, tls)
            where = f"PostgreSQL on {listen_host}:{listen_port}" if process is not None else "bi.dsn"
            print_text(f"ready: {where}, database lakehouse, user bi_reader{', TLS required' if tls else ''} (docs/bi.md)\n")
            serve_forever(settings, stop, process, on_error=print_error, on_line=print_text)
        except KeyboardInterrupt:
            pass
        finally:
            if process is not None:
                stop_server(settings, process)


def register_roles(app: typer.Typer) -> None:
    """Add `sql-role add|list|remove`: scoped BI login roles of the replica."""
    from pipelines.cli.app import state_of

    role_app = typer.Typer(help="Scoped BI roles of the sql-server replica (row-level security).", no_args_is_help=True)
    app.add_typer(role_app, name="sql-role")

    @role_app.command("add")
    def role_add(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="The PostgreSQL login role (lower-case letters, digits, _)."),
        scope: list[str] = typer.Option(
            [], "--scope", help="What it may see (repeatable): domain=URN, platform=NAME, entity-type=TYPE, prefix=URN."
        ),
        sensitive: bool = typer.Option(False, "--sensitive", help="Also read source IPs, user agents and raw events."),
        password_file: Path | None = typer.Option(
            None, "--password-file", dir_okay=False, help=f"File holding the role's password (else {PASSWORD_ENV})."
        ),
    ) -> None:
        """Create or update a BI role: a LOGIN role reading the replica through row-level security policies
        that apply the scope as the HTTP API does (the server must run, or bi.dsn be set)."""
        from gold.scopes import parse_scope
        from pipelines.bi.access import BiRole, check_role_name, save_role

        role = BiRole(check_role_name(name), parse_scope(scope), sensitive)
        settings = state_of(ctx).settings
        with replica_writer(settings) as conn:
            save_role(conn, role, reader_password(password_file), settings.bi.idle_transaction_timeout_seconds)
        print_text(f"BI role {name}: scope {' '.join(role.scope.to_specs()) or 'everything'}"
                   f"{', sensitive columns' if sensitive else ''}")  # fmt: skip

    @role_app.command("list")
    def role_list(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="One JSON object per role.")) -> None:
        """List the BI roles with their scopes."""
        from pipelines.bi.access import bi_roles

        with replica_writer(state_of(ctx).settings) as conn:
            rows = [{"name": r.name, "scope": " ".join(r.scope.to_specs()), "sensitive": r.sensitive} for r in bi_roles(conn)]
        if as_json:
            print_json_lines(rows)
        else:
            print_table(rows, ["name", "scope", "sensitive"], title="BI roles")

    @role_app.command("remove")
    def role_remove(ctx: typer.Context, name: str = typer.Argument(..., help="The BI role to drop.")) -> None:
        """Drop a BI role with its policies and grants."""
        from pipelines.bi.access import remove_role

        with replica_writer(state_of(ctx).settings) as conn:
            if not remove_role(conn, name):
                raise ConfigError(f"NAME: no BI role {name!r} (`lakehouse sql-role list`)")
        print_text(f"BI role {name} removed")
