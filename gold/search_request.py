"""Audit search requests: the query parameters and JSON body validated into one `SearchRequest`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conf.errors import RequestError
from conf.settings_sections import SEARCH_MAX_SIZE
from conf.values import DAY_MS, MAX_TIME_MS, WHOLE_NUMBER
from gold.scopes import UNSCOPED, Scope
from gold.scroll_ids import ScrollKey, ScrollSigner, decode_scroll_id, query_binding
from gold.serving_contract import EVENT_TYPES

DEFAULT_TIME = -1
DEFAULT_SIZE = 10
MAX_SIZE = SEARCH_MAX_SIZE
MAX_FILTER_VALUES = 1_000
MAX_FILTER_VALUE_CHARS = 4_096
# JSON body key -> gold.audit_events column it filters.
BODY_FILTERS = {
    "eventTypes": "event_type",
    "entityTypes": "entity_type",
    "aspectTypes": "aspect_name",
    "actorUrns": "actor_urn",
}


@dataclass(frozen=True)
class SearchRequest:
    """One validated audit search request.

    Attributes:
        start_time: window start in epoch ms (inclusive); -1 = one day before the window end.
        end_time: window end in epoch ms (exclusive); -1 = now.
        size: page size, 1..10000.
        scroll_id: the opaque scroll id given by the caller, if any.
        scroll: the decoded scroll id.
        include_raw: whether results carry rawUsageEvent.
        event_types, entity_types, aspect_types, actor_urns: filters (empty = no filter).
        signer: signs the next page's scroll id (and checked the given one).
        scope: the rows the caller may see at all (set from its principal, never from the request).
        binding: what a scroll id of this request is bound to besides the window: filters, size and
            includeRaw as the caller sent them (`query_binding`).
    """

    start_time: int = DEFAULT_TIME
    end_time: int = DEFAULT_TIME
    size: int = DEFAULT_SIZE
    scroll_id: str | None = None
    scroll: ScrollKey | None = None
    include_raw: bool = True
    event_types: tuple[str, ...] = ()
    entity_types: tuple[str, ...] = ()
    aspect_types: tuple[str, ...] = ()
    actor_urns: tuple[str, ...] = ()
    signer: ScrollSigner | None = field(default=None, compare=False, repr=False)
    scope: Scope = UNSCOPED
    binding: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        # Fixed when the request is made: the caller's scope may later narrow what is read (raw events
        # left out), but the next page's scroll id stays bound to the query the caller sent.
        if not self.binding:
            filters = {
                "event_types": self.event_types,
                "entity_types": self.entity_types,
                "aspect_types": self.aspect_types,
                "actor_urns": self.actor_urns,
            }
            object.__setattr__(self, "binding", query_binding(filters, self.size, self.include_raw))

    @classmethod
    def parse(
        cls,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        max_size: int = MAX_SIZE,
        signer: ScrollSigner | None = None,
    ) -> SearchRequest:
        """Validate query parameters (strings or typed values) and the decoded JSON body.

        Args:
            params: startTime, endTime, size, scrollId, includeRaw; other keys are ignored, as DataHub does.
            body: the decoded JSON body: None (no body) or an object with the list filters.
            max_size: the largest page size the server allows (at most MAX_SIZE).
            signer: checks the given scroll id and signs the next one (None: scroll ids are refused).

        Raises:
            RequestError: naming the parameter or body field and the bad value; for a scroll id that was
                forged, changed, or issued to another caller or for another query.
        """
        params = params or {}
        start_time = _parse_time(params.get("startTime"), "startTime")
        end_time = _parse_time(params.get("endTime"), "endTime")
        size = _parse_size(params.get("size"), max_size)
        include_raw = _parse_bool(params.get("includeRaw"), "includeRaw", default=True)
        scroll_id = params.get("scrollId")
        if scroll_id is not None and not isinstance(scroll_id, str):
            raise RequestError(f"scrollId: {scroll_id!r} is not a string")
        scroll_id = scroll_id or None
        filters = _parse_body(body)
        binding = query_binding(filters, size, include_raw)
        scroll = decode_scroll_id(scroll_id, signer, binding) if scroll_id else None
        if scroll is not None:
            # Later pages keep the window the first page resolved, so a default window does not slide;
            # a window given again must be that one.
            for name, given, issued in (("startTime", start_time, scroll.start_time), ("endTime", end_time, scroll.end_time)):
                if given not in (DEFAULT_TIME, issued):
                    raise RequestError(
                        f"{name}: {given} is not the window of the scrollId ({issued}); send the first page's window or none"
                    )
            start_time, end_time = scroll.start_time, scroll.end_time
        if start_time != DEFAULT_TIME and end_time != DEFAULT_TIME and start_time > end_time:
            raise RequestError(f"startTime: {start_time} is after endTime {end_time}")
        return cls(
            start_time=start_time,
            end_time=end_time,
            size=size,
            scroll_id=scroll_id,
            scroll=scroll,
            include_raw=include_raw,
            signer=signer,
            binding=binding,
            **filters,
        )

    @property
    def filtered(self) -> bool:
        """Whether the body filters select events (any of event, entity or aspect types, or actors)."""
        return bool(self.event_types or self.entity_types or self.aspect_types or self.actor_urns)

    def with_window(self, now_ms: int) -> SearchRequest:
        """Return the request with a concrete window: end -1 = now, start -1 = end - 1 day.

        Raises:
            RequestError: when the resolved start is after the resolved end.
        """
        end_time = now_ms if self.end_time == DEFAULT_TIME else self.end_time
        start_time = end_time - DAY_MS if self.start_time == DEFAULT_TIME else self.start_time
        if start_time > end_time:
            raise RequestError(f"startTime: {start_time} is after endTime {end_time}")
        return dataclasses.replace(self, start_time=start_time, end_time=end_time)


def _parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise RequestError(f"{name}: {value!r} is not a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and WHOLE_NUMBER.fullmatch(value.strip()):
        return int(value.strip())
    raise RequestError(f"{name}: {value!r} is not a whole number")


def _parse_time(value: Any, name: str) -> int:
    if value is None or value == "":
        return DEFAULT_TIME
    millis = _parse_int(value, name)
    if millis < DEFAULT_TIME:
        raise RequestError(f"{name}: {millis} must be epoch milliseconds >= 0 (or -1 for the default)")
    if millis > MAX_TIME_MS:
        raise RequestError(f"{name}: {millis} is after the year 9999")
    return millis


def _parse_size(value: Any, max_size: int) -> int:
    if value is None or value == "":
        return min(DEFAULT_SIZE, max_size)
    size = _parse_int(value, "size")
    if not 1 <= size <= max_size:
        raise RequestError(f"size: {size} is out of range (1..{max_size}); the server's limit is {max_size}")
    return size


def _parse_bool(value: Any, name: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise RequestError(f"{name}: {value!r} is not true or false")


def _parse_body(body: Any) -> dict[str, tuple[str, ...]]:
    """Validate the JSON body and return the filter fields of SearchRequest."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RequestError(f"body: expected a JSON object with {', '.join(BODY_FILTERS)}, got {type(body).__name__}")
    unknown = sorted(set(body) - set(BODY_FILTERS))
    if unknown:
        raise RequestError(f"body: unknown field(s) {unknown} (known: {', '.join(BODY_FILTERS)})")
    filters: dict[str, tuple[str, ...]] = {}
    for key in BODY_FILTERS:
        values = body.get(key)
        if values is None:
            values = []
        if not isinstance(values, list):
            raise RequestError(f"body.{key}: expected a list of strings, got {_describe(values)}")
        if len(values) > MAX_FILTER_VALUES:
            raise RequestError(f"body.{key}: {len(values)} values; at most {MAX_FILTER_VALUES} are allowed")
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise RequestError(f"body.{key}[{index}]: expected a string, got {_describe(value)}")
            if len(value) > MAX_FILTER_VALUE_CHARS:
                raise RequestError(f"body.{key}[{index}]: longer than {MAX_FILTER_VALUE_CHARS} characters")
        if key == "eventTypes":
            unknown_types = [v for v in values if v not in EVENT_TYPES]
            if unknown_types:
                raise RequestError(
                    f"body.eventTypes: unknown event type(s) {unknown_types} (known: {', '.join(EVENT_TYPES)})"
                )
        field_name = {"eventTypes": "event_types", "entityTypes": "entity_types",
                      "aspectTypes": "aspect_types", "actorUrns": "actor_urns"}[key]  # fmt: skip
        filters[field_name] = tuple(dict.fromkeys(values))
    return filters


def _describe(value: Any) -> str:
    text = json.dumps(value)
    return f"{type(value).__name__} {text[:60]}"
