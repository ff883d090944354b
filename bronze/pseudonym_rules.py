"""The pseudonym of an identity in plain Python, for the processes that have no engine (serving, the CLI).

`bronze.pseudonyms` computes the same values in the engine when records land; both use these rules.
"""

from __future__ import annotations

import hashlib
import hmac
import re

PERSON_PREFIX = "urn:li:corpuser:"
PSEUDONYM_PREFIX = PERSON_PREFIX + "p-"
PSEUDONYM_HEX = 24
# A person urn inside any text: up to the first character that ends a urn in JSON or a list.
PERSON_URN_PATTERN = r"urn:li:corpuser:[^\s\"',\\)\]}]+"
# The prefixes a pseudonym can have; none holds a character that is special in a regular expression.
PSEUDONYM_PREFIXES = (PSEUDONYM_PREFIX, "p-", "ip-", "ua-")


def pseudonym_pattern(prefix: str = PSEUDONYM_PREFIX) -> str:
    """The regular expression of a pseudonym with this prefix: the prefix and 24 lowercase hex digits.

    Only a whole value of this shape is a pseudonym: a person whose id merely starts with `p-`
    (`urn:li:corpuser:p-smith`) is a person like any other, and is pseudonymised. The pattern has no
    anchors: Python matches it whole (`is_pseudonym`), the engine between `^` and `\\z`.

    Raises:
        ValueError: for a prefix not in PSEUDONYM_PREFIXES.
    """
    if prefix not in PSEUDONYM_PREFIXES:
        raise ValueError(f"prefix: {prefix!r} is not a pseudonym prefix (one of {', '.join(PSEUDONYM_PREFIXES)})")
    return f"{prefix}[0-9a-f]{{{PSEUDONYM_HEX}}}"


_PSEUDONYM_RES = {prefix: re.compile(pseudonym_pattern(prefix)) for prefix in PSEUDONYM_PREFIXES}


def is_pseudonym(value: str, prefix: str = PSEUDONYM_PREFIX) -> bool:
    """Whether the value is a whole pseudonym with this prefix (`pseudonym_pattern`).

    Raises:
        ValueError: for a prefix not in PSEUDONYM_PREFIXES.
    """
    compiled = _PSEUDONYM_RES.get(prefix) or re.compile(pseudonym_pattern(prefix))
    return compiled.fullmatch(value) is not None


def pseudonym_of(identity: str, secret: bytes, prefix: str = PSEUDONYM_PREFIX) -> str:
    """The pseudonym of one identity (what `bronze.pseudonyms.to_pseudonym` computes in the engine).

    Args:
        identity: a person urn, source IP or user agent; a pseudonym with `prefix` is returned as it is.
        secret: the key store's pseudonym secret.
        prefix: the pseudonym's prefix (PSEUDONYM_PREFIX for people, `ip-`, `ua-`).
    """
    if is_pseudonym(identity, prefix):
        return identity
    digest = hmac.new(secret, identity.encode("utf-8"), hashlib.sha256).hexdigest()
    return prefix + digest[:PSEUDONYM_HEX]
