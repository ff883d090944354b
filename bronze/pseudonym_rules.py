"""The pseudonym of an identity in plain Python, for the processes that have no engine (serving, the CLI).

`bronze.pseudonyms` computes the same values in the engine when records land; both use these rules.
"""

from __future__ import annotations

import hashlib
import hmac

PERSON_PREFIX = "urn:li:corpuser:"
PSEUDONYM_PREFIX = PERSON_PREFIX + "p-"
PSEUDONYM_HEX = 24
# A person urn inside any text: up to the first character that ends a urn in JSON or a list.
PERSON_URN_PATTERN = r"urn:li:corpuser:[^\s\"',\\)\]}]+"


def pseudonym_of(identity: str, secret: bytes, prefix: str = PSEUDONYM_PREFIX) -> str:
    """The pseudonym of one identity (what `bronze.pseudonyms.to_pseudonym` computes in the engine).

    Args:
        identity: a person urn, source IP or user agent; a person pseudonym is returned as it is.
        secret: the key store's pseudonym secret.
        prefix: the pseudonym's prefix (PSEUDONYM_PREFIX for people, `ip-`, `ua-`).
    """
    if identity.startswith(PSEUDONYM_PREFIX):
        return identity
    digest = hmac.new(secret, identity.encode("utf-8"), hashlib.sha256).hexdigest()
    return prefix + digest[:PSEUDONYM_HEX]
