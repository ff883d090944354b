"""Bearer JWTs of an identity provider, against the real server on loopback with its JWKS served on loopback."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from http.server import ThreadingHTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from conf.settings_sections import IdentitySettings
from pipelines.batch.publish_audit import publish_audit
from pipelines.runtime.io import append
from pipelines.serving.api import SEARCH_PATH, create_app, serving
from tests.pipelines.audit_inputs import land_refined_batch, rows_df, usage_event
from tests.pipelines.json_endpoints import JsonHandler
from tests.pipelines.serving.test_security_scopes import _state_row

NOW = int(time.time() * 1000)
ISSUER, AUDIENCE = "https://idp.example.test", "lakehouse-api"
FINANCE = "urn:li:domain:finance"
IN_FINANCE = "urn:li:dataset:(urn:li:dataPlatform:hive,db.ledger,PROD)"
ELSEWHERE = "urn:li:dataset:(urn:li:dataPlatform:hive,db.clicks,PROD)"


def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(key, kid: str) -> dict:
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig", "alg": "RS256"}


class _Jwks:
    """The identity provider's JWKS endpoint: the keys it serves now and how often it was asked."""

    def __init__(self):
        self.keys: list[dict] = []
        self.fetches = 0


@pytest.fixture(scope="module")
def idp(spark, lakehouse):
    """Published events in and out of a domain, a JWKS on loopback, and the API accepting its JWTs."""
    append(rows_df(spark, "silver.aspect_state", [_state_row(IN_FINANCE, FINANCE)]), lakehouse, "silver.aspect_state")
    land_refined_batch(spark, lakehouse, "jwt-1", usage=[
        usage_event("UpdateAspectEvent", "urn:li:corpuser:x", NOW - i * 60_000, "jwt-1", entity_urn=urn,
                    entity_type="dataset", source_ip="10.0.0.7")
        for i, urn in enumerate([IN_FINANCE, ELSEWHERE, IN_FINANCE, ELSEWHERE, ELSEWHERE], start=1)
    ])  # fmt: skip
    publish_audit(spark, lakehouse)
    jwks = _Jwks()
    signing = _key()
    jwks.keys = [_jwk(signing, "k1")]

    class Handler(JsonHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook
            jwks.fetches += 1
            self.answer_json(200, {"keys": jwks.keys})

    provider = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    identity = IdentitySettings(
        jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwks_url=f"http://127.0.0.1:{provider.server_port}/jwks.json",
        jwks_min_refresh_seconds=1.0, role_map={"auditors": ("audit-read",), "security": ("admin",)},
        scope_claims={"domain": "lh_domains"},
    )  # fmt: skip
    settings = dataclasses.replace(lakehouse, identity=identity)
    try:
        with serving(create_app(settings, spark)) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
            yield {"client": client, "key": signing, "jwks": jwks}
    finally:
        provider.shutdown()


# A claim set to this is sent as JSON null (None leaves the claim out).
NULL = object()


def _token(key, kid: str = "k1", **overrides) -> str:
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": int(time.time()) + 300, "roles": ["auditors"],
              "lh_domains": [FINANCE, "urn:li:domain:marketing"]}  # fmt: skip
    claims.update(overrides)
    sent = {k: (None if v is NULL else v) for k, v in claims.items() if v is not None}
    return jwt.encode(sent, key, algorithm="RS256", headers={"kid": kid})


def _search(idp, token: str) -> httpx.Response:
    window = {"startTime": str(NOW - 3_600_000), "endTime": str(NOW + 60_000), "size": "100"}
    return idp["client"].post(SEARCH_PATH, params=window, json={}, headers={"Authorization": f"Bearer {token}"})


def test_a_valid_jwt_maps_its_claims_to_roles_and_scope(idp):
    scoped = _search(idp, _token(idp["key"]))
    assert scoped.status_code == 200, scoped.text
    assert scoped.json()["total"] == 2 and {e["entityUrn"] for e in scoped.json()["usageEvents"]} == {IN_FINANCE}
    assert all("sourceIP" not in e for e in scoped.json()["usageEvents"])  # auditors: not sensitive
    as_string = _search(idp, _token(idp["key"], lh_domains=f"{FINANCE} urn:li:domain:marketing")).json()
    assert as_string["total"] == 2  # a space-separated string is a list, as OAuth's scope claim
    elsewhere = _search(idp, _token(idp["key"], lh_domains=["urn:li:domain:marketing"])).json()
    assert elsewhere["total"] == 0
    admin = _search(idp, _token(idp["key"], roles=["security"])).json()
    assert admin["usageEvents"][0]["sourceIP"] == "10.0.0.7"
    assert _search(idp, _token(idp["key"], roles=["visitors"])).status_code == 403


@pytest.mark.parametrize(
    ("shape", "value"),
    [
        ("absent", None),
        ("null", NULL),
        ("empty list", []),
        ("empty string", ""),
        ("blank string", "   "),
        ("object", {}),
        ("object with values", {"domain": FINANCE}),
        ("list of an empty string", [""]),
        ("list with a blank string", [FINANCE, " "]),
        ("list with a number", [FINANCE, 7]),
        ("list with a list", [[FINANCE]]),
        ("number", 7),
        ("boolean", True),
    ],
)
def test_a_missing_empty_or_malformed_scope_claim_refuses_the_token(idp, shape, value):
    """A configured scope claim narrows the caller: without a usable one the token is refused, never unscoped."""
    for roles in (["auditors"], ["security"]):  # an admin is refused the same
        answer = _search(idp, _token(idp["key"], roles=roles, lh_domains=value))
        assert answer.status_code == 401, (shape, answer.status_code, answer.text)
        assert "lh_domains" in answer.json()["error"] and answer.headers["www-authenticate"] == "Bearer", shape


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("expired", {"exp": int(time.time()) - 3600}),
        ("wrong audience", {"aud": "another-api"}),
        ("wrong issuer", {"iss": "https://evil.example.test"}),
        ("no expiry", {"exp": None}),
    ],
)
def test_a_jwt_failing_a_check_is_401(idp, name, overrides):
    answer = _search(idp, _token(idp["key"], **overrides))
    assert answer.status_code == 401, (name, answer.text)


def test_a_jwt_signed_with_another_key_is_401(idp):
    assert _search(idp, _token(_key())).status_code == 401  # the provider's kid, another key
    assert _search(idp, _token(_key(), kid="k-unknown")).status_code == 401
    unsigned = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": int(time.time()) + 60, "roles": ["auditors"]},
                          "shared-secret-0123456789abcdef0123", algorithm="HS256", headers={"kid": "k1"})  # fmt: skip
    assert _search(idp, unsigned).status_code == 401


def test_keys_are_cached_and_refreshed_on_an_unknown_kid_no_faster_than_the_floor(idp):
    rotated, stranger = _key(), _key()
    random_kids = [_token(stranger, kid=f"k-random-{i}") for i in range(5)]
    time.sleep(1.1)  # past the floor since the last fetch
    idp["jwks"].keys = [_jwk(idp["key"], "k1"), _jwk(rotated, "k2")]
    before = idp["jwks"].fetches
    assert _search(idp, _token(rotated, kid="k2")).status_code == 200  # unknown kid: fetched again
    assert idp["jwks"].fetches == before + 1
    for token in random_kids:  # more unknown kids at once: no new fetch within the floor interval
        assert _search(idp, token).status_code == 401
    assert _search(idp, _token(rotated, kid="k2")).status_code == 200
    assert idp["jwks"].fetches == before + 1
