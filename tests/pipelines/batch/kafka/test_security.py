"""Production Kafka: SASL and TLS settings reach the consumer, secrets from files or the environment, and the
Schema Registry client authenticates (a real registry on loopback that refuses requests without credentials,
a real broker that requires SASL)."""

from __future__ import annotations

import base64
import io
import json
import ssl
import threading
from http.server import ThreadingHTTPServer

import fastavro
import pytest

from conf.errors import ConfigError, SourceUnavailable
from conf.settings import load_settings
from pipelines.batch.kafka.client import consumer_config, open_consumer, topic_partitions
from pipelines.batch.kafka.registry import AvroDecoder
from pipelines.bench.kafka import loopback_broker
from tests.pipelines.bi.conftest import _self_signed
from tests.pipelines.json_endpoints import JsonHandler

_USER, _PASSWORD, _TOKEN = "lakehouse", "registry-secret", "a-bearer-token"
_SCHEMA = {"type": "record", "name": "Small", "fields": [{"name": "entityUrn", "type": "string"}]}


class _GuardedRegistry(JsonHandler):
    """A Schema Registry serving schema id 3 to requests with the basic auth or bearer credentials, 401 to others."""

    content_type = "application/vnd.schemaregistry.v1+json"

    def do_GET(self):  # noqa: N802 - the handler's name in http.server
        basic = "Basic " + base64.b64encode(f"{_USER}:{_PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") not in (basic, f"Bearer {_TOKEN}"):
            self.answer_json(401, {"error_code": 401, "message": "Unauthorized"})
        elif self.path.startswith("/schemas/ids/3"):
            self.answer_json(200, {"schema": json.dumps(_SCHEMA)})
        else:
            self.answer_json(404, {"error_code": 40403, "message": "Schema not found"})


@pytest.fixture(scope="module")
def registry_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GuardedRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _kafka(tmp_path, *sets: str):
    overrides = ["ingest.kafka.bootstrap_servers=127.0.0.1:9", "ingest.kafka.timeout_seconds=3", *sets]
    return load_settings("local", home=tmp_path, env={}, overrides=overrides).ingest.kafka


def _wire(record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(_SCHEMA), record)
    return b"\x00\x00\x00\x00\x03" + body.getvalue()


def test_a_registry_that_wants_credentials_refuses_none_naming_the_setting(registry_url, tmp_path):
    decoder = AvroDecoder(_kafka(tmp_path, "ingest.kafka.format=avro", f"ingest.kafka.schema_registry_url={registry_url}"))
    with pytest.raises(ConfigError, match=r"ingest.kafka.registry_auth: the Schema Registry at .* refused the credentials \(HTTP 401\)"):
        decoder(_wire({"entityUrn": "urn:li:corpuser:x"}))


def test_basic_auth_with_the_password_from_the_environment_reads_the_schema(registry_url, tmp_path):
    kafka = _kafka(tmp_path, "ingest.kafka.format=avro", f"ingest.kafka.schema_registry_url={registry_url}",
                   f"ingest.kafka.registry_auth.username={_USER}")  # fmt: skip
    record = AvroDecoder(kafka, env={"LAKEHOUSE_SCHEMA_REGISTRY_PASSWORD": _PASSWORD})(_wire({"entityUrn": "urn:li:corpuser:x"}))
    assert record == {"entityUrn": "urn:li:corpuser:x"}
    wrong = AvroDecoder(kafka, env={"LAKEHOUSE_SCHEMA_REGISTRY_PASSWORD": "not-it"})
    with pytest.raises(ConfigError) as refused:
        wrong(_wire({"entityUrn": "urn:li:corpuser:x"}))
    assert "HTTP 401" in str(refused.value) and "not-it" not in str(refused.value)


