"""`lakehouse bench generate`: how fast the generator writes aspect versions."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import typer

from conf.errors import InputError
from datagen.history import generate_aspect_versions
from pipelines.bench.harness import measure, write_result
from pipelines.cli.console import console


def bench_generate_command(
    ctx: typer.Context,
    versions: int = typer.Option(2_000_000, "--versions", help="About this many aspect versions to write."),
    seed: int = typer.Option(1, "--seed", help="Generator seed."),
    batches: int = typer.Option(1, "--batches", help="Equal, time-ordered batches."),
    workers: int | None = typer.Option(None, "--workers", help="Processes to use (default: available CPUs)."),
    out: Path | None = typer.Option(None, "--out", help="Folder to write (default: a temporary folder)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the generated files (always kept with --out)."),
    results: Path | None = typer.Option(None, "--results", help="Folder for the JSON result (default HOME/bench)."),
) -> None:
    """Measure how fast the generator writes aspect versions; write the figures as JSON."""
    from pipelines.cli.app import state_of  # the command line imports this module while it builds its app

    if versions < 100:
        raise InputError(f"--versions: {versions} is below 100")
    results_dir = results or state_of(ctx).settings.home / "bench"
    target = out or Path(tempfile.mkdtemp(prefix="lakehouse-bench-generate-"))
    try:
        with measure() as measured:
            manifest = generate_aspect_versions(target, versions=versions, seed=seed, batches=batches,
                                                workers=workers, overwrite=out is not None)
        written = manifest.totals
        per_minute = written["aspect_versions"] / measured.wall_s * 60 if measured.wall_s else 0.0
        cpu_per_minute = written["aspect_versions"] / measured.cpu_s * 60 if measured.cpu_s else 0.0
        path = write_result(results_dir, "generate", {
            "versions_requested": versions,
            "aspect_versions": written["aspect_versions"],
            "entities": manifest.parameters["entities"],
            "files": written["files"],
            "bytes": written["bytes"],
            "batches": batches,
            "workers": workers,
            "measurement": measured,
            "versions_per_minute": round(per_minute),
            "versions_per_cpu_minute": round(cpu_per_minute),
        })
    finally:
        if out is None and not keep:
            shutil.rmtree(target, ignore_errors=True)
    console.print(
        f"{written['aspect_versions']:,} aspect versions in {measured.wall_s:.1f} s wall, "
        f"{measured.cpu_s:.1f} s CPU: "
        f"{per_minute:,.0f} per minute ({cpu_per_minute:,.0f} per CPU-minute); result in {path}"
    )


def register(bench_app: typer.Typer) -> None:
    """Add `bench generate` to the bench group."""
    bench_app.command("generate")(bench_generate_command)
