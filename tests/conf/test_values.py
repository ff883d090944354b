"""Times, durations and JSON options: epoch milliseconds or ISO-8601 times, and JSON objects."""

from __future__ import annotations

import pytest

from conf.errors import InputError
from conf.values import parse_json_object, parse_time_ms, parse_whole_number, port_problem, whole_number


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("-5", -5),
        ("2023-11-14", 1_699_920_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        # Float seconds * 1000 gives each of these 1 ms early.
        ("1987-05-10T10:40:21.915Z", 547_641_621_915),
        ("2039-01-12T23:59:04.595Z", 2_178_489_544_595),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ],
)
def test_times_parse_to_whole_epoch_milliseconds(text, millis):
    assert parse_time_ms(text, "--since") == millis


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--since: '' is neither epoch milliseconds nor an ISO-8601 time"),
        ("soon", "--since: 'soon' is neither epoch milliseconds nor an ISO-8601 time"),
        ("1e12", "--since: '1e12' is neither epoch milliseconds nor an ISO-8601 time"),
        ("99999999999999999999", "--since: '99999999999999999999' is outside the years 0001-9999"),
        ("253402300800000", "--since: '253402300800000' is outside the years 0001-9999"),
    ],
)
def test_bad_times_name_the_option_and_the_value(text, message):
    with pytest.raises(InputError) as caught:
        parse_time_ms(text, "--since")
    assert str(caught.value) == message


def test_json_objects_name_the_option_when_they_are_not_one():
    assert parse_json_object('{"a": 1}', "--filter") == {"a": 1}
    with pytest.raises(InputError, match=r"--filter: '\[1\]' is not a JSON object"):
        parse_json_object("[1]", "--filter")
    with pytest.raises(InputError, match=r"--filter: '\{' is not valid JSON"):
        parse_json_object("{", "--filter")


@pytest.mark.parametrize(
    ("port", "zero_allowed", "problem"),
    [
        (8080, False, None),
        (65535, False, None),
        (0, True, None),
        (0, False, "api.port: 0 is not a TCP port (1..65535)"),
        (65536, True, "api.port: 65536 is not a TCP port (0..65535)"),
        (True, False, "api.port: True is not a TCP port (1..65535)"),
        ("80", False, "api.port: '80' is not a TCP port (1..65535)"),
    ],
)
def test_a_port_is_a_whole_number_in_range_and_a_problem_names_the_setting(port, zero_allowed, problem):
    assert port_problem("api.port", port, zero_allowed) == problem


@pytest.mark.parametrize("text", ["²", "-1", "1.5", "", "12a", "١٢"])
def test_a_whole_number_is_ascii_digits_only(text):
    assert whole_number(text) is None
    with pytest.raises(InputError, match=r"^limit: .* is not a whole number from 1 to 10$"):
        parse_whole_number(text, "limit", 1, 10)


def test_a_whole_number_in_range_parses():
    assert whole_number(" 42 ") == 42 and parse_whole_number("10", "limit", 1, 10) == 10
