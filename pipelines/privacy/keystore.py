"""The privacy key store: the pseudonym secret and one key per person, kept apart from the tables.

`KeyStore` is what the lakehouse asks of a key store; `LocalKeyStore` keeps everything in one JSON file
under the home's secrets (mode 0600, rewritten atomically), and a cloud KMS can implement the same
four methods. Destroying a person's key is the erasure: the identity encrypted under it can no longer
be read anywhere, in any table version, backup or copy. Losing the file erases everyone.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from conf.errors import ConfigError
from conf.settings import Settings

KEY_FORMAT = "lakehouse-privacy-keys/1"
_NONCE_BYTES = 12


class KeyStore(Protocol):
    """The keys pseudonymisation and erasure need (a local file, or a KMS behind the same methods)."""

    def pseudonym_secret(self) -> bytes:
        """The secret every pseudonym is keyed with (created on first use)."""
        ...

    def person_keys(self, pseudonyms: Collection[str], create: bool = False) -> dict[str, bytes | None]:
        """The keys of people (by pseudonym), the missing ones created when asked (in one change of the store).

        A person whose key was destroyed or never created (and not asked to be) maps to None.
        """
        ...

    def destroy(self, pseudonym: str) -> bool:
        """Destroy one person's key; True when there was one."""
        ...

    def has_person(self, pseudonym: str) -> bool:
        """Whether the person's key exists."""
        ...


class LocalKeyStore:
    """Keys in one JSON file, owner-only, rewritten atomically (a temporary file then a rename) on every change.

    Args:
        path: the key file (privacy.key_file under the home's secrets).
        create: create the file when missing (landing does; erasure and reading never do).

    Raises:
        ConfigError: naming privacy.key_file when the file is missing (and not to be created), is readable
            by others than its owner, or is not a key file.
    """

    def __init__(self, path: Path, create: bool = False):
        self._path = path
        self._lock = threading.Lock()
        if create and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._write({"format": KEY_FORMAT, "pseudonym_secret": _b64(secrets.token_bytes(32)), "people": {}}, exclusive=True)
        self._document = self._read()

    def _read(self) -> dict:
        try:
            mode = stat.S_IMODE(self._path.stat().st_mode)
            document = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(
                f"privacy.key_file: {str(self._path)!r} does not exist; without it no pseudonym can be computed "
                "or identity read (restore it from its backup: docs/privacy.md#key-management)"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"privacy.key_file: {str(self._path)!r} cannot be read as a key file ({exc})") from None
        if mode & 0o077:
            raise ConfigError(f"privacy.key_file: {str(self._path)!r} has mode {oct(mode)}; it must be readable by its owner only (chmod 600)")
        if not isinstance(document, dict) or document.get("format") != KEY_FORMAT:
            raise ConfigError(f"privacy.key_file: {str(self._path)!r} is not a privacy key file (format {KEY_FORMAT!r})")
        return document

    def _write(self, document: dict, exclusive: bool = False) -> None:
        partial = self._path.with_name(f".{self._path.name}.{os.getpid()}.partial")
        fd = os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            try:
                os.link(partial, self._path)  # never replaces a file another process created first
            except FileExistsError:
                pass
            os.unlink(partial)
        else:
            os.replace(partial, self._path)

    def pseudonym_secret(self) -> bytes:
        """The secret every pseudonym is keyed with."""
        return base64.b64decode(self._document["pseudonym_secret"])

    def person_keys(self, pseudonyms: Collection[str], create: bool = False) -> dict[str, bytes | None]:
        """The people's keys; the missing ones created when `create`, the file rewritten once for all of them.

        A batch of new people costs one read and one rewrite of the file, not one per person.
        """
        with self._lock:
            people = self._document["people"]
            if create and any(p not in people for p in pseudonyms):
                self._document = self._read()  # another process may have added keys since
                people = self._document["people"]
                missing = {p for p in pseudonyms if p not in people}
                if missing:
                    people.update((p, _b64(AESGCM.generate_key(bit_length=256))) for p in sorted(missing))
                    self._write(self._document)
            return {p: None if people.get(p) is None else base64.b64decode(people[p]) for p in pseudonyms}

    def destroy(self, pseudonym: str) -> bool:
        """Remove the person's key from the file (rewritten atomically)."""
        with self._lock:
            self._document = self._read()
            if self._document["people"].pop(pseudonym, None) is None:
                return False
            self._write(self._document)
            return True

    def has_person(self, pseudonym: str) -> bool:
        """Whether the person's key exists."""
        return pseudonym in self._document["people"]


def key_store_for(settings: Settings, create: bool = False) -> LocalKeyStore:
    """The home's key store (privacy.key_file)."""
    return LocalKeyStore(settings.secret_path(settings.privacy.key_file), create=create)


def encrypt_identity(key: bytes, pseudonym: str, identity: str) -> str:
    """The identity encrypted under a person's key (AES-256-GCM, bound to its pseudonym), as base64 text."""
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return _b64(nonce + AESGCM(key).encrypt(nonce, identity.encode("utf-8"), pseudonym.encode("utf-8")))


def decrypt_identity(key: bytes | None, pseudonym: str, ciphertext: str) -> str | None:
    """The identity, or None when the key is gone (erased) or the ciphertext is not this pseudonym's."""
    if key is None:
        return None
    raw = base64.b64decode(ciphertext)
    try:
        return AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], pseudonym.encode("utf-8")).decode("utf-8")
    except InvalidTag:
        return None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
