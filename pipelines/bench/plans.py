"""`lakehouse bench plans`: the size of every request each pipeline step sends, at several input sizes.

A plan that carries rows, key lists or per-file literals from the driver grows with the data until it
meets the server's message limit (4 MiB by default, docs/scaling.md). Each size here is a generated
history of about that many aspect versions, cut into the same number of files (so what differs between
sizes is the rows, not the file count: plans name files, and their reads are bounded per engine job),
run through land, refine and publish in one home; the session's recorder files each request under the
step that sent it. A step's growth is its largest request at the largest size over that at the smallest.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from conf.settings import Settings
from conf.values import whole_number
from pipelines.bench.harness import bench_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.runtime.plan_sizes import PlanSizes

# Parts the aspect histories of every size are cut into (each part one file per serialization): the
# generator cuts a history of more than 8 x 25,000 records into at least 8 parts whatever is asked.
FILES_PER_KIND = 8


def register(bench_app: typer.Typer) -> None:
    """Add `bench plans` to the bench group."""
    from pipelines.bench.harness import write_result
    from pipelines.cli.console import console

    @bench_app.command("plans")
    def bench_plans_command(
        versions: str = typer.Option("10000,200000,1000000", "--versions", help="Comma-separated sizes, in aspect versions."),
        seed: int = typer.Option(54, "--seed", help="Generator seed."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
        work: Path | None = typer.Option(None, "--work", help="Scratch folder (default: a temporary one, removed after)."),
    ) -> None:
        """Run generated histories of each size and report the largest request each step sent."""
        from pipelines.runtime.engine import open_session
        from pipelines.runtime.plan_sizes import PlanSizes

        sizes = _parse_sizes(versions)
        recorder = PlanSizes()
        folder = Path(tempfile.mkdtemp(prefix="bench-plans-")) if work is None else work
        try:
            runs = {}
            for size in sizes:
                inputs = generate_cut_history(folder / f"input-{size}", size, seed=seed)
                settings = bench_settings(folder / f"home-{size}")
                with open_session(settings, plan_sizes=recorder) as spark:
                    runs[size] = run_recorded(recorder, settings, inputs, spark)
            result = compare_sizes(runs)
        finally:
            if work is None:
                shutil.rmtree(folder, ignore_errors=True)
        path = write_result(out, "plans", result)
        worst = max(result["growth"].items(), key=lambda item: item[1])
        console.print(f"largest request {result['largest_bytes']} bytes; most growth {worst[0]} x{worst[1]} -> {path}")


def _parse_sizes(text: str) -> list[int]:
    numbers = [whole_number(part) for part in text.split(",") if part.strip()]
    if None in numbers:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of whole numbers", param_hint="--versions")
    sizes = sorted(set(numbers))
    if len(sizes) < 2 or sizes[0] < 1000:
        raise typer.BadParameter(f"{text!r}: give at least two sizes of at least 1000 versions", param_hint="--versions")
    return sizes


def generate_cut_history(out: Path, versions: int, *, seed: int) -> Path:
    """Generate about `versions` aspect versions into `out`, each aspect serialization in FILES_PER_KIND files; return `out`."""
    from datagen.history import estimate_versions_per_entity, generate_history

    per_entity = estimate_versions_per_entity(max(versions // 20, 10), seed=seed, sample=100)
    entities = max(round(versions / per_entity), 10)
    # The generator's own estimate at this size, so that its parts come out FILES_PER_KIND exactly.
    expected = entities * estimate_versions_per_entity(entities, seed=seed, sample=100)
    generate_history(
        out, entities=entities, seed=seed, batches=1, mcp_share=0.5, part_size=math.ceil(expected / FILES_PER_KIND),
        workers=2, overwrite=True,
    )  # fmt: skip
    return out


def run_recorded(recorder: PlanSizes, settings: Settings, inputs: Path, spark: SparkSession) -> dict[str, Any]:
    """Run land, refine and publish on `inputs` (tables registered); return the largest request and count by step."""
    from pipelines.orchestration.jobs import run_job

    recorder.clear()
    run_job(settings, paths=[inputs], spark=spark)
    sent = recorder.sent()
    steps = sorted({request.step for request in sent})
    return {
        "largest_bytes": recorder.largest_by_step(),
        "requests": {step: sum(1 for request in sent if request.step == step) for step in steps},
    }


def compare_sizes(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The figures of every size and each step's growth: its largest request at the largest size over the smallest's."""
    smallest, largest = runs[min(runs)]["largest_bytes"], runs[max(runs)]["largest_bytes"]
    growth = {step: round(largest[step] / smallest[step], 3) for step in sorted(set(smallest) & set(largest))}
    return {
        "sizes": sorted(runs),
        "files_per_kind": FILES_PER_KIND,
        "runs": {str(versions): run for versions, run in sorted(runs.items())},
        "growth": growth,
        "largest_bytes": max(max(run["largest_bytes"].values()) for run in runs.values()),
    }