def test_a_bearer_token_from_a_file_reads_the_schema(registry_url, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(_TOKEN + "\n")
    kafka = _kafka(tmp_path, "ingest.kafka.format=avro", f"ingest.kafka.schema_registry_url={registry_url}",
                   f"ingest.kafka.registry_auth.token_file={token_file}", "ingest.kafka.registry_auth.logical_cluster=lsrc-1")  # fmt: skip
    assert AvroDecoder(kafka, env={})(_wire({"entityUrn": "urn:li:corpuser:y"})) == {"entityUrn": "urn:li:corpuser:y"}


def test_a_registry_over_tls_is_trusted_with_the_ca_bundle_of_the_settings_only(tmp_path):
    cert, key = _self_signed(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GuardedRegistry)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sets = ["ingest.kafka.format=avro", f"ingest.kafka.schema_registry_url=https://127.0.0.1:{server.server_port}",
                f"ingest.kafka.registry_auth.username={_USER}"]  # fmt: skip
        env = {"LAKEHOUSE_SCHEMA_REGISTRY_PASSWORD": _PASSWORD}
        with pytest.raises(SourceUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            AvroDecoder(_kafka(tmp_path, *sets), env=env)(_wire({"entityUrn": "urn:li:corpuser:x"}))
        trusting = AvroDecoder(_kafka(tmp_path, *sets, f"ingest.kafka.registry_auth.tls_ca_file={cert}"), env=env)
        assert trusting(_wire({"entityUrn": "urn:li:corpuser:x"})) == {"entityUrn": "urn:li:corpuser:x"}
    finally:
        server.shutdown()


def test_sasl_and_tls_settings_become_the_consumers_properties_with_the_secret_from_a_file(tmp_path):
    secret = tmp_path / "kafka-password"
    secret.write_text("s3cret\n")
    kafka = _kafka(tmp_path, "ingest.kafka.security.protocol=sasl_ssl", "ingest.kafka.security.sasl_mechanism=SCRAM-SHA-512",
                   "ingest.kafka.security.username=lakehouse", f"ingest.kafka.security.password_file={secret}",
                   "ingest.kafka.security.tls_ca_file=/etc/ssl/ca.pem")  # fmt: skip
    config = consumer_config(kafka, env={})
    assert {k: config[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location")} == {
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "lakehouse",
        "sasl.password": "s3cret", "ssl.ca.location": "/etc/ssl/ca.pem"}  # fmt: skip
    oauth = _kafka(tmp_path, "ingest.kafka.security.protocol=sasl_ssl", "ingest.kafka.security.sasl_mechanism=OAUTHBEARER",
                   "ingest.kafka.security.username=client-1", "ingest.kafka.security.oauth_token_endpoint=https://idp/token")  # fmt: skip
    config = consumer_config(oauth, env={"LAKEHOUSE_KAFKA_PASSWORD": "client-secret"})
    assert (config["sasl.oauthbearer.method"], config["sasl.oauthbearer.client.id"], config["sasl.oauthbearer.client.secret"],
            config["sasl.oauthbearer.token.endpoint.url"]) == ("oidc", "client-1", "client-secret", "https://idp/token")  # fmt: skip
    with pytest.raises(ConfigError, match="ingest.kafka.security: no password for SCRAM-SHA-512: set LAKEHOUSE_KAFKA_PASSWORD"):
        consumer_config(_kafka(tmp_path, "ingest.kafka.security.protocol=sasl_plaintext",
                               "ingest.kafka.security.sasl_mechanism=SCRAM-SHA-512", "ingest.kafka.security.username=u"), env={})  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["ingest.kafka.client.sasl.password=x"], "ingest.kafka.client.sasl.password: a secret is not a setting"),
        (["ingest.kafka.client.security.protocol=SASL_SSL"],
         "ingest.kafka.client.security.protocol: set ingest.kafka.security.protocol instead"),
        (["ingest.kafka.security.protocol=sasl"], "ingest.kafka.security.protocol: 'sasl' is not one of"),
        (["ingest.kafka.security.sasl_mechanism=PLAIN"], "ingest.kafka.security.sasl_mechanism: 'PLAIN' needs protocol"),
        (["ingest.kafka.security.protocol=sasl_ssl", "ingest.kafka.security.sasl_mechanism=GSSAPI"],
         "ingest.kafka.security.sasl_mechanism: 'GSSAPI' is not one of"),
        (["ingest.kafka.security.protocol=ssl", "ingest.kafka.security.tls_cert_file=c.pem"],
         "ingest.kafka.security.tls_cert_file / tls_key_file"),
        (["ingest.kafka.registry_auth.username=u", "ingest.kafka.registry_auth.token_env=T"],
         "ingest.kafka.registry_auth: username 'u' and a bearer token are both set"),
    ],
)
def test_bad_security_settings_are_named(tmp_path, sets, named):
    with pytest.raises(ConfigError) as raised:
        _kafka(tmp_path, *sets)
    assert named in str(raised.value)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """A broker that requires every client to log in with SASL."""
    with loopback_broker(tmp_path_factory.mktemp("sasl-broker"), authentication=True) as bootstrap:
        yield bootstrap


