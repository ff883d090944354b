"""Log lines of every command: text for people, or one JSON object per line for log shippers (`log.format`).

Python log records (warnings of landing, Kafka, the API's errors, uvicorn's) go to standard error, as
`2026-11-28T02:30:48.123Z WARNING lakehouse.kafka: message`, or as JSON with the fields of the watcher's
event lines: `ts` (epoch seconds), `event` (`log`), plus `level`, `logger`, `message` and `error` (a
traceback's last line) when there is one. The watcher's event lines (`structured_line`) stay JSON on
standard output and, in the json format, gain `level` and `logger`, so one parser reads every line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from conf.settings import Settings

LOGGER = "lakehouse"
_HANDLER_NAME = "lakehouse-log"
# The process's format, set once from the settings: logging's own configuration is per process too.
_format = {"value": "text"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, event `log`, message (and error with a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": "log",
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info).strip().splitlines()[-1]
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, sort_keys=True)


class TextFormatter(logging.Formatter):
    """`2026-11-28T02:30:48.123Z WARNING lakehouse.kafka: message` (UTC)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


class StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record is logged (as logging's own last-resort handler)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # noqa: ANN201 - a text stream
        return sys.stderr


def configure_logging(settings: Settings) -> None:
    """Send log records to standard error in the format and from the level the settings name.

    The lakehouse's loggers log from `log.level`; other libraries' from warning. Calling it again
    (settings loaded twice in one process) replaces the handler instead of adding a second one.
    """
    _format["value"] = settings.log.format
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if settings.log.format == "json" else TextFormatter())
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level < logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.getLogger(LOGGER).setLevel(settings.log.level.upper())


def structured_line(record: dict[str, Any], logger: str) -> str:
    """One event line (JSON) with `ts` first; in the json format also `level` (info) and `logger`."""
    line = {"ts": round(time.time(), 3), **record}
    if _format["value"] == "json":
        line = {"level": "info", "logger": logger, **line}
    return json.dumps(line, default=str, sort_keys=True)
