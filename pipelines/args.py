"""Parse command-line values shared by several commands."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from conf.errors import InputError


def parse_time_ms(value: str, name: str) -> int:
    """Parse epoch milliseconds or an ISO-8601 time (UTC when no zone is given) into epoch ms.

    Args:
        value: e.g. `1700000000000`, `2023-11-14`, `2023-11-14T22:13:20Z`.
        name: the option's name, used in the error message.

    Raises:
        InputError: naming the option and the value.
    """
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{name}: {value!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def parse_json_object(value: str, name: str) -> dict[str, Any]:
    """Parse a JSON object given on the command line.

    Raises:
        InputError: when the text is not JSON or not an object, naming the option and the value.
    """
    try:
        loaded = json.loads(value)
    except ValueError as exc:
        raise InputError(f"{name}: {value!r} is not valid JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise InputError(f"{name}: {value!r} is not a JSON object")
    return loaded
