"""Webhook targets: loopback, private, link-local and metadata addresses refused unless allow-listed, pinned."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time

import pytest

from conf.errors import InputError
from conf.settings_sections import SubscriptionSettings
from gold.subscriptions import EventFilters
from pipelines.batch.publish_audit import publish_audit
from pipelines.subscriptions.delivery import deliver_outcomes
from pipelines.subscriptions.store import add_subscription
from pipelines.subscriptions.targets import check_target, check_url, pinned_connection
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import change_event, land_refined_batch
from tests.pipelines.cli.test_cli import run_cli
from tests.pipelines.serving.certificates import self_signed
from tests.pipelines.subscriptions.receiver import start_receiver

ORDERS = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
LOOPBACK = ("127.0.0.0/8",)
REFUSED = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",  # cloud metadata (link-local)
    "http://127.0.0.1:8080/x",
    "http://[::1]/x",
    "http://0x7f000001/x",  # 127.0.0.1 in hex
    "http://2130706433/x",  # ... as one decimal number
    "http://0177.0.0.1/x",  # ... in octal
    "http://127.1/x",  # ... shortened
    "http://[::ffff:127.0.0.1]/x",  # ... mapped into IPv6
    "http://[64:ff9b::a9fe:a9fe]/x",  # 169.254.169.254 through NAT64
    "http://0.0.0.0/x",
    "http://10.1.2.3/x",
    "https://192.168.0.10/x",
    "http://172.16.5.4/x",
    "http://100.64.0.1/x",  # carrier-grade NAT
    "http://[fd00:ec2::254]/x",  # a unique local address (AWS's IPv6 metadata)
    "http://[fe80::1]/x",
    "http://[::7f00:1]/x",  # 127.0.0.1 in the IPv4-compatible form
    "http://[::a9fe:a9fe]/x",  # 169.254.169.254 alike
    "http://[2002:7f00:1::1]/x",  # 6to4 embedding 127.0.0.1
    "http://[2002:a00:1::]/x",  # ... embedding 10.0.0.1
    "http://[2002:a9fe:a9fe::1]/x",  # ... embedding 169.254.169.254
    "http://[64:ff9b:1::5db8:d822]/x",  # local-use NAT64, whatever it embeds
]


@pytest.mark.parametrize("url", REFUSED)
def test_an_address_target_outside_the_public_internet_is_refused(url):
    with pytest.raises(InputError, match="subscriptions.allowed_networks"):
        check_url(url)


def test_public_addresses_and_allow_listed_networks_are_accepted():
    assert check_url("https://93.184.216.34/hook") == "https://93.184.216.34/hook"
    assert check_url("https://[2002:5db8:d822::1]/hook")  # 6to4 embedding a public address
    assert check_url("https://[64:ff9b::5db8:d822]/hook")  # the well-known NAT64 prefix, a public address
    assert check_url("http://0x7f000001/x", allowed_networks=LOOPBACK)
    with pytest.raises(InputError, match="the address 10.1.2.3"):
        check_url("http://10.1.2.3/x", allowed_networks=LOOPBACK)


def test_a_host_name_resolving_to_loopback_is_refused():
    with pytest.raises(InputError, match="host 'localhost' is the address"):
        check_target("http://localhost:9/x", ())
    check_target("http://localhost:9/x", LOOPBACK + ("::1/128",))


def test_the_connection_goes_to_the_address_checked_for_it():
    """A name that answers a private address on its next lookup (DNS rebinding) gets no connection."""
    serving = start_receiver()
    receiver = next(serving)
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = ["127.0.0.1", "10.0.0.7"]
    lookups = []

    def rebinding_dns(host, port_, type=0):  # noqa: A002 - socket.getaddrinfo's keyword
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[len(lookups) - 1], port_))]

    try:
        connection = pinned_connection(f"http://hooks.test:{port}/hook", LOOPBACK, 5, rebinding_dns)
        connection.request("POST", "/hook", body=b'{"events": []}', headers={"Content-Type": "application/json"})
        assert connection.getresponse().status == 200
        assert receiver.posts[0].headers["Host"] == f"hooks.test:{port}"  # the name, at the address checked
        connection.close()
        with pytest.raises(InputError, match="host 'hooks.test' is the address 10.0.0.7"):
            connection.request("POST", "/hook", body=b"{}")
        assert lookups == ["hooks.test", "hooks.test"] and len(receiver.posts) == 1  # one lookup per connection
    finally:
        serving.close()


def test_an_https_target_is_verified_for_its_name_at_the_pinned_address(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path, "hooks.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test's own certificate, as a CA
    serving = start_receiver(tls=(cert, key))
    receiver = next(serving)
    port = int(receiver.url.split(":")[2].split("/")[0])

    def loopback_dns(host, port_, type=0):  # noqa: A002 - socket.getaddrinfo's keyword
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]

    try:
        connection = pinned_connection(f"https://hooks.test:{port}/hook", LOOPBACK, 5, loopback_dns)
        connection.request("POST", "/hook", body=b'{"events": []}')
        assert connection.getresponse().status == 200 and receiver.posts[0].headers["Host"] == f"hooks.test:{port}"
        connection.close()
        other = pinned_connection(f"https://other.test:{port}/hook", LOOPBACK, 5, loopback_dns)
        with pytest.raises(ssl.SSLCertVerificationError):  # the certificate names hooks.test only
            other.request("POST", "/hook", body=b"{}")
    finally:
        serving.close()


def test_the_command_refuses_a_metadata_target(tmp_path):
    url = "http://169.254.169.254/latest/meta-data"
    refused = run_cli("subscriptions", "add", "ssrf", "--url", url, home=tmp_path, check=False)
    assert refused.returncode == 1 and "169.254.169.254" in refused.stderr
    assert "subscriptions.allowed_networks" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.slow
def test_delivery_checks_the_target_again(spark, tmp_path):
    """A target allowed when added but no longer allowed is not posted to: the subscription is failing."""
    allowed = SubscriptionSettings(retry_initial_ms=20, retry_max_ms=100, retry_budget_ms=500, allowed_networks=LOOPBACK)
    settings = make_settings(tmp_path / "home", subscriptions=allowed)
    register_fresh_tables(spark, settings)
    now = int(time.time() * 1000)
    changes = [change_event("cs-1", "TAG", "ADD", "urn:li:corpuser:alice", now, ORDERS, "globalTags", "s-1")]
    land_refined_batch(spark, settings, "s-1", changes=changes)
    publish_audit(spark, settings)
    serving = start_receiver()
    receiver = next(serving)
    try:
        add_subscription(spark, settings, name="local", url=receiver.url, payload_format="ece",
                         filters=EventFilters(), since_ms=1)  # fmt: skip
        refused = dataclasses.replace(settings, subscriptions=dataclasses.replace(allowed, allowed_networks=()))
        (outcome,) = deliver_outcomes(spark, refused, names=["local"])
        assert outcome.state == "failing" and "127.0.0.1" in outcome.error and receiver.posts == []
        (outcome,) = deliver_outcomes(spark, settings, names=["local"], force=True)
        assert outcome.state == "delivered" and len(receiver.acknowledged()) == 1
    finally:
        serving.close()


def test_allowed_networks_must_be_networks(tmp_path):
    from conf.errors import ConfigError
    from conf.settings import load_settings

    with pytest.raises(ConfigError) as raised:
        load_settings("local", home=tmp_path, env={}, overrides=["subscriptions.allowed_networks=[10.0.0.0/8, intranet]"])
    assert raised.value.problems == [
        "subscriptions.allowed_networks[1]: 'intranet' is not a network (CIDR, e.g. 10.1.0.0/16)"
    ]
