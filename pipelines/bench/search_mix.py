"""The request mixes of `lakehouse bench search`: the basic three kinds, and searches shaped like DataHub's contract.

A mix is a dict of named request kinds. Each kind draws one search (query parameters and body) from a
random source; `pages` > 1 follows nextScrollId that many pages deep, one request per page, as a user
paging through results does.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from conf.errors import InputError
from conf.values import DAY_MS, HOUR_MS

MIXES = ("basic", "contract")
# Entity types, aspects and event types the generated usage events hold (datagen.usage).
_ASSET_TYPES = (("dataset",), ("dataset", "chart"), ("dashboard", "chart"), ("dataJob", "dataFlow"))
_ASPECTS = (("ownership",), ("globalTags", "glossaryTerms"), ("schemaMetadata",), ("domains", "deprecation"))


@dataclass(frozen=True)
class RequestKind:
    """One kind of search: how to draw its (query, body), and how many pages of it a user reads."""

    make: Callable[[random.Random], tuple[dict, dict]]
    pages: int = 1


def request_mix(mix: str, actors: list[str], now_ms: int, days: int) -> dict[str, RequestKind]:
    """Return the request kinds of `mix` over a table of `days` days ending at `now_ms`, acted by `actors`.

    Raises:
        InputError: when `mix` is not one of MIXES.
    """
    if mix == "basic":
        return _basic(actors, now_ms, days)
    if mix == "contract":
        return _contract(actors, now_ms, days)
    raise InputError(f"--mix: {mix!r} is not one of {', '.join(MIXES)}")


def _basic(actors: list[str], now_ms: int, days: int) -> dict[str, RequestKind]:
    """No filter, one actor, three event types in a 6-hour window of a random day (default page size, raw)."""

    def no_filter(rng: random.Random) -> tuple[dict, dict]:
        return {}, {"eventTypes": [], "entityTypes": [], "aspectTypes": [], "actorUrns": []}

    def one_actor(rng: random.Random) -> tuple[dict, dict]:
        return {}, {"actorUrns": [rng.choice(actors)]}

    def types_and_range(rng: random.Random) -> tuple[dict, dict]:
        end = _random_end(rng, now_ms, days)
        query = {"startTime": end - 6 * HOUR_MS, "endTime": end}
        return query, {"eventTypes": ["LogInEvent", "FailedLogInEvent", "CreateUserEvent"]}

    return {name: RequestKind(make) for name, make in
            (("no_filter", no_filter), ("one_actor", one_actor), ("event_types_time_range", types_and_range))}  # fmt: skip


def _random_end(rng: random.Random, now_ms: int, days: int) -> int:
    """A window end at a random time of the table's days."""
    return now_ms - rng.randrange(0, max(1, days - 1)) * DAY_MS - rng.randrange(0, DAY_MS)


def _contract(actors: list[str], now_ms: int, days: int) -> dict[str, RequestKind]:
    """Twelve searches as callers of DataHub's contract make them, the last one read to its second page.

    Filters on event type, entity type, aspect and actor, alone and together; windows of an hour to the
    whole table, ending now or on a random day; sizes 10-100; includeRaw left at its default (true).
    """
    span = days * DAY_MS

    def window(hours: float, rng: random.Random, latest: bool = True) -> dict:
        end = now_ms if latest else _random_end(rng, now_ms, days)
        return {"startTime": end - int(hours * HOUR_MS), "endTime": end}

    def sized(query: dict, rng: random.Random, *sizes: int) -> dict:
        return {**query, "size": rng.choice(sizes)}

    kinds: dict[str, Callable[[random.Random], tuple[dict, dict]]] = {
        "logins_last_day": lambda rng: (sized(window(24, rng), rng, 10, 25),
                                        {"eventTypes": ["LogInEvent", "FailedLogInEvent"]}),
        "failed_logins_week": lambda rng: (sized(window(24 * 7, rng), rng, 50, 100), {"eventTypes": ["FailedLogInEvent"]}),
        "aspect_updates": lambda rng: (sized(window(24 * 7, rng), rng, 25, 50),
                                       {"eventTypes": ["UpdateAspectEvent"], "aspectTypes": list(rng.choice(_ASPECTS))}),
        "entity_type_views": lambda rng: (sized(window(24, rng, latest=False), rng, 10, 25),
                                          {"eventTypes": ["EntityEvent"], "entityTypes": list(rng.choice(_ASSET_TYPES))}),
        "actor_history": lambda rng: (sized(window(span / HOUR_MS, rng), rng, 20, 50, 100), {"actorUrns": [rng.choice(actors)]}),
        "actor_changes": lambda rng: (sized(window(24 * 7, rng), rng, 10, 20),
                                      {"actorUrns": [rng.choice(actors)], "eventTypes": ["UpdateAspectEvent", "DeleteEntityEvent"]}),
        "two_actors_aspects": lambda rng: (sized(window(24 * 7, rng), rng, 25),
                                           {"actorUrns": rng.sample(actors, min(2, len(actors))),
                                            "aspectTypes": list(rng.choice(_ASPECTS))}),
        "token_events": lambda rng: (sized(window(span / HOUR_MS, rng), rng, 10, 50),
                                     {"eventTypes": ["CreateAccessTokenEvent", "RevokeAccessTokenEvent"]}),
        "policy_events": lambda rng: (sized(window(span / HOUR_MS, rng), rng, 25, 100),
                                      {"eventTypes": ["CreatePolicyEvent", "UpdatePolicyEvent", "DeletePolicyEvent"]}),
        "user_and_ingestion": lambda rng: (sized(window(24 * 3, rng, latest=False), rng, 10, 25),
                                           {"eventTypes": ["CreateUserEvent", "UpdateUserEvent", "CreateIngestionSourceEvent",
                                                           "UpdateIngestionSourceEvent"]}),
        "all_last_hour": lambda rng: (sized(window(1, rng), rng, 50, 100), {}),
    }  # fmt: skip
    mix = {name: RequestKind(make) for name, make in kinds.items()}
    mix["entity_changes_page_2"] = RequestKind(
        lambda rng: (sized(window(6, rng, latest=False), rng, 25, 50),
                     {"entityTypes": ["dataset"], "eventTypes": ["EntityEvent", "UpdateAspectEvent"]}),
        pages=2,
    )  # fmt: skip
    return mix
