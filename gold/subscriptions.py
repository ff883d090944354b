"""Webhook subscriptions: event filters as DataFrame predicates, payload formats, signatures, retry rules.

Everything here is pure: DataFrame -> DataFrame filters over silver change events and gold OpenMetadata
ChangeEvents, and plain functions that build request bodies and headers and classify answers. Reading
tables, sending requests and keeping cursors belong to the pipelines.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import random
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlsplit

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from conf.errors import InputError, RequestError
from gold.openmetadata import event_filter_predicate, parse_event_filter
from gold.scopes import UNSCOPED, Scope, change_event_condition

FORMATS = ("ece", "openmetadata", "slack")
CATEGORIES = (
    "TAG",
    "GLOSSARY_TERM",
    "OWNER",
    "OWNERSHIP",
    "DOMAIN",
    "DOCUMENTATION",
    "TECHNICAL_SCHEMA",
    "LIFECYCLE",
    "DEPRECATION",
    "STRUCTURED_PROPERTY",
)
OPERATIONS = ("ADD", "REMOVE", "MODIFY", "CREATE", "HARD_DELETE", "SOFT_DELETE", "REINSTATE")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SIGNATURE_HEADER = "X-Lakehouse-Signature"
TIMESTAMP_HEADER = "X-Lakehouse-Timestamp"
ECE_EVENT_TYPE = "EntityChangeEvent_v1"
# Statuses that mean "try again later" although they are 4xx: request timeout and rate limiting.
RETRIED_CLIENT_STATUSES = (408, 429)


@dataclass(frozen=True)
class EventFilters:
    """What a subscription selects; an empty tuple selects every value of that field.

    Args:
        categories: ECE categories (TAG, OWNER, ...).
        operations: ECE operations (ADD, REMOVE, ...).
        entity_types: DataHub entity types (dataset, chart, ...).
        entity_prefixes: entity URN prefixes (`urn:li:dataset:(urn:li:dataPlatform:snowflake,`).
        actors: actor URNs.
        om_filter: an OpenMetadata eventFilter `{eventType, entities}`, or None.
        scope: the scope the subscription was created under: only events in it are delivered.
    """

    categories: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    entity_types: tuple[str, ...] = ()
    entity_prefixes: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    om_filter: Mapping[str, Any] | None = field(default=None)
    scope: Scope = UNSCOPED

    @property
    def selects_change_events(self) -> bool:
        """Whether any filter applies to the silver change events (else every change event passes)."""
        return bool(
            self.categories or self.operations or self.entity_types or self.entity_prefixes or self.actors
            or self.scope.restricted
        )  # fmt: skip


def check_name(name: str) -> str:
    """Return a subscription name when it is 1-64 letters, digits, `_`, `.` or `-` (starting alphanumeric).

    Raises:
        InputError: naming the value.
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InputError(
            f"name: {name!r} is not a subscription name (1-64 letters, digits, '_', '.', '-'; starting with a letter or digit)"
        )
    return name


def check_format(payload_format: str) -> str:
    """Return the payload format when it is one of FORMATS.

    Raises:
        InputError: naming the value.
    """
    if payload_format not in FORMATS:
        raise InputError(f"--format: {payload_format!r} is not one of {', '.join(FORMATS)}")
    return payload_format


def check_filters(filters: EventFilters) -> EventFilters:
    """Return the filters when every category, operation, URN prefix and actor is well formed.

    Raises:
        InputError: naming the option and the bad value (an eventFilter problem too).
    """
    for option, values, known in (
        ("--category", filters.categories, CATEGORIES),
        ("--operation", filters.operations, OPERATIONS),
    ):
        for value in values:
            if value not in known:
                raise InputError(f"{option}: {value!r} is not one of {', '.join(known)}")
    for value in filters.entity_types:
        if not value or not value.replace("_", "").isalnum():
            raise InputError(f"--entity-type: {value!r} is not a DataHub entity type (e.g. dataset)")
    for option, values in (("--entity-prefix", filters.entity_prefixes), ("--actor", filters.actors)):
        for value in values:
            if not value.startswith("urn:li:"):
                raise InputError(f"{option}: {value!r} does not start with urn:li:")
    if filters.om_filter is not None:
        try:
            parse_event_filter(filters.om_filter)
        except RequestError as exc:
            raise InputError(f"--om-filter: {exc}") from None
    return filters


