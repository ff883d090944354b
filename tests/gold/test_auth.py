"""Bearer tokens: issue, salted hash, verify, roles."""

from __future__ import annotations

import pytest

from conf.errors import AuthError, InputError
from gold.auth import (
    AUDIT_READ,
    TokenRecord,
    bearer_token,
    hash_secret,
    issue_token,
    require_role,
    split_token,
    verify_token,
)

ACTOR = "urn:li:corpuser:auditor"


def _issue(roles=(AUDIT_READ,)):
    return issue_token(ACTOR, list(roles), created_at=1_700_000_000_000, iterations=1_000)


def test_a_token_verifies_and_only_its_hash_is_kept():
    token, record = _issue()
    prefix, token_id, secret = token.split(".")
    assert prefix == "lh" and token_id == record.token_id and len(secret) >= 40
    assert secret not in repr(record.to_json()) and record.hash == hash_secret(secret, record.salt, record.iterations)
    other_token, other = _issue()
    assert other.salt != record.salt and other_token != token
    assert verify_token(token, [other, record]) == record
    assert TokenRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # wrong secret
        lambda t: "lh.ffffffffffff." + t.split(".")[2],  # unknown id
        lambda t: t.replace("lh.", "xx.", 1),  # not our prefix
        lambda t: t.split(".")[2],  # no id
        lambda t: "",
    ],
)
def test_anything_else_is_401(mangle):
    token, record = _issue()
    with pytest.raises(AuthError) as caught:
        verify_token(mangle(token), [record])
    assert caught.value.status == 401


def test_a_token_without_the_role_is_403():
    token, record = _issue(roles=["metrics-read"])
    assert verify_token(token, [record]) == record
    with pytest.raises(AuthError) as caught:
        require_role(record, AUDIT_READ)
    assert caught.value.status == 403 and AUDIT_READ in str(caught.value)
    require_role(_issue()[1], AUDIT_READ)


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
    with pytest.raises(AuthError):
        split_token("lh.abc")
