"""Erasure (`lakehouse erase`, POST /api/v1/privacy/erasures) with pseudonymisation on: the identity is found
in no file of any table version, verify passes,
the erased person's events stay searchable under their pseudonym, and a second person stays readable."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import run_cli

ERASED = "urn:li:corpuser:mlee"
KEPT = "urn:li:corpuser:jdoe"
ERASED_IP, ERASED_AGENT = "203.0.113.77", "Mozilla/5.0 (MleeBook)"
SETTINGS = ("--set", "mlflow.enabled=false", "--set", "privacy.pseudonymise=true")
USAGE = [
    {"type": "LogInEvent", "actorUrn": ERASED, "timestamp": 1705386796005, "sourceIP": ERASED_IP,
     "userAgent": ERASED_AGENT, "loginSource": "SSO_LOGIN"},
    {"type": "LogInEvent", "actorUrn": KEPT, "timestamp": 1705386797005, "sourceIP": "198.51.100.9",
     "userAgent": "curl/8.1", "loginSource": "SSO_LOGIN"},
    # Quarantined: its reason quotes the record, person, address and agent included.
    {"type": "NoSuchEvent", "actorUrn": ERASED, "timestamp": 1705386798005, "sourceIP": ERASED_IP,
     "userAgent": ERASED_AGENT},
]  # fmt: skip


def lakehouse(home: Path, *args: str, check: bool = True):
    return run_cli(*SETTINGS, *args, home=home, check=check)


def home_with_logins(home: Path) -> Path:
    """Return `home` with its landing folder (created) holding the shipped history and USAGE's events."""
    (home / "landing").mkdir(parents=True)
    shutil.copy(FIXTURES / "history-small.mcl.jsonl", home / "landing")
    (home / "landing" / "usage.jsonl").write_text("".join(json.dumps(e) + "\n" for e in USAGE))
    return home


@pytest.fixture(scope="module")
def landed_home(tmp_path_factory) -> Path:
    """The shipped history and two logins landed and published with pseudonymisation on."""
    home = home_with_logins(tmp_path_factory.mktemp("erasure") / "home")
    lakehouse(home, "run")
    return home


@pytest.fixture
def home(landed_home, tmp_path) -> Path:
    shutil.copytree(landed_home, tmp_path / "home")
    return tmp_path / "home"


def files_holding(home: Path, needles: list[str]) -> list[str]:
    """Every file under the home but its input folder holding a needle: its bytes, and a Parquet file's values."""
    found = []
    for path in sorted(p for p in home.rglob("*") if p.is_file() and "landing" not in p.relative_to(home).parts):
        texts = [path.read_bytes().decode("utf-8", "replace")]
        if path.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
        found += [f"{path.relative_to(home)}: {n}" for n in needles if any(n in text for text in texts)]
    return found


def _search(home: Path, actor: str) -> list[dict]:
    body = json.dumps({"actorUrns": [actor]})
    out = lakehouse(home, "search", "--start-time", "2023-01-01", "--size", "500", "--body", body).stdout
    return json.loads(out)["usageEvents"]


def test_landing_stores_people_only_as_pseudonyms(landed_home):
    assert files_holding(landed_home, [ERASED, KEPT, ERASED_IP, ERASED_AGENT]) == []
    events = _search(landed_home, ERASED)
    assert events and {e["actorUrn"] for e in events} == {ERASED}
    assert {e["actorUrnPseudonym"] for e in events} == {events[0]["actorUrnPseudonym"]}
    assert events[0]["actorUrnPseudonym"].startswith("urn:li:corpuser:p-")


def test_an_erased_person_reads_as_erased_everywhere_and_verify_passes(home):
    before = _search(home, ERASED)
    pseudonym = before[0]["actorUrnPseudonym"]
    erased = lakehouse(home, "erase", "--actor", ERASED, "--reason", "GDPR request 2026-17")
    assert f"erased: {pseudonym}" in erased.stdout
    # The search by the erased actor still finds every event, shown under the pseudonym as an erased subject.
    after = _search(home, ERASED)
    assert len(after) == len(before) and {e["actorUrn"] for e in after} == {"erased subject"}
    assert {e["actorUrnPseudonym"] for e in after} == {pseudonym}
    logins = [e for e in after if e.get("sourceIPPseudonym")]
    assert logins and {e["sourceIP"] for e in logins} == {"erased subject"}
    # The second person stays readable.
    assert {e["actorUrn"] for e in _search(home, KEPT)} == {KEPT}
    assert lakehouse(home, "privacy", "identity", pseudonym).stdout.strip().endswith("erased subject")
    # No file of any table version, nor the key store or logs, holds the identity; the erasure names only the pseudonym.
    assert files_holding(home, [ERASED, ERASED_IP, ERASED_AGENT]) == []
    assert "OK" in lakehouse(home, "verify").stdout


