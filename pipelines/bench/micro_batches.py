"""Micro-batches against a built state: `lakehouse bench silver --micro-batches K --micro-records R`.

After the bench's batches are refined (a state of about a million (entity, aspect) keys from
`--versions 2000000`), K small batches of R records each are landed and refined one at a time, the way
`run --watch` does, and each refine is timed with its steps. The records are lines of the generated
input, picked at random, given a version above any the history holds: new versions of existing keys,
which the refine compares with the state, accepts, pairs with the state's JSON and merges back.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from conf.errors import InputError
from conf.settings import Settings
from pipelines.bench.harness import measure, percentile

# Micro-batch k's versions start at (k + 1) * VERSION_STEP: above every version the generator writes.
VERSION_STEP = 1_000_000

# Input lines a micro-batch's records are picked from (the start of one generated file).
POOL_LINES = 200_000


def micro_batch_lines(pool: list[str], batch_index: int, records: int, rng: random.Random) -> list[str]:
    """`records` lines picked from `pool`, each with a version above the history's (ordered, distinct).

    Args:
        pool: MCL JSON lines of the generated history.
        batch_index: which micro-batch (its versions start at (batch_index + 1) * VERSION_STEP).
        records: how many lines.
        rng: the random source (seeded by the bench).
    """
    lines = []
    for offset, line in enumerate(rng.sample(pool, records)):
        record = json.loads(line)
        record.setdefault("systemMetadata", {})["version"] = str((batch_index + 1) * VERSION_STEP + offset)
        lines.append(json.dumps(record))
    return lines


def read_pool(batch_dir: Path, limit: int = POOL_LINES) -> list[str]:
    """The first `limit` lines of the first generated file of a batch folder.

    Raises:
        InputError: when the folder holds no generated JSON-lines file.
    """
    files = sorted(p for p in batch_dir.iterdir() if p.name.endswith(".jsonl"))
    if not files:
        raise InputError(f"{batch_dir}: no generated JSON-lines files to pick micro-batch records from")
    pool = []
    with files[0].open(encoding="utf-8") as handle:
        for line in handle:
            pool.append(line.rstrip("\n"))
            if len(pool) >= limit:
                break
    return pool


def run_micro_batches(
    spark: SparkSession, settings: Settings, folder: Path, batch_dir: Path, batches: int, records: int, seed: int
) -> dict[str, Any]:
    """Land and refine `batches` micro-batches of `records` records each; time every refine.

    Args:
        spark, settings: the bench's session and home (its batches already refined).
        folder: where the micro-batches' files are written (`micro/batch-<k>/part-00000.mcl.jsonl`).
        batch_dir: a generated batch folder to pick records from.
        batches, records: how many micro-batches, and records in each.
        seed: the seed of the pick.

    Returns:
        state_keys (the state's rows before the first micro-batch), per-batch records, events, wall
        and step seconds, and the refine wall time's median, p95 and max.

    Raises:
        InputError: for fewer than one micro-batch or record, or more records than the pool holds.
    """
    from pipelines.batch.landing import land_paths
    from pipelines.batch.refine import refine
    from pipelines.runtime.state_store import STATE_WRITES, read_state

    if batches < 1 or records < 1:
        raise InputError(f"--micro-batches / --micro-records: {batches!r} / {records!r} must be at least 1")
    pool = read_pool(batch_dir)
    if records > len(pool):
        raise InputError(f"--micro-records: {records!r} is more than the {len(pool)} input lines to pick from")
    rng = random.Random(seed)
    state_keys = read_state(spark, settings).count()
    per_batch = []
    for index in range(batches):
        batch_folder = folder / "micro" / f"batch-{index:05d}"
        batch_folder.mkdir(parents=True, exist_ok=True)
        (batch_folder / "part-00000.mcl.jsonl").write_text("\n".join(micro_batch_lines(pool, index, records, rng)) + "\n")
        with measure() as landing:
            land_paths(spark, settings, [batch_folder])
        with measure() as one:
            result = refine(spark, settings, max_batches=1)
        per_batch.append(
            {
                "records": result.rows_in,
                "events": result.rows_out,
                "land_s": landing.wall_s,
                "wall_s": one.wall_s,
                "steps_s": {k.removeprefix("seconds."): v for k, v in result.metrics.items() if k.startswith("seconds.")},
                "state_write": [how for how in STATE_WRITES if result.metrics.get(f"state_{how}")],
            }
        )
    walls = [b["wall_s"] for b in per_batch]
    return {
        "records_per_batch": records,
        "state_keys": state_keys,
        "refine_wall_s": {
            "median": round(percentile(walls, 50), 3),
            "p95": round(percentile(walls, 95), 3),
            "max": round(max(walls), 3),
        },
        "last_to_first_batch": round(walls[-1] / walls[0], 3) if len(walls) > 1 and walls[0] else None,
        "per_batch": per_batch,
    }
