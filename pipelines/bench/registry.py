"""The benchmarks of `lakehouse bench`: the one list the command line reads.

Each module named in BENCH_MODULES has `register(bench_app)`, which adds its command to the group.
"""

from __future__ import annotations

import importlib

import typer

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


def register(app: typer.Typer) -> None:
    """Add the `bench` group, with every benchmark of BENCH_MODULES, to the `lakehouse` command."""
    bench_app = typer.Typer(help="Run a benchmark and write its JSON result.", no_args_is_help=True)
    for module in BENCH_MODULES:
        importlib.import_module(module).register(bench_app)
    app.add_typer(bench_app, name="bench")
