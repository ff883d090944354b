"""Values given as text: times and durations as epoch milliseconds (with their constants), JSON objects."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from conf.errors import ConfigError, InputError

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
# 9999-12-31T23:59:59.999Z: the last instant a date partition can name.
MAX_TIME_MS = 253_402_300_799_999
# ASCII digits only: str.isdigit() also accepts characters such as "²" that int() rejects.
WHOLE_NUMBER = re.compile(r"-?[0-9]{1,20}")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The instants a date can name: 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z.
_MIN_MS = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(milliseconds=1)


def parse_time_ms(value: str, name: str) -> int:
    """Parse epoch milliseconds or an ISO-8601 time (UTC when no zone is given) into epoch ms.

    Args:
        value: e.g. `1700000000000`, `2023-11-14`, `2023-11-14T22:13:20Z`.
        name: the option's name, used in the error message.

    Raises:
        InputError: naming the option and the value.
    """
    text = value.strip()
    if WHOLE_NUMBER.fullmatch(text):
        millis = int(text)
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{name}: {value!r} is neither epoch milliseconds nor an ISO-8601 time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        # Whole milliseconds by integer division: float seconds * 1000 can land 1 ms early.
        millis = (parsed - _EPOCH) // timedelta(milliseconds=1)
    if not _MIN_MS <= millis <= MAX_TIME_MS:
        raise InputError(f"{name}: {value!r} is outside the years 0001-9999")
    return millis


def whole_number(text: str) -> int | None:
    """The value of a text of ASCII digits (surrounding blanks aside); None for any other text."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def parse_whole_number(value: str, name: str, low: int, high: int) -> int:
    """Parse a whole number from `low` to `high` given as text (ASCII digits only).

    Raises:
        InputError: naming the field and the value.
    """
    number = whole_number(value)
    if number is None or not low <= number <= high:
        raise InputError(f"{name}: {value!r} is not a whole number from {low} to {high}")
    return number


def parse_json_object(value: str, name: str) -> dict[str, Any]:
    """Parse a JSON object given as an option's value.

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


_DURATION_UNITS_MS = {"s": 1_000, "m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS}


def parse_duration_ms(value: str, name: str) -> int:
    """Parse a duration such as `30d`, `12h`, `90m` or `3600s` into milliseconds.

    Raises:
        InputError: naming the option and the value when it is not a positive whole number with a unit.
    """
    text = value.strip().lower()
    number, unit = text[:-1], text[-1:]
    if unit not in _DURATION_UNITS_MS or not (number.isascii() and number.isdigit()) or int(number) <= 0:
        raise InputError(f"{name}: {value!r} is not a duration (a positive whole number with s, m, h or d, e.g. 30d)")
    return int(number) * _DURATION_UNITS_MS[unit]


def port_problem(name: str, port: object, zero_allowed: bool = False) -> str | None:
    """What is wrong with a TCP port value, naming the setting or option and the value; None for a port.

    Args:
        name: the setting or option, e.g. `api.port` or `--port`.
        port: the value.
        zero_allowed: 0 is a port too (the system picks a free one).
    """
    low = 0 if zero_allowed else 1
    if isinstance(port, bool) or not isinstance(port, int) or not low <= port <= 65535:
        return f"{name}: {port!r} is not a TCP port ({low}..65535)"
    return None


def check_port(name: str, port: object, zero_allowed: bool = False) -> int:
    """Return `port` when it is a TCP port (`port_problem`).

    Raises:
        ConfigError: naming the setting or option and the value.
    """
    problem = port_problem(name, port, zero_allowed)
    if problem:
        raise ConfigError(problem)
    return port  # type: ignore[return-value]


def least_problem(name: str, value: float, low: float) -> str | None:
    """What is wrong with a count or limit below its smallest meaningful value, naming it and the value; None if nothing.

    Args:
        name: the setting or argument, e.g. `serve.workers`.
        value: the value.
        low: the smallest value allowed.
    """
    return f"{name}: {value!r} must be at least {low}" if value < low else None


def check_at_least(name: str, value: float, low: float) -> None:
    """Check a count or limit given to a component against its smallest meaningful value (`least_problem`).

    Raises:
        ConfigError: naming the argument and the value.
    """
    problem = least_problem(name, value, low)
    if problem:
        raise ConfigError(problem)
