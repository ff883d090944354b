"""Scroll ids of audit search: where a page ended, signed (HMAC-SHA256) for one caller and one query."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conf.errors import ConfigError, RequestError
from conf.values import MAX_TIME_MS

_SCROLL_VERSION = 3
# The table version of a scroll id that pins none (the Spark engine reads the latest version).
UNPINNED = -1
# Hex characters of the HMAC-SHA256 tag kept in a scroll id (128 bits).
_SCROLL_TAG_CHARS = 32


@dataclass(frozen=True)
class ScrollKey:
    """Where a page ended: the last row's sort key, and the window the first page resolved."""

    timestamp: int
    event_type: str
    actor_urn: str
    event_id: str
    start_time: int
    end_time: int
    table_version: int = UNPINNED


@dataclass(frozen=True)
class ScrollSigner:
    """Signs scroll ids with the server's key (HMAC-SHA256) for one caller.

    A scroll id is valid only for the caller it was issued to and the query that produced it: the
    caller and the query's filters, size and includeRaw are part of the signed text (the window and
    the pinned table version are inside the id).

    Attributes:
        key: the server's secret key (the same in every server process of a home).
        principal: who the scroll ids are issued to, e.g. the token id.
    """

    key: bytes = field(repr=False)
    principal: str = ""

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise ConfigError(f"key: {len(self.key)} bytes; a scroll id key needs at least 16")

    def tag(self, payload: str, binding: str) -> str:
        """The hex HMAC-SHA256 tag of a scroll id's payload for this caller and a query binding."""
        message = json.dumps([self.principal, binding, payload], separators=(",", ":")).encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()[:_SCROLL_TAG_CHARS]


def query_binding(filters: Mapping[str, Sequence[str]], size: int, include_raw: bool) -> str:
    """The canonical text of what a scroll id is bound to: the filters (order and repeats aside), size, includeRaw."""
    canonical = {name: sorted(set(values)) for name, values in sorted(filters.items())}
    return json.dumps([canonical, size, include_raw], separators=(",", ":"))


def encode_scroll_id(key: ScrollKey, signer: ScrollSigner, binding: str) -> str:
    """Return the opaque scroll id of a sort key: urlsafe base64 of JSON plus its HMAC tag.

    Args:
        key: where the page ended, its window and pinned table version.
        signer: the server's key and the caller the id is issued to.
        binding: the query the id is bound to (`query_binding`).
    """
    payload = json.dumps(
        [_SCROLL_VERSION, key.timestamp, key.event_type, key.actor_urn, key.event_id, key.start_time, key.end_time,
         key.table_version],
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(f"{payload}|{signer.tag(payload, binding)}".encode()).decode().rstrip("=")


def decode_scroll_id(scroll_id: str, signer: ScrollSigner | None, binding: str) -> ScrollKey:
    """Decode a scroll id made by `encode_scroll_id` with the same key, caller and query binding.

    Raises:
        RequestError: when the text is not a scroll id this service issued to this caller for this query
            (bad encoding, a tag that does not match: forged, changed or foreign).
    """
    shown = scroll_id if len(scroll_id) <= 80 else scroll_id[:77] + "..."
    problem = RequestError(
        f"scrollId: {shown!r} is not a valid scroll id for this caller and query (use the nextScrollId of the "
        "previous page, with the same filters, size and includeRaw)"
    )
    if signer is None:
        raise problem
    try:
        text = base64.urlsafe_b64decode(scroll_id + "=" * (-len(scroll_id) % 4)).decode()
        payload, tag = text.rsplit("|", 1)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise problem from None
    if not hmac.compare_digest(signer.tag(payload, binding).encode(), tag.encode()):
        raise problem
    try:
        fields = json.loads(payload)
    except ValueError:
        raise problem from None
    # Signed by this server, but check the shape and ranges as for any input (an older id's layout).
    if not isinstance(fields, list) or len(fields) != 8:
        raise problem
    version, timestamp, event_type, actor_urn, event_id, start_time, end_time, table_version = fields
    ints = (timestamp, start_time, end_time)
    strings = (event_type, actor_urn, event_id)
    if version != _SCROLL_VERSION or not all(type(v) is int for v in ints) or not all(isinstance(v, str) for v in strings):
        raise problem
    if not all(0 <= v <= MAX_TIME_MS for v in ints):
        raise problem
    if type(table_version) is not int or table_version < UNPINNED:
        raise problem
    return ScrollKey(timestamp, event_type, actor_urn, event_id, start_time, end_time, table_version)
