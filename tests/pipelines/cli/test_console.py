"""Tables that fit the terminal: whole identifiers, real column names, a vertical layout, integer counts,
durations, ISO-8601 times."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conf.errors import InputError
from conf.tables import TABLES, table_location, table_name
from pipelines.cli.console import (
    console,
    format_cell,
    format_duration,
    iso_utc,
    listing_title,
    print_rows,
    print_table,
    render_table,
    vertical_text,
    with_iso_times,
)
from tests.conftest import make_settings

RUN_IDS = ["5dea6cf5a2b14c7e9f0e1d2c3b4a5968", "5dea6cf5ffb14c7e9f0e1d2c3b4a5968", "0c51a2e7d1e44f0e9c5b3a2f1e0d9c8b"]


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [
        ("landed", 275327.0, "275327"),
        ("rows", 12, "12"),
        ("score", 0.931262, "0.9313"),
        ("rows_per_second", 1234.56, "1234.56"),
        ("duration_s", 4.2, "4.20s"),
        ("seconds", 42.25, "42.2s"),
        ("total_seconds", 1234.5, "20m34s"),
        ("oldest_pending_age_s", 7322, "2h02m"),
        ("name", None, ""),
        ("filters", {"a": [1]}, '{"a": [1]}'),
    ],
)
def test_cells_show_counts_as_integers_and_seconds_with_a_unit(column, value, shown):
    assert format_cell(column, value) == shown


def test_durations_have_units_and_no_space():
    assert [format_duration(s) for s in (0.0, 9.994, 59.9, 60, 3599, 3600, 90061)] == [
        "0.00s", "9.99s", "59.9s", "1m00s", "59m59s", "1h00m", "1d01h"
    ]


def test_epoch_milliseconds_read_as_iso_8601_utc():
    assert iso_utc(1700415032000) == "2023-11-19T17:30:32Z"
    assert iso_utc(1700415032005) == "2023-11-19T17:30:32.005Z"
    assert format_cell("event_time", 1704067200000, epoch_ms=True) == "2024-01-01T00:00:00Z"
    assert format_cell("event_time", 1704067200000) == "1704067200000"


def test_headers_are_the_real_column_names(capsys, terminal):
    terminal(80)
    print_table([{"my_col": 1, "event_id": "e1"}], ["my_col", "event_id"])
    assert capsys.readouterr().out.splitlines()[0].split() == ["my_col", "event_id"]


def test_time_columns_are_iso_in_tables_and_csv_and_both_in_json(capsys):
    rows = [{"event_time": 1700415032000, "actor": "urn:li:corpuser:a"}]
    print_rows(rows, ["event_time", "actor"], time_columns=["event_time"])
    assert "2023-11-19T17:30:32Z" in capsys.readouterr().out
    print_rows(rows, ["event_time", "actor"], time_columns=["event_time"], as_csv=True)
    assert capsys.readouterr().out.splitlines()[1] == "2023-11-19T17:30:32Z,urn:li:corpuser:a"
    print_rows(rows, ["event_time", "actor"], time_columns=["event_time"], as_json=True)
    assert json.loads(capsys.readouterr().out) == {**rows[0], "event_time_utc": "2023-11-19T17:30:32Z"}
    assert with_iso_times({"accessedAt": 1700415032000}, ["accessedAt"])["accessedAtUtc"] == "2023-11-19T17:30:32Z"


def test_ids_are_never_cut_and_every_line_fits_80_columns(capsys, terminal):
    terminal(80)
    parameters = json.dumps({f"field_{n}": f"value number {n}" for n in range(12)})
    rows = [{"run_id": run_id, "name": "run", "status": "FINISHED", "duration_s": 12.5, "parameters": parameters}
            for run_id in RUN_IDS]  # fmt: skip
    print_table(rows, ["run_id", "name", "status", "duration_s", "parameters"])
    output = capsys.readouterr().out
    assert max(len(line) for line in output.splitlines()) <= 80
    words = output.split()
    assert all(run_id in words for run_id in RUN_IDS)
    assert " ".join(parameters.split()) in " ".join(line.strip() for line in output.splitlines())


def test_a_table_wraps_text_at_spaces_only_and_keeps_every_identifier_whole():
    headers = ["table", "last error"]
    cells = [["gold.openmetadata_change_events", "HTTP 400: the receiver refused the batch because of a bad field"]]
    text = render_table(headers, cells, 60)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert "gold.openmetadata_change_events" in lines[2]
    words = " ".join(lines[2:]).split()
    assert words == ["gold.openmetadata_change_events", *cells[0][1].split()]


def test_the_vertical_layout_puts_each_value_on_its_own_line():
    text = vertical_text(["run_id", "status"], [[RUN_IDS[0], "FINISHED"], [RUN_IDS[1], "FAILED"]])
    assert text.splitlines() == [
        f"run_id  {RUN_IDS[0]}", "status  FINISHED", "", f"run_id  {RUN_IDS[1]}", "status  FAILED"
    ]


def test_a_vertical_value_too_long_for_its_line_wraps_at_spaces_under_its_name():
    urn = "urn:li:dataset:(urn:li:dataPlatform:postgres,appdb.public.orders_9,PROD)"
    text = vertical_text(["entity_urn", "parameters"], [[urn, "a=1; " * 30]], 60)
    lines = text.splitlines()
    assert lines[:2] == ["entity_urn", f"  {urn}"] and lines[2].startswith("parameters  a=1;")
    assert all(len(line) <= 60 for line in lines[2:])


@pytest.fixture
def terminal():
    """Set the console's width for one test (what COLUMNS sets in a new process), then restore it."""
    width = console.width

    def set_width(columns: int) -> None:
        console.width = columns

    yield set_width
    console.width = width


