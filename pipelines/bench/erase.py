"""`lakehouse bench erase`: the time to erase one person in a home of N pseudonymised usage events.

Generates N usage events of P people (each with their source IPs and user agents), runs them through
land -> refine -> publish with `privacy.pseudonymise` on (so ops.identities holds every identity as
landing records it), then erases R people one after another, timing each `erase_person` (what `lakehouse
erase` and the endpoint run: the checks, the erasure's row and chain link, the key destroyed). The
machine's load average is recorded beside each figure. Target (docs/benchmarks.md): one person in a
10M-row home within 10 s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import typer

from conf.errors import InputError
from conf.tables import IDENTITIES, table_location
from conf.values import DAY_MS
from pipelines.bench.harness import bench_settings, measure, write_result

TARGET_ROWS = 10_000_000
TARGET_SECONDS = 10.0


def bench_erase(
    rows: int = typer.Option(1_000_000, "--rows", min=1, help="Usage events in the home (target: 10,000,000)."),
    people: int = typer.Option(1000, "--people", min=2, help="Distinct people acting."),
    erasures: int = typer.Option(3, "--erasures", min=1, help="People erased one after another; the median is reported."),
    out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    keep: Path | None = typer.Option(None, "--keep", help="Build the home here and keep it (default: a temporary folder)."),
    seed: int = typer.Option(7, "--seed", help="Generator seed."),
) -> None:
    """Measure erasing one person in a pseudonymised home of generated usage events and write the JSON result."""
    from deltalake import DeltaTable

    from datagen.history import generate_usage_events
    from pipelines.orchestration.jobs import run_job
    from pipelines.serving.erasure import erase_person

    if erasures > people:
        raise InputError(f"--erasures: {erasures} is more than --people {people}")
    home = keep or Path(tempfile.mkdtemp(prefix="bench-erase-"))
    settings = bench_settings(home, "privacy.pseudonymise=true")
    actors = [f"urn:li:corpuser:person{i:05d}" for i in range(people)]
    try:
        now_ms = int(time.time() * 1000)
        with measure() as generated:
            generate_usage_events(home / "bench-input", events=rows, seed=seed, start_ms=now_ms - 30 * DAY_MS,
                                  end_ms=now_ms, actors=actors, overwrite=True)  # fmt: skip
        with measure() as built:
            summary = run_job(settings, paths=[home / "bench-input" / "usage"], deliver=False)
        shutil.rmtree(home / "bench-input", ignore_errors=True)
        identity_rows = DeltaTable(str(table_location(settings, IDENTITIES))).count()
        runs = []
        for actor in actors[:erasures]:
            load_before = os.getloadavg()[0]
            with measure() as erased:
                done = erase_person(settings, actor, "bench erasure", "bench")
            runs.append({"seconds": erased.wall_s, "identities": done.identities, "load_before": round(load_before, 2),
                         "load_after": round(os.getloadavg()[0], 2)})  # fmt: skip
        median_s = statistics.median(r["seconds"] for r in runs)
        path = write_result(out, "erase", {
            "rows": rows,
            "people": people,
            "generate": generated,
            "build": built,
            "pipeline_seconds": summary.seconds,
            "identity_rows": identity_rows,
            "erasures": runs,
            "erase_median_s": median_s,
            "target": {"rows": TARGET_ROWS, "seconds": TARGET_SECONDS},
        })  # fmt: skip
        typer.echo(f"erase: one person of {people} in a home of {rows} usage events in {median_s:.3f} s "
                   f"(median of {erasures}; load average {runs[0]['load_before']}); result {path}")  # fmt: skip
    finally:
        if keep is None:
            shutil.rmtree(home, ignore_errors=True)


def register(bench_app: typer.Typer) -> None:
    """Add `bench erase` to the bench group."""
    bench_app.command("erase")(bench_erase)
