"""Subscription secrets encrypted at rest with a key file under the lakehouse home (owner-only, mode 0600).

A signing secret must be read back to compute each HMAC, so it is encrypted (Fernet: AES-128-CBC with
an HMAC-SHA256 tag), not hashed. The key never leaves the key file; the ciphertext lives in
ops.subscriptions. Neither the secret nor the key is ever printed, logged or tracked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from conf.errors import ConfigError, InputError
from conf.settings import Settings

_MAX_SECRET_BYTES = 4096


def key_path(settings: Settings) -> Path:
    """The key file that encrypts subscription secrets."""
    return settings.secret_path(settings.subscriptions.key_file)


def _load_key(settings: Settings, *, create: bool) -> bytes:
    path = key_path(settings)
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            pass  # another process created it first: use theirs
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        key = path.read_bytes().strip()
    except FileNotFoundError:
        raise ConfigError(
            f"subscriptions.key_file: {str(path)!r} does not exist; the stored subscription secrets cannot be decrypted"
        ) from None
    if mode & 0o077:
        raise ConfigError(
            f"subscriptions.key_file: {str(path)!r} has mode {oct(mode)}; it must be readable by its owner only (chmod 600)"
        )
    return key


def read_secret_file(path: Path) -> bytes:
    """Read a signing secret from a file (surrounding whitespace and the final line break dropped).

    Raises:
        InputError: naming the option and the path when the file is missing, unreadable, empty or too large.
    """
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise InputError(f"--secret-file: {str(path)!r} cannot be read ({exc.strerror or exc})") from None
    if not secret:
        raise InputError(f"--secret-file: {str(path)!r} is empty")
    if len(secret) > _MAX_SECRET_BYTES:
        raise InputError(f"--secret-file: {str(path)!r} holds more than {_MAX_SECRET_BYTES} bytes")
    return secret


def encrypt_secret(settings: Settings, secret: bytes) -> str:
    """Encrypt a secret with the home's key (created, mode 0600, on first use); return the token text."""
    return Fernet(_load_key(settings, create=True)).encrypt(secret).decode("ascii")


def decrypt_secret(settings: Settings, ciphertext: str, subscription: str) -> bytes:
    """Decrypt a stored secret.

    Raises:
        ConfigError: when the key file is missing, readable by others, or not the key that encrypted it.
    """
    try:
        return Fernet(_load_key(settings, create=False)).decrypt(ciphertext.encode("ascii"))
    except (InvalidToken, ValueError):
        raise ConfigError(
            f"subscriptions.key_file: {str(key_path(settings))!r} does not decrypt the secret of subscription "
            f"{subscription!r} (was the key file replaced?); remove and add the subscription again"
        ) from None
