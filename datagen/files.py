"""Writing parts: the files of one part of entities, and running parts in worker processes."""

from __future__ import annotations

import contextlib
import gc
import gzip as gzip_module
import io
import json
import multiprocessing
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datagen.catalogue import Universe
from datagen.manifest import GeneratedFile, MalformedLine
from datagen.noise import MCL_MALFORMED_KINDS, MCP_MALFORMED_KINDS, with_malformed
from datagen.simulation import Simulator
from datagen.wire import FMT_FILE_SINK, FMT_MCL, FMT_MCP, FORMAT_NAMES, FORMAT_SUFFIX, Options, Sink


def write_lines(path: Path, lines: Sequence[str], gzip: bool, head: str = "", separator: str = "\n",
                 tail: str = "\n") -> int:
    """Write `head`, the lines joined by `separator`, then `tail` (none when there are no lines); return the size.

    Written in slices, so a part never exists twice in memory. Gzip output is byte-stable (no name, mtime 0).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw:
        binary: Any = raw
        if gzip:
            binary = gzip_module.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
        with io.TextIOWrapper(binary, encoding="utf-8", newline="\n", write_through=False) as out:
            if lines or head:
                out.write(head)
            for start in range(0, len(lines), 4096):
                if start:
                    out.write(separator)
                out.write(separator.join(lines[start:start + 4096]))
            if lines:
                out.write(tail)
    return path.stat().st_size


def relative(kind: str, batch: int, batches: int, part: int, suffix: str, gzip: bool) -> str:
    """Return a file's path inside the output folder: `[batch-NNNNN/]kind/part-NNNNN<suffix>[.gz]`."""
    folder = kind if batches == 1 else f"batch-{batch:05d}/{kind}"
    return f"{folder}/part-{part:05d}{suffix}{'.gz' if gzip else ''}"


@dataclass(frozen=True)
class PartTask:
    """One part of the work: entities (or action requests) [first, last), and how to write their files."""

    part: int
    first: int
    last: int
    out_dir: str
    batches: int
    malformed_share: float
    gzip: bool
    kind: str  # "aspects" or "action_requests"


_WORKER_UNIVERSE: Universe | None = None
_WORKER_OPTIONS: Options | None = None


def _init_worker(universe: Universe, options: Options) -> None:
    global _WORKER_UNIVERSE, _WORKER_OPTIONS
    _WORKER_UNIVERSE = universe
    _WORKER_OPTIONS = options


def worker_state() -> tuple[Universe, Options]:
    """Return the universe and options `run_parts` set up in this process."""
    assert _WORKER_UNIVERSE is not None and _WORKER_OPTIONS is not None
    return _WORKER_UNIVERSE, _WORKER_OPTIONS


def _split_batches(records: list[list[Any]], batches: int) -> list[list[list[Any]]]:
    n = len(records)
    return [records[n * b // batches: n * (b + 1) // batches] for b in range(batches)]


def _aspect_file(records: list[list[Any]], fmt: int, path: str, kind: str, batch: int, task: PartTask,
                 rng: random.Random) -> GeneratedFile:
    """Write one file of aspect (or action request) records and return its manifest entry."""
    aspects: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    for r in records:
        aspects[r[4]] += 1
        ops[r[5]] += 1
    times = [r[6] for r in records]
    malformed: list[MalformedLine] = []
    target = Path(task.out_dir) / path
    if fmt == FMT_FILE_SINK:
        # DataHub's file sink: a JSON array, one indented object per record.
        if records:
            size = write_lines(target, [json.dumps(r[3], indent=4) for r in records], task.gzip, head="[\n",
                                separator=",\n", tail="\n]")
        else:
            size = write_lines(target, ["[]"], task.gzip, tail="")
        lines_count = len(records)
    else:
        lines = [r[3] for r in records]
        kinds = MCP_MALFORMED_KINDS if fmt == FMT_MCP else MCL_MALFORMED_KINDS
        lines, malformed = with_malformed(lines, task.malformed_share, kinds, rng, needs_aspect=True)
        size = write_lines(target, lines, task.gzip)
        lines_count = len(lines)
    is_requests = kind == "action_requests"
    return GeneratedFile(
        path=path, kind=kind, format=FORMAT_NAMES[fmt], batch=batch, lines=lines_count,
        records=lines_count - len(malformed), malformed=tuple(malformed),
        aspect_versions=0 if is_requests else len(records),
        action_requests=ops.get("request_created", 0) if is_requests else 0,
        duplicates=ops.get("duplicate", 0), out_of_order=ops.get("out_of_order", 0),
        deletes=ops.get("hard_delete", 0), first_time_ms=min(times) if times else None,
        last_time_ms=max(times) if times else None, aspects=dict(aspects), operations=dict(ops), bytes=size,
    )


def write_records(sink: Sink, task: PartTask, rng: random.Random) -> list[GeneratedFile]:
    records = sink.records
    records.sort(key=lambda r: (r[0], r[1]))
    files: list[GeneratedFile] = []
    for fmt in (FMT_MCL, FMT_MCP, FMT_FILE_SINK):
        of_format = [r for r in records if r[2] == fmt]
        if not of_format:
            continue
        for batch, chunk in enumerate(_split_batches(of_format, task.batches)):
            path = relative(task.kind, batch, task.batches, task.part, FORMAT_SUFFIX[fmt], task.gzip)
            files.append(_aspect_file(chunk, fmt, path, task.kind, batch, task, rng))
    return files


@contextlib.contextmanager
def without_gc() -> Iterator[None]:
    """Pause the cycle collector: a part allocates millions of small acyclic objects, and the collector's
    repeated scans of them cost about a seventh of the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def aspect_part(task: PartTask) -> list[GeneratedFile]:
    """Generate and write the histories of entities [first, last) of the universe."""
    universe, options = worker_state()
    with without_gc():
        sink = Sink()
        for index in range(task.first, task.last):
            Simulator(universe, index, sink, options).run()
        return write_records(sink, task, random.Random(f"{universe.seed}/malformed/aspects/{task.part}"))


def run_parts(function: Any, tasks: list[Any], workers: int, initargs: tuple[Any, ...]) -> list[Any]:
    """Run tasks in order; in worker processes when there is more than one task and worker."""
    if workers <= 1 or len(tasks) <= 1:
        _init_worker(*initargs)
        return [function(task) for task in tasks]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                             initializer=_init_worker, initargs=initargs) as pool:
        return list(pool.map(function, tasks))
