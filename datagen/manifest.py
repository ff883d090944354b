"""The manifest of a generated folder: every file with its counts and the exact malformed lines."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conf.errors import InputError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT_VERSION = 1
# The format tag every manifest carries; unchanged since the generator lived in `bronze/`, so folders
# written before remain readable and a run gives the same bytes as before.
MANIFEST_GENERATOR = "bronze.generator"


@dataclass(frozen=True)
class MalformedLine:
    """One deliberately malformed line: its 1-based line number, the field it breaks and why."""

    line: int
    field: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form."""
        return {"line": self.line, "field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class GeneratedFile:
    """Counts for one written file; `records` = `lines` - malformed lines (for file-sink: array items)."""

    path: str
    kind: str
    format: str
    batch: int
    lines: int
    records: int
    malformed: tuple[MalformedLine, ...]
    aspect_versions: int = 0
    usage_events: int = 0
    action_requests: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    deletes: int = 0
    first_time_ms: int | None = None
    last_time_ms: int | None = None
    aspects: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    event_types: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form."""
        return {
            "path": self.path,
            "kind": self.kind,
            "format": self.format,
            "batch": self.batch,
            "lines": self.lines,
            "records": self.records,
            "malformed": [m.to_json() for m in self.malformed],
            "aspect_versions": self.aspect_versions,
            "usage_events": self.usage_events,
            "action_requests": self.action_requests,
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
            "deletes": self.deletes,
            "first_time_ms": self.first_time_ms,
            "last_time_ms": self.last_time_ms,
            "aspects": dict(sorted(self.aspects.items())),
            "operations": dict(sorted(self.operations.items())),
            "event_types": dict(sorted(self.event_types.items())),
            "bytes": self.bytes,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> GeneratedFile:
        """Rebuild an entry from its manifest form."""
        values = dict(document)
        values["malformed"] = tuple(MalformedLine(**m) for m in document["malformed"])
        return cls(**values)


@dataclass(frozen=True)
class GeneratorManifest:
    """What one generator run wrote under `out_dir` (also saved as `out_dir/manifest.json`)."""

    out_dir: Path
    parameters: dict[str, Any]
    files: tuple[GeneratedFile, ...]
    entities: dict[str, int]
    actors: tuple[str, ...]

    @property
    def totals(self) -> dict[str, Any]:
        """Sums over all files: lines, records, malformed, aspect versions, usage events, action requests."""
        ops: Counter[str] = Counter()
        events: Counter[str] = Counter()
        for f in self.files:
            ops.update(f.operations)
            events.update(f.event_types)
        return {
            "files": len(self.files),
            "lines": sum(f.lines for f in self.files),
            "records": sum(f.records for f in self.files),
            "malformed": sum(len(f.malformed) for f in self.files),
            "aspect_versions": sum(f.aspect_versions for f in self.files),
            "usage_events": sum(f.usage_events for f in self.files),
            "action_requests": sum(f.action_requests for f in self.files),
            "duplicates": sum(f.duplicates for f in self.files),
            "out_of_order": sum(f.out_of_order for f in self.files),
            "deletes": sum(f.deletes for f in self.files),
            "bytes": sum(f.bytes for f in self.files),
            "operations": dict(sorted(ops.items())),
            "event_types": dict(sorted(events.items())),
        }

    def files_of(self, kind: str, batch: int | None = None) -> list[GeneratedFile]:
        """Return the files of one kind (`aspects`, `usage`, `action_requests`), optionally of one batch."""
        return [f for f in self.files if f.kind == kind and (batch is None or f.batch == batch)]

    def path_of(self, entry: GeneratedFile) -> Path:
        """Return the absolute path of a listed file."""
        return self.out_dir / entry.path

    def to_json(self) -> dict[str, Any]:
        """Return the manifest document."""
        return {
            "generator": MANIFEST_GENERATOR,
            "format_version": MANIFEST_FORMAT_VERSION,
            "parameters": self.parameters,
            "totals": self.totals,
            "entities": self.entities,
            "actors": list(self.actors),
            "files": [f.to_json() for f in self.files],
        }

    def write(self) -> Path:
        """Write `manifest.json` into `out_dir` and return its path."""
        path = self.out_dir / MANIFEST_NAME
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, out_dir: Path | str) -> GeneratorManifest:
        """Read the manifest a run wrote into `out_dir`.

        Raises:
            InputError: when `out_dir/manifest.json` is missing or is not a generator manifest.
        """
        path = Path(out_dir) / MANIFEST_NAME
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"out_dir: {str(out_dir)!r} has no {MANIFEST_NAME}") from None
        except ValueError as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        if document.get("generator") != MANIFEST_GENERATOR:
            raise InputError(f"{path}: 'generator' is {document.get('generator')!r}, not {MANIFEST_GENERATOR!r}")
        return cls(
            out_dir=Path(out_dir),
            parameters=document["parameters"],
            files=tuple(GeneratedFile.from_json(f) for f in document["files"]),
            entities=document["entities"],
            actors=tuple(document["actors"]),
        )