def check_url(url: str, allowed_hosts: Sequence[str] = (), allowed_networks: Sequence[str] = ()) -> str:
    """Return a webhook URL when it is http(s) with a host, carries no credentials, and its host is allowed.

    A host written as an address (in any notation: 127.0.0.1, 0x7f000001, 2130706433, [::1], ...) must
    be a public one unless `allowed_networks` holds it; host names are checked once resolved
    (`pipelines.subscriptions.targets`).

    Args:
        url: the target URL.
        allowed_hosts: host names (or `*.domain` patterns) targets may use; empty allows any host.
        allowed_networks: private, loopback or link-local networks (CIDR) targets may be in.

    Raises:
        InputError: naming the value and what is wrong with it.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"--url: {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"--url: {url!r} is not an http or https URL")
    if not parts.hostname:
        raise InputError(f"--url: {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise InputError(f"--url: {_without_credentials(url)!r} carries credentials; use --secret-file to sign requests")
    if port == 0:
        raise InputError(f"--url: {url!r} has port 0")
    if allowed_hosts and not host_allowed(parts.hostname, allowed_hosts):
        raise InputError(
            f"--url: host {parts.hostname!r} is not in subscriptions.allowed_hosts ({', '.join(allowed_hosts)})"
        )
    address = address_of(parts.hostname)
    if address is not None:
        check_address(parts.hostname, address, allowed_networks)
    return url


# NAT64 (RFC 6052): an IPv6 address carrying an IPv4 one in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Never public whatever they carry: local-use NAT64 (RFC 8215) translates into the operator's own networks,
# and an IPv4-compatible address (::a.b.c.d, deprecated by RFC 4291) may still reach the IPv4 one.
_NOT_PUBLIC_V6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("::/96"))


def address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a URL host names when it is an address literal, in any notation the C resolver accepts.

    `0x7f000001`, `2130706433`, `0177.0.0.1` and `127.1` all name 127.0.0.1 to inet_aton (and so to
    the HTTP client); a host name gives None.
    """
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def is_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Tell whether `address` is globally routable: not loopback, private, link-local (cloud metadata), reserved."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if any(address in network for network in _NOT_PUBLIC_V6):
            return False
        if address.sixtofour is not None:  # 6to4 (2002::/16): the IPv4 address in bits 16-48
            return is_public_address(address.sixtofour)
    return address.is_global and not address.is_multicast


def check_address(
    host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed_networks: Sequence[str]
) -> None:
    """Refuse a target address that is not public, unless one of `allowed_networks` holds it.

    Raises:
        InputError: naming the host, the address and the setting that would allow it.
    """
    if is_public_address(address):
        return
    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    for network in allowed_networks:
        if plain in ipaddress.ip_network(network, strict=False):
            return
    raise InputError(
        f"--url: host {host!r} is the address {plain}, a loopback, private, link-local or reserved one; "
        "add its network to subscriptions.allowed_networks to allow it"
    )


