"""`lakehouse bench life`: a home's life of batches against one run over the same input, measured and compared.

The generated history is cut into `--batches` time-ordered batches. One home takes them one run at a
time, verifying the chain after each; a second home takes them all in one run. Both homes' tables are then
compared by hashes of their sorted identity rows (event ids, audit rows, aspect state, OpenMetadata
events, usage events, bronze snapshots, activity rows): the life must end where the one run ends.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import typer

from pipelines.bench.harness import bench_settings, measure, write_result
from pipelines.bench.table_hashes import identity_hashes


def register(bench_app: typer.Typer) -> None:
    """Add `bench life` to the bench group."""
    from pipelines.cli.console import console

    @bench_app.command("life")
    def bench_life_command(
        entities: int = typer.Option(20_000, "--entities", min=11, help="Entities of the generated history (about 21 records each)."),
        batches: int = typer.Option(8, "--batches", min=2, help="Time-ordered batches the history is cut into."),
        seed: int = typer.Option(53, "--seed", help="Generator seed."),
        mcp_share: float = typer.Option(0.1, "--mcp-share", help="Share of entities written as MCP lines."),
        file_sink_share: float = typer.Option(0.05, "--file-sink-share", help="Share written as file-sink arrays."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
        work: Path | None = typer.Option(None, "--work", help="Scratch folder (default: a temporary one, removed after)."),
    ) -> None:
        """Run a generated history batch by batch and in one run; compare the tables and time each run."""
        result = run_life_bench(
            entities=entities, batches=batches, seed=seed, mcp_share=mcp_share, file_sink_share=file_sink_share, work=work
        )
        path = write_result(out, "life", result)
        runs = result["batch_runs"]
        console.print(
            f"{result['records']} records in {batches} batches: runs {min(r['wall_s'] for r in runs)}-"
            f"{max(r['wall_s'] for r in runs)} s each, one run {result['one_run']['wall_s']} s; "
            f"tables equal: {result['equal']} -> {path}"
        )
        if not result["equal"]:
            raise typer.Exit(1)


def run_life_bench(
    *, entities: int, batches: int, seed: int, mcp_share: float = 0.1, file_sink_share: float = 0.05, work: Path | None = None
) -> dict[str, Any]:
    """Generate, run the batches one at a time and all at once, compare; return the figures.

    Raises:
        AssertionError: when the chain does not verify after a run.
    """
    from datagen.history import generate_history
    from pipelines.batch.chain_verification import verify_chain
    from pipelines.orchestration.jobs import run_job
    from pipelines.runtime.engine import open_session

    scratch = Path(tempfile.mkdtemp(prefix="bench-life-")) if work is None else work
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        manifest = generate_history(
            scratch / "input", entities=entities, seed=seed, batches=batches, mcp_share=mcp_share,
            file_sink_share=file_sink_share, overwrite=True,
        )  # fmt: skip
        folders = sorted((scratch / "input").glob("batch-*"))
        life = bench_settings(scratch / "life")
        batch_runs = []
        with open_session(life) as spark:
            for folder in folders:
                with measure() as run:
                    summary = run_job(life, paths=[folder], spark=spark)
                with measure() as verified:
                    verification = verify_chain(spark, life)
                if not verification.ok:
                    raise AssertionError(f"verify failed after {folder.name}: {verification.broken}")
                batch_runs.append({"batch": folder.name, **run.__dict__, "verify_s": verified.wall_s,
                                   "stages_s": {r.stage: r.seconds for r in summary.stages}})  # fmt: skip
            life_hashes = identity_hashes(spark, life)
        one = bench_settings(scratch / "one-run")
        with open_session(one) as spark:
            with measure() as one_run:
                run_job(one, paths=folders, spark=spark)
            one_hashes = identity_hashes(spark, one)
        return {
            "entities": entities,
            "batches": batches,
            "mcp_share": mcp_share,
            "file_sink_share": file_sink_share,
            "records": manifest.totals["records"],
            "batch_runs": batch_runs,
            "one_run": one_run.__dict__,
            "identity_hashes": life_hashes,
            "differing_tables": sorted(k for k in life_hashes if life_hashes[k] != one_hashes[k]),
            "equal": life_hashes == one_hashes,
        }
    finally:
        if work is None:
            shutil.rmtree(scratch, ignore_errors=True)
