"""The token file: atomic 0600 writes, create/rotate/revoke, expiry, last-used times, legacy records upgraded."""

from __future__ import annotations

import hashlib
import json
import secrets
import stat

import pytest

from conf.errors import AuthError, InputError
from gold.scopes import parse_scope
from pipelines.serving.auth import AUDIT_READ
from pipelines.serving.tokens import (
    TokenVerifier,
    create_token,
    load_last_used,
    load_tokens,
    revoke_token,
    rotate_token,
)
from tests.conftest import make_settings


def test_tokens_are_stored_hashed_and_owner_only(tmp_path):
    settings = make_settings(tmp_path)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ], scope=parse_scope(["domain=urn:li:domain:x"]))
    create_token(settings, "urn:li:corpuser:b", ["metrics-read"], expires_in_ms=60_000)
    stored = load_tokens(settings.tokens_path)
    assert [r.actor for r in stored] == ["urn:li:corpuser:a", "urn:li:corpuser:b"]
    assert stored[0].scope.domains == ("urn:li:domain:x",) and stored[1].expires_at is not None
    assert token.split(".")[2] not in settings.tokens_path.read_text()
    assert stat.S_IMODE(settings.tokens_path.stat().st_mode) == 0o600
    assert [p.name for p in settings.tokens_path.parent.iterdir() if p.name.startswith(".tokens-")] == []
    with pytest.raises(InputError, match="expires-in"):
        create_token(settings, "urn:li:corpuser:a", [AUDIT_READ], expires_in_ms=0)


def test_the_verifier_follows_creates_rotations_and_revokes(tmp_path):
    settings = make_settings(tmp_path)
    verifier = TokenVerifier(settings.tokens_path)
    with pytest.raises(AuthError):
        verifier.authenticate("Bearer lh.abc.def")
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    assert verifier.authenticate(f"Bearer {token}") == record
    new_token, rotated = rotate_token(settings, record.token_id)
    assert rotated.token_id == record.token_id
    assert verifier.authenticate(f"Bearer {new_token}") == rotated
    with pytest.raises(AuthError):
        verifier.authenticate(f"Bearer {token}")
    revoke_token(settings, record.token_id)
    with pytest.raises(AuthError) as caught:
        verifier.authenticate(f"Bearer {new_token}")
    assert caught.value.status == 401
    for call in (lambda: revoke_token(settings, record.token_id), lambda: rotate_token(settings, record.token_id)):
        with pytest.raises(InputError, match="not a stored token"):
            call()


def test_last_used_times_are_written_off_the_request_path(tmp_path):
    settings = make_settings(tmp_path)
    verifier = TokenVerifier(settings.tokens_path)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    verifier.verify(token, now_ms=1_000)
    assert load_last_used(settings.tokens_path) == {}  # nothing written by the request itself
    verifier.flush()
    assert load_last_used(settings.tokens_path) == {record.token_id: 1_000}
    verifier.verify(token, now_ms=2_000)
    verifier.flush(now_ms=2_000, force=False)  # written a moment ago: waits
    assert load_last_used(settings.tokens_path) == {record.token_id: 1_000}
    verifier.flush()
    assert load_last_used(settings.tokens_path) == {record.token_id: 2_000}


def test_a_token_file_of_an_earlier_version_keeps_working_and_is_rewritten_on_first_use(tmp_path):
    settings = make_settings(tmp_path)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    settings.tokens_path.parent.mkdir(parents=True)
    settings.tokens_path.write_text(json.dumps({"version": 1, "tokens": [{
        "id": "0123456789ab", "actor": "urn:li:corpuser:old", "roles": [AUDIT_READ], "algorithm": "pbkdf2_sha256",
        "iterations": 120000, "salt": salt, "created_at": 1,
        "hash": hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), 120000).hex(),
    }]}))  # fmt: skip
    verifier = TokenVerifier(settings.tokens_path)
    assert verifier.authenticate(f"Bearer lh.0123456789ab.{secret}").actor == "urn:li:corpuser:old"
    stored = json.loads(settings.tokens_path.read_text())["tokens"][0]
    assert stored["algorithm"] == "hmac_sha256" and "iterations" not in stored and stored["salt"] != salt
    assert verifier.authenticate(f"Bearer lh.0123456789ab.{secret}").algorithm == "hmac_sha256"


def test_a_corrupt_token_file_is_named(tmp_path):
    settings = make_settings(tmp_path)
    settings.tokens_path.parent.mkdir(parents=True)
    settings.tokens_path.write_text("[1, 2")
    with pytest.raises(InputError, match="tokens.json"):
        load_tokens(settings.tokens_path)
