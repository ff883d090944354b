"""The benchmarks of `lakehouse bench`: the one list the command line reads.

Each module named in BENCH_MODULES has `register(bench_app)`, which adds its command to the group.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

# In the order `lakehouse bench --help` lists them.
BENCH_MODULES = (
    "pipelines.bench.search",
    "pipelines.bench.verify",
    "pipelines.bench.erase",
    "pipelines.bench.watch",
    "pipelines.bench.silver",
    "pipelines.bench.subscriptions",
    "pipelines.bench.kafka",
    "pipelines.bench.backfill",
    "pipelines.bench.explorer",
    "pipelines.bench.impact",
    "pipelines.bench.generate",
    "pipelines.bench.anomalies",
    "pipelines.bench.metrics",
    "pipelines.bench.sql_server",
    "pipelines.bench.life",
    "pipelines.bench.plans",
)


class BenchGroup(TyperGroup):
    """The `bench` group: its benchmarks' modules are imported when one is named or listed, not at start.

    They bring clients, generators and their libraries (0.3 CPU-seconds of imports) that no other command
    needs, and every command of the CLI would otherwise pay for them.
    """

    def _benchmarks(self) -> None:
        if self.commands:
            return
        bench_app = typer.Typer()
        for module in BENCH_MODULES:
            importlib.import_module(module).register(bench_app)
        for name, command in typer.main.get_group(bench_app).commands.items():
            self.add_command(command, name)

    def list_commands(self, ctx: typer.Context) -> list[str]:
        self._benchmarks()
        return super().list_commands(ctx)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        self._benchmarks()
        return super().get_command(ctx, cmd_name)


def register(app: typer.Typer) -> None:
    """Add the `bench` group, whose benchmarks are those of BENCH_MODULES, to the `lakehouse` command."""
    bench_app = typer.Typer(cls=BenchGroup, help="Run a benchmark and write its JSON result.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
