"""`lakehouse privacy enable`: a home landed with identities in clear is migrated to pseudonyms in place,
verify passing before and after, no file (nor any log of an earlier version) holding an identity."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.pipelines.serving.test_erasure import ERASED, ERASED_AGENT, ERASED_IP, KEPT, files_holding, home_with_logins
from tests.pipelines.cli.test_cli import run_cli

CLEAR = ("--set", "mlflow.enabled=false")
PSEUDONYMOUS = (*CLEAR, "--set", "privacy.pseudonymise=true")


@pytest.fixture(scope="module")
def clear_home(tmp_path_factory) -> Path:
    """The shipped history and two logins landed and published as today: identities in clear."""
    home = home_with_logins(tmp_path_factory.mktemp("migration") / "home")
    run_cli(*CLEAR, "run", home=home)
    return home


def _actors(home: Path, actor: str) -> set[str]:
    body = json.dumps({"actorUrns": [actor]})
    out = run_cli(*PSEUDONYMOUS, "search", "--start-time", "2023-01-01", "--size", "500", "--body", body, home=home).stdout
    return {e["actorUrn"] for e in json.loads(out)["usageEvents"]}


def test_a_clear_home_is_migrated_with_verify_passing_before_and_after(clear_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(clear_home, home)
    assert files_holding(home, [ERASED]) != []  # the identities are there in clear before
    assert "OK" in run_cli(*CLEAR, "verify", home=home).stdout
    refused = run_cli(*CLEAR, "privacy", "enable", home=home, check=False)
    assert refused.returncode != 0 and "privacy.pseudonymise: false; set it to true first" in refused.stderr
    assert "Traceback" not in refused.stderr
    enabled = run_cli(*PSEUDONYMOUS, "privacy", "enable", home=home).stdout
    assert "gold.audit_events: 353 rows pseudonymised" in enabled and "earlier versions vacuumed" in enabled
    assert "OK" in run_cli(*PSEUDONYMOUS, "verify", home=home).stdout
    # No table file, and no log of an earlier version (its file statistics), holds an identity.
    assert files_holding(home, [ERASED, KEPT, ERASED_IP, ERASED_AGENT]) == []
    assert _actors(home, KEPT) == {KEPT} and _actors(home, ERASED) == {ERASED}
    # The migrated home erases like one that landed pseudonymised.
    run_cli(*PSEUDONYMOUS, "erase", "--actor", ERASED, "--reason", "GDPR request 2026-18", home=home)
    assert _actors(home, ERASED) == {"erased subject"} and _actors(home, KEPT) == {KEPT}
    assert "OK" in run_cli(*PSEUDONYMOUS, "verify", home=home).stdout
