"""A one-process, standard-library reference for refine: DataHub MCL JSON lines -> Entity Change Event ids.

`lakehouse bench silver --baseline` runs it on the same input as land + refine to show what the pipeline
gains over a plain script: json.loads per line, a dict of state per (entity, aspect), the diff rules of
`silver.events` written as Python, and the event ids of `silver.events.event_id`. It derives ids only
(no tables, no event rows) and expects input the landing would land whole: a line that is not an MCL
record (no urn, aspect name or known change type, an aspect that is not a JSON object, a version that is
not a whole number) is counted and skipped instead of being quarantined with a reason.

Run it as `python -m pipelines.bench.baseline <batch> ...`: each argument is one batch, a JSON-lines file
or a folder of them (`*.jsonl`, in name order), processed in the order given with the state carried on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pipelines.bench.baseline_rules import (
    URN_TYPE,
    Change,
    Pair,
    is_key_aspect,
    json_object,
    key_lifecycle_changes,
    rules_by_aspect,
)

CHANGE_TYPES = ("UPSERT", "CREATE", "CREATE_ENTITY", "UPDATE", "DELETE", "PATCH", "RESTATE")
_WHOLE_NUMBER = re.compile(r"^[0-9]{1,18}$")
_NULL_MARK = "\u2400"


class Version(NamedTuple):
    """One aspect version as landed: its ordering key, its arrival and what the diff reads."""

    order_key: str
    arrival: tuple[int, int]
    entity_type: str | None
    change_type: str
    aspect_text: str | None


@dataclass
class BaselineResult:
    """What a baseline run derived: the event ids, the records it read and skipped, the pairs it diffed,
    and the seconds spent reading the files and parsing their records (the rest is sequencing and diffing)."""

    event_ids: set[str] = field(default_factory=set)
    records: int = 0
    skipped_lines: int = 0
    pairs: int = 0
    read_parse_s: float = 0.0


# ---- reading ---------------------------------------------------------------------------------------


def batch_files(batch: Path) -> list[Path]:
    """The JSON-lines files of one batch argument: the file itself, or a folder's `*.jsonl` files in name order."""
    if batch.is_dir():
        return sorted(p for p in batch.iterdir() if p.name.endswith(".jsonl"))
    return [batch]


def order_key(version: int | None, created_time: int | None, is_delete: bool) -> str:
    """`silver.sequencing.order_key`: `v<version, 19 digits>.<0|1>`, or `t<created ms>.<0|1>` without a version."""
    rank = "1" if is_delete else "0"
    if version is not None:
        return f"v{_pad(version)}.{rank}"
    return f"t{_pad(created_time or 0)}.{rank}"


def _pad(number: int) -> str:
    # lpad: a longer text is cut to the width.
    return str(number).rjust(19, "0")[:19]


def read_versions(files: list[Path]) -> tuple[dict[tuple[str, str], list[Version]], int, int]:
    """Group the MCL records of one batch's files by (entity urn, aspect name).

    Returns:
        the versions per key in arrival order, the records read, the lines skipped.
    """
    grouped: dict[tuple[str, str], list[Version]] = {}
    records = skipped = 0
    for file_index, path in enumerate(files):
        with open(path, encoding="utf-8") as lines:
            for line_number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                parsed = _parse_record(line)
                if parsed is None:
                    skipped += 1
                    continue
                key, version = parsed
                grouped.setdefault(key, []).append(version._replace(arrival=(file_index, line_number)))
                records += 1
    return grouped, records, skipped


def _parse_record(line: str) -> tuple[tuple[str, str], Version] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    urn, aspect_name, change_type = record.get("entityUrn"), record.get("aspectName"), record.get("changeType")
    if not (isinstance(urn, str) and isinstance(aspect_name, str) and aspect_name.strip() and change_type in CHANGE_TYPES):
        return None
    is_delete = change_type == "DELETE"
    aspect_text = None
    if not is_delete:
        aspect_text = json_object(record.get("aspect")).get("value")
        if not isinstance(aspect_text, str) or not aspect_text.lstrip(" \t\r\n").startswith("{"):
            return None
    system = json_object(record.get("systemMetadata"))
    version_text = system.get("version")
    if version_text is not None and not (isinstance(version_text, str) and _WHOLE_NUMBER.match(version_text)):
        return None
    created_time = json_object(record.get("created")).get("time")
    if created_time is None:
        created_time = system.get("lastObserved")
    entity_type = record.get("entityType")
    if entity_type is None:
        match = URN_TYPE.match(urn)
        entity_type = match.group(1) if match else ""
    key = order_key(int(version_text) if version_text is not None else None, created_time, is_delete)
    return (urn, aspect_name), Version(key, (0, 0), entity_type, change_type, aspect_text)


# ---- sequencing ------------------------------------------------------------------------------------


class StateRow(NamedTuple):
    """The newest accepted version of one key: what the next version is compared with."""

    order_key: str
    change_type: str
    aspect_text: str | None


