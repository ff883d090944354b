"""Public entry points: write a whole history, only aspect versions, or only usage events into a folder, with its manifest."""

from __future__ import annotations

import math
import os
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bronze.formats import ACTION_REQUEST_TYPES
from conf.errors import InputError
from datagen import DEFAULT_PART_SIZE
from datagen.action_requests import action_request_part
from datagen.catalogue import ASSET_TYPES, DAY_MS, DEFAULT_START_MS, MIN_ENTITIES, Universe
from datagen.files import PartTask, aspect_part, run_parts
from datagen.manifest import MANIFEST_NAME, GeneratorManifest
from datagen.simulation import Simulator
from datagen.usage import UsageContext, run_usage, usage_tasks
from datagen.wire import Options, Sink

_MAX_SMALL_PARTS = 8
_MIN_PART_RECORDS = 25_000


def _check_share(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise InputError(f"{name}: {value!r} is not a share between 0 and 1")


def _check_positive(name: str, value: Any, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InputError(f"{name}: {value!r} is not an integer >= {minimum}")


def _is_generated(path: Path) -> bool:
    return path.name in ("aspects", "usage", "action_requests", MANIFEST_NAME) or path.name.startswith("batch-")


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Create `out_dir`, removing the files of an earlier run (the generator owns `aspects/`, `usage/`,
    `action_requests/`, `batch-*/` and `manifest.json`; nothing else is touched).

    A folder holding an earlier run's manifest is always replaced (same arguments give the same bytes,
    so a re-run is idempotent). Any other non-empty folder is refused unless `overwrite`.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"out_dir: {str(out_dir)!r} is a file, not a folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite and not (out_dir / MANIFEST_NAME).is_file():
            raise InputError(f"out_dir: {str(out_dir)!r} is not empty and holds no {MANIFEST_NAME} of an earlier "
                             "run (pass overwrite / --force to write into it)")
        for child in out_dir.iterdir():
            if _is_generated(child):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def _default_workers(workers: int | None) -> int:
    if workers is None:
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    _check_positive("workers", workers)
    return workers


def estimate_versions_per_entity(entities: int, *, seed: int = 0, sample: int = 200, days: int = 30) -> float:
    """Estimate the mean number of aspect records one entity produces in an instance of `entities`.

    Simulates up to `sample` random entities of each asset type (a quarter of that per reference type)
    in memory, nothing written, and weighs the per-type means by the type counts.
    """
    _check_positive("entities", entities, MIN_ENTITIES)
    _check_positive("sample", sample)
    universe = Universe(entities, seed, DEFAULT_START_MS, DEFAULT_START_MS + days * DAY_MS)
    options = Options(0.0, 0.0, 0.03, 0.0, 0.0)
    rng = random.Random(f"{seed}/estimate")
    total = 0.0
    for entity_type, indices in universe.by_type.items():
        size = sample if entity_type in ASSET_TYPES else max(1, sample // 4)
        picked = rng.sample(range(len(indices)), min(size, len(indices)))
        sink = Sink()
        for k in picked:
            Simulator(universe, indices[k], sink, options).run()
        total += len(indices) * len(sink.records) / len(picked)
    return total / entities


def generate_history(
    out_dir: Path | str,
    *,
    entities: int,
    seed: int,
    usage_events: int | None = None,
    action_requests: int | None = None,
    malformed_share: float = 0.001,
    days: int = 30,
    start_ms: int | None = None,
    batches: int = 1,
    part_size: int = DEFAULT_PART_SIZE,
    mcp_share: float = 0.0,
    file_sink_share: float = 0.0,
    duplicate_share: float = 0.004,
    out_of_order_share: float = 0.004,
    hard_delete_share: float = 0.03,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write a realistic DataHub history of `entities` entities over `days` days, plus its manifest.

    Args:
        out_dir: folder to write; created. The files of an earlier run there are replaced; a folder with
            other content is refused unless `overwrite`.
        entities: number of entities of all types (at least 11: one of each type, two users).
        seed: same seed and arguments give byte-identical files.
        usage_events: usage event documents to write (default 5 per entity; 0 for none).
        action_requests: action requests (proposals) to write (default one per 10 entities, at least 7).
        malformed_share: share of malformed lines added to each JSON-lines file (at least one per file when > 0).
        days: length of the history.
        start_ms: first instant of the history (epoch ms; default 2023-11-14T22:13:20Z).
        batches: split every kind into this many batches of equal size, in time order
            (`batch-0000k/<kind>/...`); 1 writes `<kind>/...` directly.
        part_size: about this many records per part file (before splitting into batches).
        mcp_share: share of asset entities whose history is written as MCP lines (`.mcp.jsonl`).
        file_sink_share: share of asset entities written as a DataHub file-sink JSON array (`.file-sink.json`).
        duplicate_share: chance that a record is written again (an exact duplicate line) a little later.
        out_of_order_share: chance that an older version of an aspect is written after the newer one.
        hard_delete_share: share of asset entities hard-deleted at the end of their life.
        gzip: write `.gz` files.
        workers: processes to use (default: the CPUs available).
        overwrite: write into a non-empty `out_dir` that holds no earlier run (other files are kept).

    Returns:
        The manifest, also written to `out_dir/manifest.json`.

    Raises:
        InputError: an argument out of range (the message names it and its value), or an `out_dir` with
            foreign content.
    """
    _check_positive("entities", entities, MIN_ENTITIES)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"seed: {seed!r} is not an integer")
    usage_events = entities * 5 if usage_events is None else usage_events
    action_requests = max(len(ACTION_REQUEST_TYPES), entities // 10) if action_requests is None else action_requests
    _check_positive("usage_events", usage_events, 0)
    _check_positive("action_requests", action_requests, 0)
    _check_positive("days", days)
    _check_positive("batches", batches)
    _check_positive("part_size", part_size)
    for name, value in (("malformed_share", malformed_share), ("mcp_share", mcp_share),
                        ("file_sink_share", file_sink_share), ("duplicate_share", duplicate_share),
                        ("out_of_order_share", out_of_order_share), ("hard_delete_share", hard_delete_share)):
        _check_share(name, value)
    if mcp_share + file_sink_share > 1.0:
        raise InputError(f"mcp_share + file_sink_share: {mcp_share} + {file_sink_share} is more than 1")
    if start_ms is None:
        start_ms = DEFAULT_START_MS
    _check_positive("start_ms", start_ms, 0)
    workers = _default_workers(workers)
    out = Path(out_dir)
    _prepare_out_dir(out, overwrite)
    end_ms = start_ms + days * DAY_MS
    universe = Universe(entities, seed, start_ms, end_ms)
    options = Options(duplicate_share, out_of_order_share, hard_delete_share, mcp_share, file_sink_share)

    per_entity = estimate_versions_per_entity(entities, seed=seed, sample=100, days=days)
    expected = entities * per_entity
    # Parts depend on sizes only (never on `workers`), so every machine writes the same files; mid-sized
    # runs still get several parts so that they use several cores.
    parts = max(math.ceil(expected / part_size), min(_MAX_SMALL_PARTS, math.ceil(expected / _MIN_PART_RECORDS)))
    per_part = max(1, math.ceil(entities / parts))
    tasks = [PartTask(p, first, min(entities, first + per_part), str(out), batches, malformed_share, gzip, "aspects")
             for p, first in enumerate(range(0, entities, per_part))]
    files = [f for part in run_parts(aspect_part, tasks, workers, (universe, options)) for f in part]

    if action_requests:
        per_request_part = max(1, part_size // 3)
        request_tasks = [PartTask(p, first, min(action_requests, first + per_request_part), str(out), batches,
                                   malformed_share, gzip, "action_requests")
                         for p, first in enumerate(range(0, action_requests, per_request_part))]
        files += [f for part in run_parts(action_request_part, request_tasks, workers, (universe, options))
                  for f in part]
    if usage_events:
        context = _usage_context(universe)
        files += run_usage(usage_tasks(out, usage_events, seed, start_ms, end_ms, batches, part_size,
                                         malformed_share, gzip), context, workers)
    parameters = {
        "entities": entities, "seed": seed, "usage_events": usage_events, "action_requests": action_requests,
        "malformed_share": malformed_share, "days": days, "start_ms": start_ms, "end_ms": end_ms,
        "batches": batches, "part_size": part_size, "mcp_share": mcp_share, "file_sink_share": file_sink_share,
        "duplicate_share": duplicate_share, "out_of_order_share": out_of_order_share,
        "hard_delete_share": hard_delete_share, "gzip": gzip,
    }
    manifest = GeneratorManifest(out, parameters, tuple(files), dict(universe.counts), tuple(universe.users))
    manifest.write()
    return manifest


def _usage_context(universe: Universe, sample: int = 5000) -> UsageContext:
    rng = random.Random(f"{universe.seed}/usage-entities")
    indices = sorted({universe.random_asset(rng) for _ in range(min(sample, universe.entities))})
    return UsageContext(tuple(universe.users), tuple(universe.urn(i) for i in indices),
                         tuple(universe.type_of(i) for i in indices))


def generate_aspect_versions(
    out_dir: Path | str,
    *,
    versions: int,
    seed: int,
    batches: int = 1,
    days: int = 30,
    start_ms: int | None = None,
    malformed_share: float = 0.0,
    part_size: int = DEFAULT_PART_SIZE,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write about `versions` aspect records (no usage events, no action requests), split into time-ordered batches.

    The history runs across the batches: later batches hold new versions of entities created in earlier
    ones. Batch k is `out_dir/batch-0000k/aspects/part-*.mcl.jsonl` (or `out_dir/aspects/` for one batch).

    Args:
        out_dir: folder to write (see `generate_history`).
        versions: the approximate number of aspect records to write (at least 100).
        seed: same seed and arguments give byte-identical files.
        batches: number of equal batches.
        days, start_ms, malformed_share, part_size, gzip, workers, overwrite: as in `generate_history`.

    Returns:
        The manifest; `manifest.totals["aspect_versions"]` is the exact count.

    Raises:
        InputError: an argument out of range.
    """
    _check_positive("versions", versions, 100)
    estimate_entities = max(MIN_ENTITIES, round(versions / 20))
    per_entity = estimate_versions_per_entity(estimate_entities, seed=seed, days=days)
    entities = max(MIN_ENTITIES, round(versions / per_entity))
    return generate_history(out_dir, entities=entities, seed=seed, usage_events=0, action_requests=0,
                            malformed_share=malformed_share, days=days, start_ms=start_ms, batches=batches,
                            part_size=part_size, gzip=gzip, workers=workers, overwrite=overwrite)


def generate_usage_events(
    out_dir: Path | str,
    *,
    events: int,
    seed: int,
    start_ms: int,
    end_ms: int,
    actors: Sequence[str] | None = None,
    entity_urns: Sequence[str] | None = None,
    malformed_share: float = 0.0,
    batches: int = 1,
    part_size: int = DEFAULT_PART_SIZE,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write `events` usage event documents with times in [start_ms, end_ms), plus the manifest.

    Args:
        out_dir: folder to write (see `generate_history`).
        events: number of well-formed usage events.
        seed: same seed and arguments give byte-identical files.
        start_ms, end_ms: the time window (epoch ms); events are in time order across parts.
        actors: corpuser urns acting (default: the users of a generated instance of 500 entities).
        entity_urns: urns that entity events refer to (default: assets of that same instance).
        malformed_share, batches, part_size, gzip, workers, overwrite: as in `generate_history`.

    Raises:
        InputError: an argument out of range, or an actor that is not a `urn:li:corpuser:` urn.
    """
    _check_positive("events", events, 0)
    _check_positive("start_ms", start_ms, 0)
    if not isinstance(end_ms, int) or end_ms <= start_ms:
        raise InputError(f"end_ms: {end_ms!r} is not after start_ms {start_ms!r}")
    _check_share("malformed_share", malformed_share)
    _check_positive("batches", batches)
    _check_positive("part_size", part_size)
    workers = _default_workers(workers)
    universe = Universe(500, seed, start_ms, end_ms)
    context = _usage_context(universe)
    if actors is not None:
        actors = tuple(actors)
        bad = [a for a in actors if not str(a).startswith("urn:li:corpuser:") or len(str(a)) <= len("urn:li:corpuser:")]
        if not actors or bad:
            raise InputError(f"actors: {bad[:3] if bad else actors!r} must be a non-empty list of urn:li:corpuser:<id>")
        context = UsageContext(actors, context.entity_urns, context.entity_types)
    if entity_urns is not None:
        urns = tuple(entity_urns)
        bad = [x for x in urns if not str(x).startswith("urn:li:") or str(x).count(":") < 3]
        if not urns or bad:
            shown = bad[:3] if bad else urns
            raise InputError(f"entity_urns: {shown!r} must be a non-empty list of urn:li:<type>:<id>")
        context = UsageContext(context.actors, urns, tuple(x.split(":", 3)[2] for x in urns))
    out = Path(out_dir)
    _prepare_out_dir(out, overwrite)
    files = run_usage(usage_tasks(out, events, seed, start_ms, end_ms, batches, part_size, malformed_share, gzip),
                       context, workers)
    parameters = {"usage_events": events, "seed": seed, "start_ms": start_ms, "end_ms": end_ms,
                  "malformed_share": malformed_share, "batches": batches, "part_size": part_size, "gzip": gzip}
    manifest = GeneratorManifest(out, parameters, tuple(files), {}, context.actors)
    manifest.write()
    return manifest
