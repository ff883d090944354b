"""One POST to a webhook: its signed headers, what its answer means, and the wait its answer asks for."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from conf.values import whole_number

SIGNATURE_HEADER = "X-Lakehouse-Signature"
TIMESTAMP_HEADER = "X-Lakehouse-Timestamp"
# Statuses that mean "try again later" although they are 4xx: request timeout and rate limiting.
RETRIED_CLIENT_STATUSES = (408, 429)


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
    if (seconds := whole_number(text)) is not None:
        return float(seconds)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


def excerpt(body: bytes | str | None, limit: int) -> str:
    """The first `limit` characters of a response body as text (undecodable bytes replaced)."""
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text if len(text) <= limit else text[:limit] + "…"