def to_pairs(
    grouped: dict[tuple[str, str], list[Version]], state: dict[tuple[str, str], StateRow]
) -> Iterator[Pair]:
    """Pair every accepted version of the batch with its predecessor and move the state on.

    Of the copies of one version the first to arrive counts; a version not newer than the state's is
    late or a duplicate. The accepted versions of a key chain from the state's version, oldest first.
    """
    for (urn, aspect_name), versions in grouped.items():
        current = state.get((urn, aspect_name))
        prev_change_type = current.change_type if current else None
        prev = _load(current.aspect_text) if current and current.change_type.upper() != "DELETE" else None
        last_key = current.order_key if current else None
        for version in sorted(versions, key=lambda v: (v.order_key, v.arrival)):
            if last_key is not None and version.order_key <= last_key:
                continue
            is_delete = version.change_type.upper() == "DELETE"
            new = None if is_delete else _load(version.aspect_text)
            yield Pair(urn, version.entity_type, aspect_name, version.order_key, is_delete, prev_change_type, prev, new)
            prev, prev_change_type, last_key = new, version.change_type, version.order_key
            state[(urn, aspect_name)] = StateRow(version.order_key, version.change_type, version.aspect_text)


def _load(text: str | None) -> dict | None:
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


# ---- ids -------------------------------------------------------------------------------------------


def event_id(pair: Pair, change: Change) -> str:
    """`silver.events.event_id`: sha256 over the event's identity, a visible marker for each null part."""
    entity_urn, category, operation, modifier, params = change
    present = {k: v for k, v in params.items() if v is not None}
    params_json = json.dumps(present, ensure_ascii=False, separators=(",", ":")) if present else None
    parts = (entity_urn, pair.entity_urn, pair.aspect_name, pair.order_key, category, operation, modifier, params_json)
    return hashlib.sha256("\u001f".join(_NULL_MARK if p is None else p for p in parts).encode("utf-8")).hexdigest()


def pair_changes(pair: Pair, rules: dict[str, list[Callable[[Pair], Iterable[Change]]]]) -> Iterator[Change]:
    """The changes a pair makes. A DELETE of a non-key aspect keeps only its REMOVE events."""
    key_aspect = is_key_aspect(pair.aspect_name, pair.entity_type)
    pair_rules = [key_lifecycle_changes] if key_aspect else []
    for rule in pair_rules + rules.get(pair.aspect_name, []):
        for change in rule(pair):
            if not pair.is_delete or key_aspect or change[2] == "REMOVE":
                yield change


def derive_changes(
    batches: list[list[Path]], owner_category: str = "OWNER", counts: BaselineResult | None = None
) -> Iterator[tuple[Pair, Change]]:
    """Every change of batches of MCL JSON-lines files, oldest batch first, with the pair it comes from.

    Args:
        batches: each batch's files, in arrival order.
        owner_category: OWNER or OWNERSHIP, as `events.owner_category`.
        counts: where to count the records read, lines skipped, pairs and reading time (optional).
    """
    rules = rules_by_aspect(owner_category)
    counts = counts if counts is not None else BaselineResult()
    state: dict[tuple[str, str], StateRow] = {}
    for files in batches:
        started = time.perf_counter()
        grouped, records, skipped = read_versions(files)
        counts.read_parse_s += time.perf_counter() - started
        counts.records += records
        counts.skipped_lines += skipped
        for pair in to_pairs(grouped, state):
            counts.pairs += 1
            for change in pair_changes(pair, rules):
                yield pair, change


def derive_event_ids(batches: list[list[Path]], owner_category: str = "OWNER") -> BaselineResult:
    """The change event ids of batches of MCL JSON-lines files (`derive_changes`), with the counts."""
    result = BaselineResult()
    result.event_ids = {event_id(pair, change) for pair, change in derive_changes(batches, owner_category, result)}
    return result


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.bench.baseline <batch> ... [--ids-out FILE]`: print what was derived as JSON.

    `--ids-out` writes the event ids, sorted, one per line (how the benchmark compares them).
    """
    parser = argparse.ArgumentParser(prog="python -m pipelines.bench.baseline", description=__doc__.splitlines()[0])
    parser.add_argument("batches", nargs="+", type=Path, help="one batch each: a JSON-lines file or a folder of them")
    parser.add_argument("--ids-out", type=Path, help="write the event ids here, one per line")
    parser.add_argument("--owner-category", default="OWNER", choices=("OWNER", "OWNERSHIP"))
    args = parser.parse_args(argv)
    batches = [batch_files(b) for b in args.batches]
    missing = [str(b) for b, files in zip(args.batches, batches) if not files or not all(f.is_file() for f in files)]
    if missing:
        parser.error(f"no JSON-lines files at: {', '.join(missing)}")
    started = time.perf_counter()
    result = derive_event_ids(batches, args.owner_category)
    wall = time.perf_counter() - started
    if args.ids_out:
        args.ids_out.write_text("".join(f"{i}\n" for i in sorted(result.event_ids)))
    print(json.dumps({"records": result.records, "skipped_lines": result.skipped_lines, "pairs": result.pairs,
                      "events": len(result.event_ids), "wall_s": round(wall, 3),
                      "read_parse_s": round(result.read_parse_s, 3), "peak_rss_bytes": peak_rss_bytes()}))
    return 0


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory (VmHWM), None where /proc does not tell.

    Not getrusage: on Linux a child's ru_maxrss starts from its parent's peak at fork.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


if __name__ == "__main__":
    sys.exit(main())