def _refused_login(kafka, env) -> str:
    consumer = open_consumer(kafka, env=env)
    try:
        with pytest.raises(ConfigError) as refused:
            topic_partitions(consumer, kafka)
    finally:
        consumer.close()
    return str(refused.value)


@pytest.mark.slow
def test_a_broker_that_requires_sasl_reports_the_refused_scram_login_naming_the_settings(sasl_broker, tmp_path):
    kafka = _kafka(tmp_path, f"ingest.kafka.bootstrap_servers={sasl_broker}", "ingest.kafka.security.protocol=sasl_plaintext",
                   "ingest.kafka.security.sasl_mechanism=SCRAM-SHA-256", "ingest.kafka.security.username=nobody",
                   "ingest.kafka.timeout_seconds=2")  # fmt: skip
    message = _refused_login(kafka, {"LAKEHOUSE_KAFKA_PASSWORD": "pw"})
    assert "ingest.kafka.security" in message and "SCRAM-SHA-256" in message and "unknown-user" in message
    assert "'pw'" not in message


class _TokenEndpoint(JsonHandler):
    """An OAuth token endpoint: records each request and grants an (unsigned) access token."""

    requests: list[tuple[str | None, str]] = []

    def do_POST(self):  # noqa: N802 - the handler's name in http.server
        self.requests.append((self.headers.get("Authorization"), self.rfile.read(int(self.headers["Content-Length"])).decode()))
        claims = base64.urlsafe_b64encode(json.dumps({"sub": "client-1", "exp": 4102444800, "iat": 1700000000}).encode())
        token = "eyJhbGciOiJub25lIn0." + claims.decode().rstrip("=") + "."
        self.answer_json(200, {"access_token": token, "token_type": "bearer", "expires_in": 3600})


@pytest.mark.slow
def test_oauthbearer_takes_a_token_from_the_endpoint_with_the_client_credentials_and_presents_it(sasl_broker, tmp_path):
    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    try:
        kafka = _kafka(tmp_path, f"ingest.kafka.bootstrap_servers={sasl_broker}", "ingest.kafka.security.protocol=sasl_plaintext",
                       "ingest.kafka.security.sasl_mechanism=OAUTHBEARER", "ingest.kafka.security.username=client-1",
                       f"ingest.kafka.security.oauth_token_endpoint=http://127.0.0.1:{endpoint.server_port}/token",
                       "ingest.kafka.timeout_seconds=2")  # fmt: skip
        # The test broker takes no OAuth token: the login reaches it and is refused.
        message = _refused_login(kafka, {"LAKEHOUSE_KAFKA_PASSWORD": "client-secret"})
    finally:
        endpoint.shutdown()
    credentials = "Basic " + base64.b64encode(b"client-1:client-secret").decode()
    assert _TokenEndpoint.requests[0] == (credentials, "grant_type=client_credentials")
    assert "OAUTHBEARER login of 'client-1'" in message and "client-secret" not in message
