"""A POST's answer read: the wait a Retry-After header asks for."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pipelines.subscriptions.posting import retry_after_seconds

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("120", 120.0), (" 7 ", 7.0), ("Sun, 29 Nov 2026 12:01:00 GMT", 60.0), (None, None), ("", None), ("soon", None),
     ("²", None), ("١٢", None)],
)
def test_retry_after_is_seconds_or_a_date_and_anything_else_is_no_wait_asked(header, seconds):
    assert retry_after_seconds(header, NOW) == seconds
