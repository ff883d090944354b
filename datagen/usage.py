"""Usage (audit) event documents: logins, entity views, updates and admin events by realistic actors."""

from __future__ import annotations

import bisect
import json
import math
import multiprocessing
import random
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bronze.formats import USAGE_EVENT_TYPES
from datagen.catalogue import DAY_MS, KEY_ASPECTS
from datagen.files import relative, without_gc, write_lines
from datagen.manifest import GeneratedFile
from datagen.noise import USAGE_MALFORMED_KINDS, with_malformed

_USER_AGENTS = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/123.0.6312.122 Safari/537.36 Edg/123.0.2420.97",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4_1) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.4.1 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:124.0) Gecko/20100101 Firefox/124.0",
)
_API_AGENTS = (
    "DataHub-RestClient/0.13.2.4 (python-requests/2.31.0)",
    "python-requests/2.31.0",
    "acryl-datahub-actions/0.0.15",
    "curl/8.4.0",
    "Apache-HttpClient/4.5.14 (Java/17.0.10)",
    "okta-scim/1.0",
)
_LOGIN_SOURCES = ("PASSWORD_LOGIN", "SSO_LOGIN", "OIDC_IMPLICIT_LOGIN", "PASSWORD_RESET", "FALLBACK_LOGIN",
                  "SIGN_UP_LINK_LOGIN", "GUEST_LOGIN")
_LOGIN_WEIGHTS = (0.35, 0.4, 0.1, 0.04, 0.03, 0.05, 0.03)
_DENIAL_REASONS = ("INVALID_CREDENTIALS", "USER_NOT_FOUND", "USER_SUSPENDED", "NATIVE_AUTH_DISABLED",
                   "SSO_CALLBACK_FAILED")

_USAGE_WEIGHTS = {
    "EntityEvent": 40.0, "UpdateAspectEvent": 20.0, "LogInEvent": 14.0, "FailedLogInEvent": 3.0,
    "DeleteEntityEvent": 1.5, "CreateUserEvent": 1.5, "UpdateUserEvent": 2.5, "CreateAccessTokenEvent": 2.5,
    "RevokeAccessTokenEvent": 1.5, "CreatePolicyEvent": 1.2, "UpdatePolicyEvent": 2.0, "DeletePolicyEvent": 0.5,
    "CreateIngestionSourceEvent": 1.3, "UpdateIngestionSourceEvent": 2.5,
}
_PERSON_EVENTS = frozenset({"LogInEvent", "FailedLogInEvent", "EntityEvent", "CreateAccessTokenEvent"})
_ENTITY_VIEW_ASPECTS = ("datasetProperties", "schemaMetadata", "ownership", "globalTags", "glossaryTerms",
                        "domains", "editableDatasetProperties", "deprecation", "structuredProperties")
_UPDATE_ASPECTS = ("ownership", "globalTags", "glossaryTerms", "domains", "editableDatasetProperties",
                   "editableSchemaMetadata", "deprecation", "structuredProperties", "status")


@dataclass(frozen=True)
class _UsageTask:
    part: int
    batch: int
    events: int
    start_ms: int
    end_ms: int
    path: str
    out_dir: str
    malformed_share: float
    gzip: bool
    seed: int


@dataclass(frozen=True)
class UsageContext:
    actors: tuple[str, ...]
    entity_urns: tuple[str, ...]
    entity_types: tuple[str, ...]