def test_erasure_refuses_unknown_held_and_keyless_with_nothing_lost(home):
    unknown = lakehouse(home, "erase", "--actor", "urn:li:corpuser:nobody", "--reason", "r", check=False)
    assert "'urn:li:corpuser:nobody' is unknown" in unknown.stderr
    hold = lakehouse(home, "hold", "add", "--actor", ERASED, "--reason", "matter 2026-17").stdout.split()[1]
    held = lakehouse(home, "erase", "--actor", ERASED, "--reason", "r", check=False)
    assert f"is under legal hold {hold} (matter 2026-17)" in held.stderr
    key_file = home / "auth" / "privacy-keys.json"
    os.rename(key_file, home / "keys.moved")
    keyless = lakehouse(home, "erase", "--actor", KEPT, "--reason", "r", check=False)
    assert "privacy.key_file:" in keyless.stderr and "does not exist" in keyless.stderr
    os.rename(home / "keys.moved", key_file)
    for refused in (unknown, held, keyless):
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
    # Nothing was erased: both people still read as themselves.
    assert {e["actorUrn"] for e in _search(home, ERASED)} == {ERASED}
    assert {e["actorUrn"] for e in _search(home, KEPT)} == {KEPT}


def test_the_api_shows_identities_to_sensitive_readers_and_pseudonyms_to_others(home):
    import signal
    import subprocess
    import time

    import httpx

    from pipelines.runtime.engine_servers import free_loopback_port
    from pipelines.serving.api import SEARCH_PATH
    from pipelines.serving.tokens import create_token
    from tests.conftest import make_settings
    from tests.pipelines.cli.test_cli import LAKEHOUSE

    lakehouse(home, "erase", "--actor", ERASED, "--reason", "GDPR request 2026-17")
    settings = make_settings(home)
    sensitive = {"Authorization": "Bearer " + create_token(settings, "urn:li:corpuser:auditor", ["audit-read-sensitive"])[0]}
    plain = {"Authorization": "Bearer " + create_token(settings, "urn:li:corpuser:auditor", ["audit-read"])[0]}
    port = free_loopback_port()
    command = [LAKEHOUSE, "--home", str(home), *SETTINGS, "--set", "serve.workers=1", "serve", "--port", str(port)]
    with open(home.parent / "serve.log", "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}{SEARCH_PATH}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None and time.monotonic() < deadline, (home.parent / "serve.log").read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except httpx.HTTPError:
                time.sleep(0.2)

        def search(actor: str, headers: dict) -> list[dict]:
            answer = httpx.post(url, params={"startTime": 0, "size": 500}, json={"actorUrns": [actor]}, headers=headers, timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.json()["usageEvents"]

        kept_shown, kept_plain = search(KEPT, sensitive), search(KEPT, plain)
        assert kept_shown and {e["actorUrn"] for e in kept_shown} == {KEPT}
        assert {e["actorUrn"] for e in kept_plain} == {kept_shown[0]["actorUrnPseudonym"]}
        assert {e["actorUrn"] for e in search(ERASED, sensitive)} == {"erased subject"}
        # The admin's erasure endpoint: admins only, bad requests named, then the person is erased.
        admin = {"Authorization": "Bearer " + create_token(settings, "urn:li:corpuser:dpo", ["admin"])[0]}
        erasures = f"http://127.0.0.1:{port}/api/v1/privacy/erasures"
        request = {"actor": KEPT, "reason": "GDPR request 2026-19"}
        assert httpx.post(erasures, json=request, headers=sensitive, timeout=60).status_code == 403
        unknown = httpx.post(erasures, json={"actor": "urn:li:corpuser:nobody", "reason": "r"}, headers=admin, timeout=60)
        assert unknown.status_code == 400 and "actor: 'urn:li:corpuser:nobody' is unknown" in unknown.json()["error"]
        no_reason = httpx.post(erasures, json={"actor": KEPT}, headers=admin, timeout=60)
        assert no_reason.status_code == 400 and "reason: None must say why" in no_reason.json()["error"]
        erased = httpx.post(erasures, json=request, headers=admin, timeout=60)
        assert erased.status_code == 200 and erased.json()["pseudonym"] == kept_shown[0]["actorUrnPseudonym"]
        assert {e["actorUrn"] for e in search(KEPT, sensitive)} == {"erased subject"}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    # The access log recorded the searches by pseudonym: neither erased person is in any file; verify passes.
    assert files_holding(home, [ERASED, KEPT]) == []
    # The readers are stored as pseudonyms too (their tokens' actors, the loopback address they came from).
    access_log = home / "ops" / "access_log"
    assert list(access_log.rglob("*.parquet")) and files_holding(access_log, ["urn:li:corpuser:auditor", "127.0.0.1"]) == []
    assert "OK" in lakehouse(home, "verify").stdout
