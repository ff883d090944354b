"""The token file: atomic 0600 writes, create/revoke, and a verifier that follows the file."""

from __future__ import annotations

import stat

import pytest

from conf.errors import AuthError, InputError
from gold.auth import AUDIT_READ
from pipelines.serving.tokens import TokenVerifier, create_token, load_tokens, revoke_token
from tests.conftest import make_settings


def test_tokens_are_stored_hashed_and_owner_only(tmp_path):
    settings = make_settings(tmp_path)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    create_token(settings, "urn:li:corpuser:b", ["metrics-read"])
    assert [r.actor for r in load_tokens(settings.tokens_path)] == ["urn:li:corpuser:a", "urn:li:corpuser:b"]
    assert token.split(".")[2] not in settings.tokens_path.read_text()
    assert stat.S_IMODE(settings.tokens_path.stat().st_mode) == 0o600
    assert [p.name for p in settings.tokens_path.parent.iterdir() if p.name.startswith(".tokens-")] == []


def test_the_verifier_follows_creates_and_revokes(tmp_path):
    settings = make_settings(tmp_path)
    verifier = TokenVerifier(settings.tokens_path)
    with pytest.raises(AuthError):
        verifier.authenticate("Bearer lh.abc.def", AUDIT_READ)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    assert verifier.authenticate(f"Bearer {token}", AUDIT_READ) == record
    assert verifier.authenticate(f"Bearer {token}", AUDIT_READ) == record  # from the cache
    revoke_token(settings, record.token_id)
    with pytest.raises(AuthError) as caught:
        verifier.authenticate(f"Bearer {token}", AUDIT_READ)
    assert caught.value.status == 401
    with pytest.raises(InputError, match="not a stored token"):
        revoke_token(settings, record.token_id)


def test_a_request_in_flight_across_a_revoke_does_not_keep_the_token_valid(tmp_path):
    settings = make_settings(tmp_path)
    verifier = TokenVerifier(settings.tokens_path)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    other_token, _ = create_token(settings, "urn:li:corpuser:b", [AUDIT_READ])
    # A request reads the records, then the token is revoked and another request re-reads the file
    # before the first one has finished verifying.
    in_flight = verifier.snapshot()
    revoke_token(settings, record.token_id)
    verifier.authenticate(f"Bearer {other_token}", AUDIT_READ)
    assert in_flight.verify(token) == record
    with pytest.raises(AuthError) as caught:
        verifier.authenticate(f"Bearer {token}", AUDIT_READ)
    assert caught.value.status == 401


def test_a_corrupt_token_file_is_named(tmp_path):
    settings = make_settings(tmp_path)
    settings.tokens_path.parent.mkdir(parents=True)
    settings.tokens_path.write_text("[1, 2")
    with pytest.raises(InputError, match="tokens.json"):
        load_tokens(settings.tokens_path)


def test_a_request_handler_authenticates_a_remembered_token_at_once_and_still_checks_role_and_revokes(tmp_path):
    import asyncio

    settings = make_settings(tmp_path)
    verifier = TokenVerifier(settings.tokens_path)
    token, record = create_token(settings, "urn:li:corpuser:a", [AUDIT_READ])
    metrics_token, _ = create_token(settings, "urn:li:corpuser:b", ["metrics-read"])
    assert verifier.snapshot().remembered(token) is None
    assert asyncio.run(verifier.authenticate_request(f"Bearer {token}", AUDIT_READ)) == record  # verified
    assert verifier.snapshot().remembered(token) == record
    assert asyncio.run(verifier.authenticate_request(f"Bearer {token}", AUDIT_READ)) == record  # remembered
    verifier.authenticate(f"Bearer {metrics_token}", "metrics-read")
    with pytest.raises(AuthError) as caught:
        asyncio.run(verifier.authenticate_request(f"Bearer {metrics_token}", AUDIT_READ))
    assert caught.value.status == 403
    revoke_token(settings, record.token_id)
    with pytest.raises(AuthError) as caught:
        asyncio.run(verifier.authenticate_request(f"Bearer {token}", AUDIT_READ))
    assert caught.value.status == 401
    with pytest.raises(AuthError) as caught:
        asyncio.run(verifier.authenticate_request(None, AUDIT_READ))
    assert caught.value.status == 401
