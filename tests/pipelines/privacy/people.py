"""A small pseudonymised home for the privacy tests: part of the shared history and two people's logins."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from conf.settings import Settings
from conf.settings_sections import PrivacySettings
from pipelines.orchestration.jobs import run_job
from tests.conftest import FIXTURES, make_settings, register_fresh_tables

ERASED = "urn:li:corpuser:mlee"
KEPT = "urn:li:corpuser:jdoe"
ERASED_IP, ERASED_AGENT = "203.0.113.77", 'Mozilla/5.0 (MleeBook; "quoted")'
KEPT_IP = "198.51.100.9"
LOGIN_AT = 1705386796005  # 2024-01-16, within the history's days
HISTORY_LINES = 80  # the history's first lines: changes by both people, and owners naming them
USAGE = [
    {"type": "LogInEvent", "actorUrn": ERASED, "timestamp": LOGIN_AT, "sourceIP": ERASED_IP,
     "userAgent": ERASED_AGENT, "loginSource": "SSO_LOGIN"},
    {"type": "LogInEvent", "actorUrn": KEPT, "timestamp": LOGIN_AT + 1000, "sourceIP": KEPT_IP,
     "userAgent": "curl/8.1", "loginSource": "SSO_LOGIN"},
]  # fmt: skip


def pseudonymised(settings: Settings) -> Settings:
    """The settings with privacy.pseudonymise on and MLflow off."""
    return dataclasses.replace(
        settings,
        privacy=dataclasses.replace(settings.privacy, pseudonymise=True),
        mlflow=dataclasses.replace(settings.mlflow, enabled=False),
    )


def write_landing(folder: Path) -> list[Path]:
    """Write the inputs into `folder`: the history's first lines and the two logins."""
    folder.mkdir(parents=True, exist_ok=True)
    history = (FIXTURES / "history-small.mcl.jsonl").read_text().splitlines()[:HISTORY_LINES]
    (folder / "history.mcl.jsonl").write_text("\n".join(history) + "\n")
    (folder / "usage.jsonl").write_text("".join(json.dumps(e) + "\n" for e in USAGE))
    return [folder / "history.mcl.jsonl", folder / "usage.jsonl"]


def landed_home(spark, home: Path, **overrides) -> Settings:
    """A home with the inputs landed, refined and published with pseudonymisation on."""
    settings = pseudonymised(make_settings(home, **overrides))
    register_fresh_tables(spark, settings)
    run_job(settings, paths=write_landing(home.parent / f"{home.name}-landing"), spark=spark)
    return settings
