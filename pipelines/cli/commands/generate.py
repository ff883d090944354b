"""`lakehouse generate`: write a realistic DataHub history to a folder (its benchmark: `pipelines.bench.generate`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from conf.values import parse_time_ms
from datagen import DEFAULT_PART_SIZE
from pipelines.cli.console import console, print_table

if TYPE_CHECKING:  # the generator is imported when the command runs: every other command starts without it
    from datagen.manifest import GeneratorManifest


def register(app: typer.Typer) -> None:
    """Add `generate` to the CLI."""
    @app.command("generate")
    def generate_command(
        out: Path = typer.Option(
            ..., "--out", "-o", help="Folder to write; an earlier run there is replaced, other content needs --force."
        ),
        entities: int = typer.Option(..., "--entities", "-n", help="Entities of all types (at least 11)."),
        seed: int = typer.Option(..., "--seed", "-s", help="Same seed and options give byte-identical files."),
        usage_events: int | None = typer.Option(None, "--usage-events", help="Usage events (default 5 per entity)."),
        action_requests: int | None = typer.Option(
            None, "--action-requests", help="Action requests (default one per 10 entities, at least 7)."
        ),
        malformed_share: float = typer.Option(0.001, "--malformed-share", help="Share of malformed lines per file."),
        days: int = typer.Option(30, "--days", help="Length of the history in days."),
        start: str | None = typer.Option(
            None, "--start", help="First instant (ISO-8601 or epoch ms; default 2023-11-14T22:13:20Z)."
        ),
        batches: int = typer.Option(1, "--batches", help="Equal, time-ordered batches (batch-0000k/ folders)."),
        part_size: int = typer.Option(DEFAULT_PART_SIZE, "--part-size", help="About this many records per part."),
        mcp_share: float = typer.Option(0.0, "--mcp-share", help="Share of entities written as MCP lines."),
        file_sink_share: float = typer.Option(
            0.0, "--file-sink-share", help="Share of entities written as a file-sink JSON array."
        ),
        gzip: bool = typer.Option(False, "--gzip", help="Write gzip-compressed files (.gz)."),
        workers: int | None = typer.Option(None, "--workers", help="Processes to use (default: available CPUs)."),
        force: bool = typer.Option(False, "--force", help="Write into a non-empty --out that holds no earlier run."),
    ) -> None:
        """Write aspect snapshots (MCL), usage events and action requests, plus OUT/manifest.json."""
        from datagen.history import generate_history

        start_ms = parse_time_ms(start, "--start") if start else None
        manifest = generate_history(
            out,
            entities=entities,
            seed=seed,
            usage_events=usage_events,
            action_requests=action_requests,
            malformed_share=malformed_share,
            days=days,
            start_ms=start_ms,
            batches=batches,
            part_size=part_size,
            mcp_share=mcp_share,
            file_sink_share=file_sink_share,
            gzip=gzip,
            workers=workers,
            overwrite=force,
        )
        _print_summary(manifest)


def _print_summary(manifest: GeneratorManifest) -> None:
    totals = manifest.totals
    rows = []
    for kind in ("aspects", "action_requests", "usage"):
        files = manifest.files_of(kind)
        if files:
            rows.append({
                "kind": kind,
                "files": len(files),
                "lines": sum(f.lines for f in files),
                "malformed": sum(len(f.malformed) for f in files),
                "records": sum(f.records for f in files),
                "MB": round(sum(f.bytes for f in files) / 1e6, 1),
            })
    columns = ["kind", "files", "lines", "malformed", "records", "MB"]
    print_table(rows, columns, title=f"Generated in {manifest.out_dir}")
    console.print(
        f"{totals['aspect_versions']:,} aspect versions, {totals['usage_events']:,} usage events, "
        f"{totals['action_requests']:,} action requests; manifest: {manifest.out_dir / 'manifest.json'}"
    )
