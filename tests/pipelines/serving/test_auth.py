"""Bearer tokens: issue, salted HMAC hash, verify, expiry, rotation, legacy PBKDF2 records, roles and scopes."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from conf.errors import AuthError, InputError
from pipelines.serving.auth import (
    AUDIT_READ,
    LEGACY_ALGORITHM,
    TokenRecord,
    bearer_token,
    hash_secret,
    issue_token,
    principal_of,
    require_role,
    rotate_secret,
    split_token,
    upgraded,
    verify_token,
)
from gold.scopes import ADMIN, AUDIT_READ_SENSITIVE, parse_scope

ACTOR = "urn:li:corpuser:auditor"
ISSUED = 1_700_000_000_000


def _issue(roles=(AUDIT_READ,), **kwargs):
    return issue_token(ACTOR, list(roles), created_at=ISSUED, **kwargs)


def _by_id(*records):
    return {r.token_id: r for r in records}


def test_a_token_verifies_and_only_its_hash_is_kept():
    token, record = _issue()
    prefix, token_id, secret = token.split(".")
    assert prefix == "lh" and token_id == record.token_id and len(secret) >= 43  # 256 bits, urlsafe base64
    assert secret not in repr(record.to_json()) and record.hash == hash_secret(secret, record.salt)
    other_token, other = _issue()
    assert other.salt != record.salt and other_token != token
    assert verify_token(token, _by_id(other, record), ISSUED) == record
    assert TokenRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # wrong secret
        lambda t: "lh.ffffffffffff." + t.split(".")[2],  # unknown id
        lambda t: t.replace("lh.", "xx.", 1),  # not our prefix
        lambda t: t.split(".")[2],  # no id
        lambda t: "lh.ab\u00e9cd." + t.split(".")[2],  # a non-ASCII id
        lambda t: t + "\u00e9",  # a non-ASCII secret
        lambda t: "",
    ],
)
def test_anything_else_is_401(mangle):
    token, record = _issue()
    with pytest.raises(AuthError) as caught:
        verify_token(mangle(token), _by_id(record), ISSUED)
    assert caught.value.status == 401


def test_an_expired_token_is_401_from_its_expiry_on():
    token, record = _issue(expires_at=ISSUED + 1000)
    assert verify_token(token, _by_id(record), ISSUED + 999) == record
    with pytest.raises(AuthError, match="expired") as caught:
        verify_token(token, _by_id(record), ISSUED + 1000)
    assert record.token_id not in str(caught.value)  # the error names no token id
    with pytest.raises(InputError, match="expires_at"):
        _issue(expires_at=ISSUED)


def test_rotation_replaces_the_secret_and_keeps_the_rest():
    token, record = _issue(expires_at=ISSUED + 10_000, scope=parse_scope(["platform=hive"]))
    new_token, rotated = rotate_secret(record, ISSUED + 5_000)
    assert rotated.token_id == record.token_id and rotated.scope == record.scope and rotated.roles == record.roles
    assert rotated.expires_at == ISSUED + 15_000
    assert verify_token(new_token, _by_id(rotated), ISSUED + 6_000) == rotated
    with pytest.raises(AuthError):
        verify_token(token, _by_id(rotated), ISSUED + 6_000)


def test_a_legacy_pbkdf2_record_verifies_and_is_upgraded_to_hmac():
    token, current = _issue()
    secret = token.split(".")[2]
    salt = secrets.token_hex(16)
    stored = {
        "id": current.token_id, "actor": ACTOR, "roles": [AUDIT_READ], "algorithm": LEGACY_ALGORITHM,
        "iterations": 1000, "salt": salt, "created_at": ISSUED,
        "hash": hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), 1000).hex(),
    }  # fmt: skip
    legacy = TokenRecord.from_json(stored)
    assert verify_token(token, _by_id(legacy), ISSUED) == legacy
    fresh = upgraded(legacy, token)
    assert fresh.algorithm == "hmac_sha256" and "iterations" not in fresh.to_json()
    assert verify_token(token, _by_id(fresh), ISSUED) == fresh
    assert upgraded(fresh, token) is fresh


def test_roles_imply_each_other_and_a_missing_one_is_403():
    token, record = _issue(roles=["metrics-read"])
    assert verify_token(token, _by_id(record), ISSUED) == record
    with pytest.raises(AuthError) as caught:
        require_role(principal_of(record), AUDIT_READ)
    assert caught.value.status == 403 and AUDIT_READ in str(caught.value)
    admin = principal_of(_issue(roles=[ADMIN])[1])
    assert {AUDIT_READ, AUDIT_READ_SENSITIVE, ADMIN} <= set(admin.roles) and admin.sees_sensitive
    reader = principal_of(_issue()[1])
    assert not reader.sees_sensitive
    require_role(reader, AUDIT_READ)


def test_a_token_scope_is_narrowed_by_its_role_scope():
    _, record = _issue(scope=parse_scope(["platform=hive", "prefix=urn:li:dataset:"]))
    principal = principal_of(record, parse_scope(["platform=hive", "platform=kafka", "prefix=urn:li:dataset:(urn:li:dataPlatform:hive"]))
    assert principal.scope.platforms == ("hive",)
    assert principal.scope.entity_prefixes == ("urn:li:dataset:(urn:li:dataPlatform:hive",)
    assert principal_of(record, parse_scope(["platform=kafka"])).scope.nothing


@pytest.mark.parametrize(
    ("header", "expected"),
    [("Bearer abc", "abc"), ("bearer   abc  ", "abc"), (None, None), ("", None), ("Basic abc", None), ("Bearer", None)],
)
def test_bearer_header(header, expected):
    if expected is None:
        with pytest.raises(AuthError) as caught:
            bearer_token(header)
        assert caught.value.status == 401
    else:
        assert bearer_token(header) == expected


@pytest.mark.parametrize(
    ("actor", "roles", "named"),
    [("corpuser:x", [AUDIT_READ], "actor"), (ACTOR, [], "roles"), (ACTOR, ["Audit Read"], "roles")],
)
def test_issue_checks_its_arguments(actor, roles, named):
    with pytest.raises(InputError, match=named):
        issue_token(actor, roles, created_at=0)


def test_split_token():
    assert split_token("lh.abc.def") == ("abc", "def")
    for bad in ("lh.abc", "lh.ABC.def", "lh.abc.d\u00e9f", "lh.\u0661\u0662.def"):
        with pytest.raises(AuthError):
            split_token(bad)