def _without_credentials(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def host_allowed(host: str, allowed_hosts: Sequence[str]) -> bool:
    """Tell whether `host` matches an allow-list entry: the exact host, or a subdomain of `*.domain`."""
    host = host.lower().rstrip(".")
    for entry in allowed_hosts:
        entry = entry.lower().rstrip(".")
        if entry.startswith("*.") and host.endswith(entry[1:]):
            return True
        if host == entry:
            return True
    return False


def to_event_filter_predicate(filters: EventFilters) -> Column:
    """Return the predicate over silver.entity_change_events columns that the change-event filters select.

    Each non-empty filter must match (AND); inside one filter any value may match (OR).
    """
    predicate = F.lit(True)
    if filters.categories:
        predicate = predicate & F.col("category").isin(*filters.categories)
    if filters.operations:
        predicate = predicate & F.col("operation").isin(*filters.operations)
    if filters.entity_types:
        predicate = predicate & F.col("entity_type").isin(*filters.entity_types)
    if filters.entity_prefixes:
        prefix_match = F.lit(False)
        for prefix in filters.entity_prefixes:
            prefix_match = prefix_match | F.col("entity_urn").startswith(prefix)
        predicate = predicate & prefix_match
    if filters.actors:
        predicate = predicate & F.col("actor").isin(*filters.actors)
    if filters.scope.restricted:
        predicate = predicate & scope_predicate(filters.scope)
    return predicate


def scope_predicate(scope: Scope) -> Column:
    """The scope rule of the audit search (`gold.scopes.scope_condition`) over silver change events.

    The entity is the one whose aspect was written (as in the audit rows); a domain scope needs a
    `domain` column (`gold.audit.with_entity_domain` on `aspect_entity_urn`).
    """
    condition = change_event_condition(scope)
    return F.lit(True) if condition is None else F.expr(condition.sql(dialect="spark"))


def filter_change_events(events_df: DataFrame, change_events_df: DataFrame, filters: EventFilters) -> DataFrame:
    """Keep the silver change events a subscription selects.

    Args:
        events_df: rows of silver.entity_change_events.
        change_events_df: rows of gold.openmetadata_change_events for the same batches; read only when
            the filters hold an eventFilter (a change event passes when its change set's ChangeEvent does).
        filters: the subscription's filters.
    """
    selected_df = events_df.filter(to_event_filter_predicate(filters))
    if filters.om_filter is None:
        return selected_df
    matching_sets_df = change_events_df.filter(event_filter_predicate(filters.om_filter)).select("change_set_id")
    return selected_df.join(matching_sets_df.distinct(), "change_set_id", "left_semi")


def filter_openmetadata_events(
    change_events_df: DataFrame, events_df: DataFrame, filters: EventFilters
) -> DataFrame:
    """Keep the OpenMetadata ChangeEvents a subscription selects.

    A ChangeEvent passes the eventFilter by its own type and entity type, and the change-event filters
    when at least one silver change event of its change set passes them.

    Args:
        change_events_df: rows of gold.openmetadata_change_events.
        events_df: rows of silver.entity_change_events for the same batches (read only when needed).
        filters: the subscription's filters.
    """
    selected_df = change_events_df.filter(event_filter_predicate(filters.om_filter))
    if not filters.selects_change_events:
        return selected_df
    matching_sets_df = events_df.filter(to_event_filter_predicate(filters)).select("change_set_id").distinct()
    return selected_df.join(matching_sets_df, "change_set_id", "left_semi")


def to_ece_item(event_id: str, document: Mapping[str, Any], batch_id: str | None) -> str:
    """One delivered ECE as the DataHub Actions framework's event envelope, with its stable id, as JSON text.

    Args:
        event_id: the silver event id (stable across re-deliveries).
        document: the ECE V1 JSON object (`pipelines.batch.export_ece.ece_document`).
        batch_id: the batch the event was refined in.
    """
    envelope = {
        "id": event_id,
        "event_type": ECE_EVENT_TYPE,
        "event": document,
        "meta": {"batch_id": batch_id},
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def to_summary_line(event: Mapping[str, Any], link_base_url: str | None) -> str:
    """A readable one-line summary of one change event, with a link to the entity.

    Args:
        event: a silver change event row (entity_urn, entity_type, category, operation, modifier, actor).
        link_base_url: a DataHub UI base URL; the link is `<base>/<entity_type>/<urn-encoded>`.
    """
    actor = str(event.get("actor") or "someone")
    actor_name = actor.split(":", 3)[3] if actor.startswith("urn:li:") and actor.count(":") >= 3 else actor
    what = f"{str(event['operation']).lower().replace('_', ' ')} {str(event['category']).lower().replace('_', ' ')}"
    modifier = f" {event['modifier']}" if event.get("modifier") else ""
    urn = str(event["entity_urn"])
    target = f"{event['entity_type']} {urn}"
    if link_base_url:
        link = f"{link_base_url.rstrip('/')}/{event['entity_type']}/{quote(urn, safe='')}"
        target = f"<{link}|{event['entity_type']} {urn}>"
    return f"{actor_name} {what}{modifier} on {target}"


def to_slack_body(lines: Sequence[str], event_ids: Sequence[str], subscription: str) -> bytes:
    """A Slack / Teams incoming-webhook message: a heading and one summary line per event, ids alongside."""
    count = len(lines)
    heading = f"{count} metadata change{'s' if count != 1 else ''} ({subscription})"
    text = heading + "\n" + "\n".join(f"• {line}" for line in lines)
    body = {"text": text, "event_ids": list(event_ids)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def to_batch_body(payload_format: str, subscription: str, items: Sequence[str]) -> bytes:
    """The body of one POST in the `ece` or `openmetadata` format from already serialized items.

    `ece`: `{"subscription": ..., "events": [envelope, ...]}`; `openmetadata`: a ChangeEventList,
    `{"data": [ChangeEvent, ...], "subscription": ...}`.

    Raises:
        InputError: for another format (slack bodies come from `to_slack_body`).
    """
    name = json.dumps(subscription)
    if payload_format == "ece":
        return ('{"subscription":' + name + ',"events":[' + ",".join(items) + "]}").encode("utf-8")
    if payload_format == "openmetadata":
        return ('{"data":[' + ",".join(items) + '],"subscription":' + name + "}").encode("utf-8")
    raise InputError(f"payload_format: {payload_format!r} is not ece or openmetadata")


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The X-Lakehouse-Signature value: `sha256=` + hex HMAC-SHA256 of `<timestamp>.<body>` under the secret."""
    mac = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: bytes | None, body: bytes, now_s: float) -> dict[str, str]:
    """The timestamp and (with a secret) signature headers of one POST."""
    timestamp = str(int(now_s))
    headers = {TIMESTAMP_HEADER: timestamp}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return headers


def classify_status(status: int) -> str:
    """What to do after an HTTP answer: `delivered` (2xx), `retry` (5xx, 408, 429) or `dead` (other 4xx, 1xx/3xx)."""
    if 200 <= status < 300:
        return "delivered"
    if status >= 500 or status in RETRIED_CLIENT_STATUSES:
        return "retry"
    return "dead"


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


def backoff_seconds(
    attempt: int, initial: float, maximum: float, uniform: Callable[[float, float], float] = random.uniform
) -> float:
    """The wait before retry `attempt` (1-based): exponential, capped, with half of it jittered.

    Args:
        attempt: how many attempts have failed so far (>= 1).
        initial: the wait after the first failure, before jitter.
        maximum: the cap before jitter.
        uniform: the random source (`random.uniform` by default).
    """
    if attempt < 1:
        raise InputError(f"attempt: {attempt!r} must be at least 1")
    ceiling = min(maximum, initial * (2 ** (attempt - 1)))
    return ceiling / 2 + uniform(0.0, ceiling / 2)


def excerpt(body: bytes | str | None, limit: int) -> str:
    """The first `limit` characters of a response body as text (undecodable bytes replaced)."""
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text if len(text) <= limit else text[:limit] + "…"
