"""Log lines as text or one JSON object per line (`log.format`), with the fields of the watcher's lines."""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import pytest

from conf.settings_sections import LogSettings
from pipelines.runtime.logs import configure_logging, structured_line
from tests.conftest import make_settings


@pytest.fixture
def log_settings(tmp_path):
    """Settings in either format; logging is set back to text afterwards (it is per process)."""

    def settings_for(log_format: str):
        return dataclasses.replace(make_settings(tmp_path), log=LogSettings(format=log_format))

    yield settings_for
    configure_logging(settings_for("text"))


def test_json_log_records_carry_ts_level_logger_event_and_message(log_settings, capsys):
    configure_logging(log_settings("json"))
    logging.getLogger("lakehouse.kafka").warning("topics not on the broker, skipped: %s", "x")
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("lakehouse.api").exception("search failed")
    warning, failure = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {k: warning[k] for k in ("level", "logger", "event", "message")} == {
        "level": "warning", "logger": "lakehouse.kafka", "event": "log", "message": "topics not on the broker, skipped: x"
    }
    assert isinstance(warning["ts"], float)
    assert failure["error"] == "ValueError: bad value" and "Traceback" in failure["traceback"]


def test_text_log_lines_have_a_utc_time_level_and_logger(log_settings, capsys):
    configure_logging(log_settings("text"))
    configure_logging(log_settings("text"))  # a second call replaces the handler: one line per record
    logging.getLogger("lakehouse.landing").warning("numbering its lines in Python")
    (line,) = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING lakehouse.landing: numbering its lines in Python", line)


def test_event_lines_gain_level_and_logger_only_in_the_json_format(log_settings):
    configure_logging(log_settings("text"))
    assert set(json.loads(structured_line({"event": "started"}, "lakehouse.watch"))) == {"ts", "event"}
    configure_logging(log_settings("json"))
    line = json.loads(structured_line({"event": "started"}, "lakehouse.watch"))
    assert (line["event"], line["level"], line["logger"]) == ("started", "info", "lakehouse.watch")