@pytest.mark.parametrize("columns", [80, 200])
def test_the_table_listing_never_splits_a_table_name_or_location(tmp_path, capsys, terminal, columns):
    settings = make_settings(tmp_path / "a-home-whose-path-is-long-enough-to-matter" / "lakehouse")
    rows = [
        {"table": table_name(settings, key), "rows": 275327.0, "version": 12, "location": str(table_location(settings, key))}
        for key in TABLES
    ]
    terminal(columns)
    print_rows(rows, ["table", "rows", "version", "location"], title=f"Tables in {settings.home}")
    output = capsys.readouterr().out
    words = {word for line in output.splitlines() for word in line.split()}
    for row in rows:
        assert {row["table"], row["location"]} <= words
    assert "275327" in words and "275327.0" not in output
    # A line is wider than the terminal only to keep one identifier whole.
    identifiers = {row["location"] for row in rows} | {str(settings.home)}
    assert all(len(line) <= columns or identifiers & set(line.split()) for line in output.splitlines())
    if columns == 200:
        assert len([line for line in output.splitlines() if "gold.audit_events" in line.split()]) == 1


def test_csv_and_json_hold_the_full_values(capsys):
    rows = [{"run_id": RUN_IDS[0], "landed": 3.0, "filters": {"a": ["x", "y"]}, "error": None}]
    print_rows(rows, ["run_id", "landed", "filters", "error"], as_csv=True)
    parsed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert parsed == [{"run_id": RUN_IDS[0], "landed": "3.0", "filters": '{"a": ["x", "y"]}', "error": ""}]
    print_rows(rows, ["run_id"], as_json=True)
    assert json.loads(capsys.readouterr().out) == rows[0]
    with pytest.raises(InputError, match="--json, --csv"):
        print_rows(rows, ["run_id"], as_json=True, as_csv=True)


def test_a_listing_title_counts_its_rows_and_names_the_option_that_shows_more():
    assert listing_title("Recent runs", 3, False, "--limit") == "Recent runs (3)"
    assert listing_title("Recent runs", 10, True, "--limit") == "Recent runs: the first 10 (--limit N shows more)"
