"""Retention and erasure on a home on object storage (an S3-protocol server, moto), pseudonymisation on.

Two runs land an old history batch and today's logins; an erasure (no engine) and `retention apply` at
no vacuum hours follow; `verify` passes, the erased person's events are found and read as the erased
subject, and no object of the home holds the identity.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conf.locations import ObjectLocation
from gold.search_request import SearchRequest
from pipelines.privacy.display import pseudonymous_body, with_identities
from pipelines.privacy.identities import ERASED_SUBJECT
from pipelines.runtime.home import home_of
from pipelines.runtime.storage import Storage
from pipelines.serving.engine import open_engine
from pipelines.serving.erasure import erase_person
from pipelines.serving.scroll_key import local_signer
from tests.conftest import FIXTURES
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.privacy.people import ERASED, ERASED_AGENT, ERASED_IP, HISTORY_LINES, KEPT, KEPT_IP, pseudonymised
from tests.pipelines.runtime.test_object_storage import BUCKET, S3Server, _put, s3  # noqa: F401 (s3: a fixture)

pytestmark = pytest.mark.slow

PREFIX = "privacy"
HOME = f"s3://{BUCKET}/{PREFIX}"
NOW = int(time.time() * 1000)
SETTINGS = ("privacy.pseudonymise=true", "mlflow.enabled=false", "retention.days.audit_events=400",
            "retention.days.change_events=400", "retention.days.usage_events=400")  # fmt: skip


def _cli(s3: S3Server, local_dir: Path, *args: str):
    options = [a for o in (*SETTINGS, f"storage.local_dir={local_dir}") for a in ("--set", o)]
    return run_cli("--home", HOME, *options, *args, env=s3.env)


def _logins() -> bytes:
    logins = [(ERASED, ERASED_IP, ERASED_AGENT), (KEPT, KEPT_IP, "curl/8.1")]
    return "".join(
        json.dumps({"type": "LogInEvent", "actorUrn": actor, "timestamp": NOW - 60_000 + i, "sourceIP": ip, "userAgent": agent,
                    "loginSource": "SSO_LOGIN"}) + "\n"
        for i, (actor, ip, agent) in enumerate(logins)
    ).encode()  # fmt: skip


def _objects_holding(s3: S3Server, needles: tuple[str, ...]) -> list[str]:
    """Every object of the home holding a needle: its bytes, and a Parquet object's values."""
    storage, found = Storage(s3.options), []
    for stored in storage.list_files(ObjectLocation("s3", BUCKET, PREFIX)):
        if "/landing/" in str(stored.location):
            continue
        data = storage.read_bytes(stored.location)
        texts = [data.decode("utf-8", "replace")]
        if str(stored.location).endswith(".parquet"):
            texts.append(json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str))
        found += [f"{stored.location}: {n}" for n in needles if any(n in text for text in texts)]
    return found


def test_retention_and_erasure_on_an_object_storage_home_keep_verify_passing(s3, tmp_path):
    history = (FIXTURES / "history-small.mcl.jsonl").read_text().splitlines()[:HISTORY_LINES]
    _put(s3, f"{PREFIX}/landing/history.mcl.jsonl", ("\n".join(history) + "\n").encode())
    _cli(s3, tmp_path, "run", "--no-progress")
    _put(s3, f"{PREFIX}/landing/usage.jsonl", _logins())
    _cli(s3, tmp_path, "run", "--no-progress")
    settings = pseudonymised(s3.settings(HOME, tmp_path))
    home_of(settings)  # the home's storage, with its options, as every command resolves it first
    erase_person(settings, ERASED, "erasure request 2026-17", "dpo")
    applied = _cli(s3, tmp_path, "retention", "apply", "--vacuum-hours", "0")
    assert "gold.audit_events" in applied.stdout, applied.stdout
    assert "OK" in _cli(s3, tmp_path, "verify").stdout
    # The history (2023-24) is gone; today's logins stay, the erased person's read as the erased subject.
    body = pseudonymous_body(settings, {"actorUrns": [ERASED, KEPT]})
    request = SearchRequest.parse({"startTime": 0, "size": 100}, body, max_size=1000, signer=local_signer(settings))
    events = with_identities(settings, open_engine(settings).search(request))["usageEvents"]
    assert sorted(e["actorUrn"] for e in events) == [ERASED_SUBJECT, KEPT]
    assert {e["sourceIP"] for e in events} == {ERASED_SUBJECT, KEPT_IP}
    assert _objects_holding(s3, (ERASED, ERASED_IP, ERASED_AGENT)) == []
