"""`lakehouse bench ...`: benchmarks that write JSON results; each benchmark adds its command here."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Run a benchmark and write its JSON result.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the `bench` group; benchmark modules add their commands to `bench_app`."""
    app.add_typer(bench_app, name="bench")
