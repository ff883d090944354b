"""DataHub's wire forms of one aspect version: MCL topic-dump lines, MCP lines and file-sink JSON objects."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from conf.errors import InputError
from datagen.catalogue import KEY_ASPECTS, TYPE_CLASS

INGEST_ACTOR = "urn:li:corpuser:datahub"
_NOT_MOVABLE = ("out_of_order", "duplicate", "reobserve")
NO_RUN = "no-run-id-provided"
_CT = '"contentType": "application/json"}'

FMT_MCL, FMT_MCP, FMT_FILE_SINK = 0, 1, 2
FORMAT_NAMES = ("mcl", "mcp", "file-sink")
FORMAT_SUFFIX = (".mcl.jsonl", ".mcp.jsonl", ".file-sink.json")

# `json.dumps` with its default settings, without the per-call keyword handling (it is called for
# every aspect value); the output is byte-for-byte that of `json.dumps`.
dump_json = json.JSONEncoder().encode


def stamp(t: int, actor: str) -> dict[str, Any]:
    return {"time": t, "actor": actor}


def new_run_id(rng: random.Random, source: str, t: int) -> str:
    return f"{source}-{t // 1000}-{rng.getrandbits(24):06x}"


def _type_union(family: str) -> str:
    cls = TYPE_CLASS[family]
    if family == "array":
        return '{"type": {"com.linkedin.schema.ArrayType": {"nestedType": ["string"]}}}'
    if family == "map":
        return '{"type": {"com.linkedin.schema.MapType": {"keyType": "string", "valueType": "string"}}}'
    return '{"type": {"com.linkedin.schema.%s": {}}}' % cls


class Field:
    """A schema field; `rendered` caches its JSON for the schemaMetadata template."""

    __slots__ = ("path", "nullable", "family", "native", "key", "description", "tags", "terms", "rendered")

    def __init__(self, path: str, nullable: bool, family: str, native: str, key: bool = False):
        self.path = path
        self.nullable = nullable
        self.family = family
        self.native = native
        self.key = key
        self.description: str | None = None
        self.tags: tuple[str, ...] = ()
        self.terms: tuple[str, ...] = ()
        self.rendered: str | None = None

    def render(self, t: int) -> str:
        if self.rendered is None:
            parts = ['{"fieldPath": ', dump_json(self.path), ', "nullable": ', "true" if self.nullable else "false"]
            if self.description is not None:
                parts += [', "description": ', dump_json(self.description)]
            parts += [', "type": ', _type_union(self.family), ', "nativeDataType": ', dump_json(self.native),
                      ', "recursive": false']
            if self.tags:
                parts += [', "globalTags": ', dump_json({"tags": [{"tag": x} for x in self.tags]})]
            if self.terms:
                parts += [', "glossaryTerms": ', dump_json({
                    "terms": [{"urn": x, "actor": INGEST_ACTOR} for x in self.terms],
                    "auditStamp": stamp(t, INGEST_ACTOR)})]
            parts += [', "isPartOfKey": ', "true" if self.key else "false", "}"]
            self.rendered = "".join(parts)
        return self.rendered


class _Aspect:
    __slots__ = ("version", "escaped", "sysmeta", "run_id", "record", "value")

    def __init__(self, version: int, escaped: str, sysmeta: str, run_id: str, record: int, value: str):
        self.version = version
        self.escaped = escaped
        self.sysmeta = sysmeta
        self.run_id = run_id
        self.record = record
        self.value = value


@dataclass
class Options:
    duplicate_share: float
    out_of_order_share: float
    hard_delete_share: float
    mcp_share: float
    file_sink_share: float


class Sink:
    """Records of one part: (sort_ms, seq, format, line or file-sink dict, aspect, operation, time_ms)."""

    def __init__(self) -> None:
        self.records: list[list[Any]] = []

    def add(self, sort_ms: int, fmt: int, line: Any, aspect: str, op: str, time_ms: int) -> int:
        self.records.append([sort_ms, len(self.records), fmt, line, aspect, op, time_ms])
        return len(self.records) - 1


class EntityWriter:
    """Writes versions of one entity's aspects, in MCL, MCP or file-sink shape, tracking versions."""

    def __init__(self, entity_type: str, urn: str, fmt: int, sink: Sink, rng: random.Random, options: Options):
        if '"' in urn or "\\" in urn:
            raise InputError(f"urn: {urn!r} would need JSON escaping")
        self.entity_type = entity_type
        self.urn = urn
        self.fmt = fmt
        self.sink = sink
        self.rng = rng
        self.options = options
        self.state: dict[str, _Aspect] = {}
        self.head = f'{{"entityType": "{entity_type}", "entityUrn": "{urn}", "changeType": '

    def _render(self, aspect: str, version: int, escaped: str, value: str, t: int, actor: str, run_id: str,
                prev: _Aspect | None) -> tuple[Any, str]:
        """Return the record (a line, or a dict for the file sink) and its systemMetadata JSON."""
        fmt = self.fmt
        if fmt == FMT_MCL:
            last_run = prev.run_id if prev else NO_RUN
            sysmeta = f'{{"lastObserved": {t}, "runId": "{run_id}", "lastRunId": "{last_run}", "version": "{version}"}}'
            parts = [self.head, '"UPSERT", "aspectName": "', aspect, '", "aspect": {"value": ', escaped, ", ", _CT,
                     ', "systemMetadata": ', sysmeta]
            if prev:
                parts += [', "previousAspectValue": {"value": ', prev.escaped, ", ", _CT,
                          ', "previousSystemMetadata": ', prev.sysmeta]
            parts += [f', "created": {{"time": {t}, "actor": "{actor}"}}}}']
            return "".join(parts), sysmeta
        if fmt == FMT_MCP:
            sysmeta = f'{{"lastObserved": {t}, "runId": "{run_id}", "lastRunId": "{NO_RUN}"}}'
            return "".join([self.head, '"UPSERT", "aspectName": "', aspect, '", "aspect": {"value": ', escaped, ", ",
                            _CT, ', "systemMetadata": ', sysmeta, "}"]), sysmeta
        record = {"entityType": self.entity_type, "entityUrn": self.urn, "changeType": "UPSERT", "aspectName": aspect,
                  "aspect": {"json": json.loads(value)},
                  "systemMetadata": {"lastObserved": t, "runId": run_id, "lastRunId": NO_RUN}}
        return record, ""

    def upsert(self, aspect: str, value: str, t: int, actor: str, run_id: str, op: str) -> None:
        """Write a new version of `aspect` (its JSON text `value`) at time `t` by `actor`."""
        prev = self.state.get(aspect)
        version = prev.version + 1 if prev else 1
        escaped = dump_json(value)
        fmt = self.fmt
        line, sysmeta = self._render(aspect, version, escaped, value, t, actor, run_id, prev)
        sink = self.sink
        index = sink.add(t, fmt, line, aspect, op, t)
        opts = self.options
        if fmt != FMT_FILE_SINK and self.rng.random() < opts.duplicate_share:
            # A replay of the very same record a little later (a re-sent Kafka message, a re-run file).
            sink.add(t + 1 + int(self.rng.random() * 600_000), fmt, line, aspect, "duplicate", t)
        if (prev is not None and fmt == FMT_MCL and sink.records[prev.record][5] not in _NOT_MOVABLE
                and self.rng.random() < opts.out_of_order_share):
            # The older version arrives after the newer one.
            older = sink.records[prev.record]
            older[0] = t + 1 + int(self.rng.random() * 5_000)
            older[5] = "out_of_order"
        self.state[aspect] = _Aspect(version, escaped, sysmeta, run_id, index, value)

    def reobserve(self, aspect: str, t: int, actor: str, run_id: str) -> None:
        """Write the current value again under the same version: an ingestion run that found nothing new.

        DataHub keeps the version and only the system metadata (lastObserved, runId) moves on.
        """
        prev = self.state[aspect]
        line, sysmeta = self._render(aspect, prev.version, prev.escaped, prev.value, t, actor, run_id, prev)
        index = self.sink.add(t, self.fmt, line, aspect, "reobserve", t)
        self.state[aspect] = _Aspect(prev.version, prev.escaped, sysmeta, run_id, index, prev.value)

    def hard_delete(self, t: int, actor: str) -> int:
        """Write DataHub's DELETE records: every aspect in name order, then the key aspect; return the end time."""
        key = KEY_ASPECTS[self.entity_type]
        names = sorted(a for a in self.state if a != key) + [key]
        for name in names:
            prev = self.state[name]
            if self.fmt == FMT_MCL:
                sysmeta = (f'{{"lastObserved": {t}, "runId": "{NO_RUN}", "lastRunId": "{prev.run_id}", '
                           f'"version": "{prev.version}"}}')
                line = "".join([self.head, '"DELETE", "aspectName": "', name, '", "systemMetadata": ', sysmeta,
                                ', "previousAspectValue": {"value": ', prev.escaped, ", ", _CT,
                                ', "previousSystemMetadata": ', prev.sysmeta,
                                f', "created": {{"time": {t}, "actor": "{actor}"}}}}'])
            else:
                line = "".join([self.head, '"DELETE", "aspectName": "', name, '", "systemMetadata": ',
                                f'{{"lastObserved": {t}, "runId": "{NO_RUN}", "lastRunId": "{NO_RUN}"}}}}'])
            self.sink.add(t, self.fmt, line, name, "hard_delete", t)
            t += 1
        self.state.clear()
        return t
