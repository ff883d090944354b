"""The audit chain's table name, signing key and append lock: what a process without a session needs.

The API's workers link their access log flushes (`pipelines.audit_trail.arrow_chain`) with these and import
no engine; `pipelines.batch.audit_chain` links and verifies with Spark.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Iterator

from conf.errors import ConfigError, InputError
from conf.settings import Settings
from conf.tables import AUDIT_CHAIN
from gold.audit_chain import ChainKey

CHAIN_TABLE = AUDIT_CHAIN
# Rows of a byte-stream (older) digest turned into canonical text at a time (bounds the Python objects alive).
DIGEST_CHUNK_ROWS = 50_000
# Each link names the one before it, so links are appended one at a time: within a process by this lock
# (watch mode publishes the audit and OpenMetadata tables from two threads), across processes (the
# pipeline and the API server, which links its access log flushes) by the file lock `chain_lock`.
_LINKING = threading.Lock()


@contextlib.contextmanager
def chain_lock(settings: Settings) -> Iterator[None]:
    """Hold the chain for appending links: this process's lock and the home's file lock (other processes)."""
    # A local lock: the processes that append links (pipeline, server) share this machine.
    path = settings.local_home / "locks" / "audit-chain.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LINKING, open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def chain_key(settings: Settings) -> ChainKey:
    """Load the signing key audit_chain.signing and audit_chain.key_file name.

    Raises:
        ConfigError: naming audit_chain.key_file when the key cannot be read or is not a key of that kind.
    """
    kind = settings.audit_chain.signing
    if kind == "none":
        return ChainKey("none")
    path = settings.secret_path(settings.audit_chain.key_file)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"audit_chain.key_file: {str(path)!r} cannot be read ({exc.strerror})") from None
    if kind == "hmac":
        if len(raw.strip()) < 16:
            raise ConfigError(f"audit_chain.key_file: {str(path)!r} holds under 16 bytes; too short for an HMAC key")
        return ChainKey("hmac", raw.strip())
    from cryptography.hazmat.primitives import serialization

    try:
        private = serialization.load_pem_private_key(raw, password=None)
        secret = private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"audit_chain.key_file: {str(path)!r} is not an unencrypted Ed25519 PEM key ({exc})") from None
    return ChainKey("ed25519", secret)


def create_key(settings: Settings, kind: str) -> str:
    """Write a new signing key of `kind` (hmac or ed25519) to audit_chain.key_file (mode 0600); return its key id.

    Raises:
        InputError: when `kind` is not hmac or ed25519, or the file exists already (never overwritten).
    """
    import os
    import secrets

    if kind not in ("hmac", "ed25519"):
        raise InputError(f"--kind: {kind!r} is not one of hmac, ed25519")
    path = settings.secret_path(settings.audit_chain.key_file)
    if path.exists():
        raise InputError(f"audit_chain.key_file: {str(path)!r} exists; refusing to replace a signing key")
    if kind == "hmac":
        secret = secrets.token_hex(32).encode("ascii")
        content = secret
        key = ChainKey("hmac", secret)
    else:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = Ed25519PrivateKey.generate()
        content = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        key = ChainKey(
            "ed25519",
            private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return str(key.key_id)
