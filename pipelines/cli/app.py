"""The `lakehouse` command line: global options, error handling and the command groups."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from conf.errors import ConfigError, LakehouseError
from conf.settings import Settings, load_settings
from pipelines.cli.console import print_error
from pipelines.runtime.engine import is_missing_engine, java_message, missing_engine_error
from pipelines.runtime.home import restrict_new_files
from pipelines.runtime.logs import configure_logging

if TYPE_CHECKING:  # commands import the engine when they run: `--help`, serve, tokens start without it
    from pyspark.sql import SparkSession

# Each module exposes `register(app)`; `lakehouse --help` lists the commands by task (COMMAND_PANELS).
COMMAND_MODULES = (
    "pipelines.cli.commands.catalog",
    "pipelines.cli.commands.jobs",
    "pipelines.cli.commands.landing",
    "pipelines.cli.commands.backfill",
    "pipelines.cli.commands.export",
    "pipelines.cli.commands.silver",
    "pipelines.cli.commands.impact",
    "pipelines.cli.commands.audit",
    "pipelines.cli.commands.tokens",
    "pipelines.cli.commands.access_log",
    "pipelines.cli.commands.retention",
    "pipelines.cli.commands.privacy",
    "pipelines.cli.commands.audit_trail",
    "pipelines.cli.commands.openmetadata",
    "pipelines.cli.commands.subscriptions",
    "pipelines.bench.registry",
    "pipelines.cli.commands.status",
    "pipelines.cli.commands.sql_server",
    "pipelines.cli.commands.generate",
    "pipelines.cli.commands.demo",
    "pipelines.cli.commands.anomalies",
)

# The top-level commands by task, in the order `lakehouse --help` shows them.
COMMAND_PANELS = {
    "Pipeline": ("run", "status", "runs", "job", "land", "backfill", "quarantine", "refine", "publish-audit",
                 "publish-openmetadata", "replay", "generate", "demo"),
    "Query": ("sql", "describe", "tables", "history", "as-of", "impact", "search", "export", "export-sql", "anomalies"),
    "Serve": ("serve", "token", "sql-server", "sql-role", "subscriptions"),
    "Operate": ("verify", "report", "audit-key", "access-log", "maintain", "retention", "hold", "erase", "privacy"),
    "Bench": ("bench",),
}  # fmt: skip

app = typer.Typer(
    name="lakehouse",
    help="Metadata audit lakehouse: land DataHub metadata, derive change events, serve audit search.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@dataclass
class CliState:
    """The global options of one invocation; settings are loaded on first use."""

    profile: str | None = None
    home: str | None = None
    config: Path | None = None
    overrides: tuple[str, ...] = ()
    _settings: Settings | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        """The settings for the chosen profile, home and config file."""
        if self._settings is None:
            self._settings = load_settings(self.profile, self.home, self.config, overrides=self.overrides)
            restrict_new_files(self._settings)
            configure_logging(self._settings)
        return self._settings

    @contextlib.contextmanager
    def session(self, register_tables: bool = True) -> Iterator[SparkSession]:
        """Open a session for these settings (tables registered) for the length of the block."""
        from pipelines.runtime.engine import open_session

        with open_session(self.settings, register_tables=register_tables) as spark:
            yield spark

    @contextlib.contextmanager
    def locked_session(self, owner: str, wait_seconds: float = 0.0) -> Iterator[SparkSession]:
        """Hold the home's run lock, then open a session, for a command that writes tables.

        Raises:
            ConcurrencyError: when another run holds the lock after `wait_seconds`.
        """
        from pipelines.runtime.lock import run_lock

        with run_lock(self.settings, owner=owner, wait_seconds=wait_seconds), self.session() as spark:
            yield spark


def state_of(ctx: typer.Context) -> CliState:
    """Return the global options stored by the root callback."""
    return ctx.find_root().obj


@app.callback()
def main_options(
    ctx: typer.Context,
    profile: str | None = typer.Option(
        None, "--profile", "-p", help="Engine profile: local, connect, classic or databricks (default LAKEHOUSE_PROFILE or local)."
    ),
    home: str | None = typer.Option(
        None, "--home", help="Lakehouse home: a folder or an object-storage URL such as s3://bucket/prefix (default LAKEHOUSE_HOME or ./.lakehouse)."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="Extra YAML settings overlaid on the profile (default LAKEHOUSE_CONFIG)."
    ),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override one setting, e.g. --set catalog.name=main (repeatable; applied last)."
    ),
) -> None:
    """Metadata audit lakehouse: land DataHub metadata, derive change events, serve audit search."""
    ctx.obj = CliState(profile=profile, home=home, config=config, overrides=tuple(overrides or ()))


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def engine_errors() -> tuple[type[BaseException], ...]:
    """The engine's own exception classes, of the engine modules this run imported (none: no engine error)."""
    classes = (("pyspark.errors", "PySparkException"), ("py4j.protocol", "Py4JError"))
    return tuple(getattr(sys.modules[module], name) for module, name in classes if module in sys.modules)