def _ipv4(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.6:
        return f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.7:
        return f"172.{rng.randint(16, 31)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    return f"{rng.choice((34, 52, 81, 91, 185, 203))}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _ipv6(rng: random.Random) -> str:
    prefix = rng.choice(("2001:db8", "2a02:1210", "2600:1f18", "fd12:3456"))
    return prefix + ":" + ":".join(f"{rng.getrandbits(16):x}" for _ in range(6))


class _ActorProfile:
    __slots__ = ("ips", "browsers", "is_service")

    def __init__(self, seed: int, actor: str):
        rng = random.Random(f"{seed}/actor/{actor}")
        self.is_service = actor.endswith(":datahub") or "svc" in actor
        self.ips = [_ipv6(rng) if rng.random() < 0.2 else _ipv4(rng) for _ in range(rng.randint(1, 3))]
        self.browsers = [rng.choice(_USER_AGENTS) for _ in range(rng.randint(1, 2))]


def _usage_part(task: _UsageTask) -> list[GeneratedFile]:
    """Generate and write one time slice of usage events."""
    with without_gc():
        return _usage_events(task)


def _usage_events(task: _UsageTask) -> list[GeneratedFile]:
    context = _WORKER_CONTEXT
    assert context is not None
    rng = random.Random(f"{task.seed}/usage/{task.part}")
    actors = context.actors
    profiles: dict[str, _ActorProfile] = {}
    types = list(_USAGE_WEIGHTS)
    cum: list[float] = []
    total = 0.0
    for name in types:
        total += _USAGE_WEIGHTS[name]
        cum.append(total)
    # Every type occurs in a usage file big enough to hold them all, at random places.
    forced: dict[int, str] = {}
    if task.events >= 4 * len(USAGE_EVENT_TYPES):
        forced = dict(zip(rng.sample(range(task.events), len(USAGE_EVENT_TYPES)), USAGE_EVENT_TYPES))
    times = sorted(_office_hours_time(rng, task.start_ms, task.end_ms) for _ in range(task.events))
    tokens: list[str] = []
    policies: list[str] = []
    sources: list[str] = []
    lines: list[str] = []
    counts: Counter[str] = Counter()
    for n, t in enumerate(times):
        event_type = forced.get(n) or types[bisect.bisect(cum, rng.random() * total)]
        actor = actors[int(len(actors) * rng.random() ** 2)]
        profile = profiles.get(actor)
        if profile is None:
            profile = profiles[actor] = _ActorProfile(task.seed, actor)
        if profile.is_service and event_type in _PERSON_EVENTS and len(actors) > 1:
            actor = actors[1 + int((len(actors) - 1) * rng.random() ** 2)]
            profile = profiles.get(actor)
            if profile is None:
                profile = profiles[actor] = _ActorProfile(task.seed, actor)
        doc: dict[str, Any] = {"type": event_type, "actorUrn": actor, "timestamp": t}
        source = "GRAPHQL"
        if event_type in ("EntityEvent", "UpdateAspectEvent", "DeleteEntityEvent"):
            k = int(len(context.entity_urns) * rng.random())
            doc["entityUrn"] = context.entity_urns[k]
            doc["entityType"] = context.entity_types[k]
            if event_type == "EntityEvent":
                doc["aspectName"] = rng.choice(_ENTITY_VIEW_ASPECTS)
            elif event_type == "UpdateAspectEvent":
                doc["aspectName"] = rng.choice(_UPDATE_ASPECTS)
                source = rng.choice(("GRAPHQL", "GRAPHQL", "RESTLI", "OPENAPI"))
            else:
                doc["aspectName"] = KEY_ASPECTS.get(context.entity_types[k], "status")
                source = rng.choice(("GRAPHQL", "RESTLI", "OPENAPI"))
        elif event_type in ("CreateUserEvent", "UpdateUserEvent"):
            doc["entityUrn"] = actors[int(len(actors) * rng.random())]
            doc["entityType"] = "corpuser"
            doc["aspectName"] = "corpUserInfo" if event_type == "CreateUserEvent" else rng.choice(
                ("corpUserInfo", "corpUserEditableInfo", "corpUserStatus"))
            source = "SSO_SCIM" if rng.random() < 0.6 else "GRAPHQL"
        elif event_type in ("CreateAccessTokenEvent", "RevokeAccessTokenEvent"):
            if event_type == "CreateAccessTokenEvent" or not tokens:
                tokens.append(f"urn:li:dataHubAccessToken:{rng.getrandbits(128):032x}")
            doc["entityUrn"] = tokens[-1] if event_type == "CreateAccessTokenEvent" else tokens.pop(
                int(len(tokens) * rng.random()))
            doc["entityType"] = "dataHubAccessToken"
            doc["aspectName"] = "dataHubAccessTokenInfo"
        elif event_type in ("CreatePolicyEvent", "UpdatePolicyEvent", "DeletePolicyEvent"):
            if event_type == "CreatePolicyEvent" or not policies:
                policies.append(f"urn:li:dataHubPolicy:{_uuid(rng)}")
            if event_type == "CreatePolicyEvent":
                doc["entityUrn"] = policies[-1]
            elif event_type == "DeletePolicyEvent":
                doc["entityUrn"] = policies.pop(int(len(policies) * rng.random()))
            else:
                doc["entityUrn"] = policies[int(len(policies) * rng.random())]
            doc["entityType"] = "dataHubPolicy"
            doc["aspectName"] = "dataHubPolicyInfo"
            source = rng.choice(("GRAPHQL", "OPENAPI"))
        elif event_type in ("CreateIngestionSourceEvent", "UpdateIngestionSourceEvent"):
            if event_type == "CreateIngestionSourceEvent" or not sources:
                sources.append(f"urn:li:dataHubIngestionSource:{_uuid(rng)}")
            doc["entityUrn"] = sources[-1] if event_type == "CreateIngestionSourceEvent" else sources[
                int(len(sources) * rng.random())]
            doc["entityType"] = "dataHubIngestionSource"
            doc["aspectName"] = "dataHubIngestionSourceInfo"
        elif event_type in ("LogInEvent", "FailedLogInEvent"):
            source = "GRAPHQL" if rng.random() < 0.8 else "RESTLI"
        api_client = profile.is_service or source in ("RESTLI", "OPENAPI") or source == "SSO_SCIM"
        doc["eventSource"] = source
        doc["sourceIP"] = rng.choice(profile.ips)
        doc["userAgent"] = (_API_AGENTS[5] if source == "SSO_SCIM" else rng.choice(_API_AGENTS[:5])) if api_client \
            else rng.choice(profile.browsers)
        if rng.random() < 0.92:
            doc["traceId"] = f"{rng.getrandbits(128):032x}"
        if event_type in ("LogInEvent", "FailedLogInEvent"):
            login = rng.choices(_LOGIN_SOURCES, weights=_LOGIN_WEIGHTS)[0]
            # Older DataHub frontends send the camelCase spelling.
            doc["loginSource"] = _camel(login) if rng.random() < 0.4 else login
            if event_type == "FailedLogInEvent":
                doc["loginDenialReason"] = rng.choice(_DENIAL_REASONS)
        doc["usageSource"] = "backend"
        counts[event_type] += 1
        lines.append(json.dumps(doc))
    lines, malformed = with_malformed(lines, task.malformed_share, USAGE_MALFORMED_KINDS, rng, needs_aspect=False)
    size = write_lines(Path(task.out_dir) / task.path, lines, task.gzip)
    return [GeneratedFile(path=task.path, kind="usage", format="usage", batch=task.batch, lines=len(lines),
                          records=len(lines) - len(malformed), malformed=tuple(malformed), usage_events=task.events,
                          first_time_ms=times[0] if times else None, last_time_ms=times[-1] if times else None,
                          event_types=dict(counts), bytes=size)]


_WORKER_CONTEXT: UsageContext | None = None


def _init_usage_worker(context: UsageContext) -> None:
    global _WORKER_CONTEXT
    _WORKER_CONTEXT = context


def _office_hours_time(rng: random.Random, start_ms: int, end_ms: int) -> int:
    """A time in [start_ms, end_ms), busier in office hours (peak 13:30 UTC, a little traffic at night)."""
    span = end_ms - start_ms
    for _ in range(64):
        t = start_ms + int(span * rng.random())
        hour = (t % DAY_MS) / 3_600_000
        if rng.random() * 1.12 < 0.12 + math.exp(-(((hour - 13.5) / 3.5) ** 2) / 2):
            return t
    return t


def _camel(upper: str) -> str:
    head, *rest = upper.lower().split("_")
    return head + "".join(w.title() for w in rest)


def _uuid(rng: random.Random) -> str:
    return "%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                           0x8000 | rng.getrandbits(14), rng.getrandbits(48))


def usage_tasks(out_dir: Path, events: int, seed: int, start_ms: int, end_ms: int, batches: int, part_size: int,
                 malformed_share: float, gzip: bool) -> list[_UsageTask]:
    """Split the events into time slices: equal counts per batch, at most `part_size` per file."""
    tasks: list[_UsageTask] = []
    span = end_ms - start_ms
    part = 0
    for batch in range(batches):
        batch_events = events * (batch + 1) // batches - events * batch // batches
        b_start = start_ms + span * batch // batches
        b_end = start_ms + span * (batch + 1) // batches
        parts = max(1, math.ceil(batch_events / part_size))
        for k in range(parts):
            n = batch_events * (k + 1) // parts - batch_events * k // parts
            p_start = b_start + (b_end - b_start) * k // parts
            p_end = b_start + (b_end - b_start) * (k + 1) // parts
            path = relative("usage", batch, batches, part, ".jsonl", gzip)
            tasks.append(_UsageTask(part, batch, n, p_start, max(p_end, p_start + 1), path, str(out_dir),
                                    malformed_share, gzip, seed))
            part += 1
    return tasks


def run_usage(tasks: list[_UsageTask], context: UsageContext, workers: int) -> list[GeneratedFile]:
    if workers <= 1 or len(tasks) <= 1:
        _init_usage_worker(context)
        results = [_usage_part(task) for task in tasks]
    else:
        mp = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=mp,
                                 initializer=_init_usage_worker, initargs=(context,)) as pool:
            results = list(pool.map(_usage_part, tasks))
    return [f for files in results for f in files]
