"""The server key that signs scroll ids: generated once per home, mode 0600, shared by every server process."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from conf.errors import ConfigError
from conf.settings import Settings
from gold.scroll_ids import ScrollSigner

KEY_BYTES = 32
# The caller the command line's scroll ids are issued to (API callers are token ids: `lh.<id>.<secret>`).
LOCAL_PRINCIPAL = "local"


def scroll_key_path(settings: Settings) -> Path:
    """The file holding the scroll id key (serve.scroll_key_file, relative to the home)."""
    return settings.secret_path(settings.serve.scroll_key_file)


def load_scroll_key(settings: Settings) -> bytes:
    """Return the home's scroll id key, creating it (random, owner-only) the first time.

    The key is written to a temporary file and linked into place, so a process never reads a half-written
    key; when two processes create it at once, the first link wins and both use that key.

    Raises:
        ConfigError: when the key file is readable by others or does not hold a key.
    """
    path = scroll_key_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(prefix=".scroll-key-", dir=path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_hex(KEY_BYTES).encode())
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"serve.scroll_key_file: {str(path)!r} has mode {oct(mode)}; it must be readable by its owner only (chmod 600)"
        )
    try:
        key = bytes.fromhex(path.read_text().strip())
    except ValueError:
        key = b""
    if len(key) < KEY_BYTES:
        raise ConfigError(f"serve.scroll_key_file: {str(path)!r} does not hold a key (remove it: a new one is made)")
    return key


def local_signer(settings: Settings) -> ScrollSigner:
    """The scroll id signer of the home's own command line (`lakehouse audit search`): caller `local`.

    Its scroll ids are valid only for the command line, not for an API caller (and the other way round).
    """
    return ScrollSigner(load_scroll_key(settings), principal=LOCAL_PRINCIPAL)