def command_tree() -> typer.core.TyperGroup:
    """The `lakehouse` command as click builds it, with its help made plain.

    Flags show no value type (typer shows `--json <bool>`), repeatable options their element's type
    (`--set <str>`, not `<list[str]>`), and the top-level commands are grouped by task (COMMAND_PANELS).
    """
    root = typer.main.get_command(app)
    panel_of = {name: panel for panel, names in COMMAND_PANELS.items() for name in names}
    ordered = sorted(root.commands.items(), key=lambda item: _panel_position(item[0]))
    root.commands = dict(ordered)
    for name, command in root.commands.items():
        command.rich_help_panel = panel_of.get(name, "Other")
    _plain_metavars(root)
    return root


def _panel_position(name: str) -> tuple[int, int]:
    for index, names in enumerate(COMMAND_PANELS.values()):
        if name in names:
            return index, names.index(name)
    return len(COMMAND_PANELS), 0


def _plain_metavars(command: typer.core.TyperCommand | typer.core.TyperGroup) -> None:
    """Set the value hints of `command` and its subcommands: none for a flag, the element's type for a list,
    an argument's name in capitals (`lakehouse history URN`)."""
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, *([help_option] if help_option else [])]:
        if param.metavar is None and isinstance(param, typer.core.TyperArgument):
            param.metavar = param.name.upper()  # usage: history URN
        if param.metavar is not None or not isinstance(param, typer.core.TyperOption):
            continue
        if param.is_flag:
            param.metavar = ""
        elif param.type_descriptor.is_list:
            param.metavar = param.display_type(typer.Context(command)).replace("<list[", "<").replace("]>", ">")
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


def main() -> None:
    """Entry point of the `lakehouse` script: run the CLI, then leave without the native libraries' teardown.

    Once the command has answered, the process ends with os._exit after Python's own exit handlers: a
    native thread pool (Arrow's, the Delta reader's) still joinable when the interpreter finalizes calls
    std::terminate, and the command, its output complete, then exits -6 ("terminate called without an
    active exception"). An uncaught error still leaves through the interpreter, with its traceback.
    """
    try:
        code = run_command()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    leave(code)


def leave(code: int) -> NoReturn:
    """End the process with `code` once exit handlers ran and output is flushed, skipping native teardown."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: the reader left, nothing more can be told
    os._exit(code)


def run_command() -> int:
    """Run the CLI on sys.argv; return the exit code, turning project errors into clean exits.

    Raises:
        SystemExit: with the exit code, for errors reported to the user.
    """
    try:
        result = command_tree().main(standalone_mode=False, prog_name="lakehouse")
    except ConfigError as exc:
        print_error(exc)
        raise SystemExit(2) from None
    except LakehouseError as exc:
        print_error(exc)
        raise SystemExit(1) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        raise SystemExit(130) from None
    except typer.TyperException as exc:
        # A usage error (missing or bad option): typer's own message, naming the option, without a traceback.
        exc.show()
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except Exception as exc:
        if is_missing_engine(exc):
            print_error(missing_engine_error(exc))
            raise SystemExit(2) from None
        if not isinstance(exc, engine_errors()):
            raise
        print_error(java_message(exc))
        raise SystemExit(1) from None
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    main()
