"""The API token file: salted token hashes in settings.tokens_path, written atomically with mode 0600.

Beside it, `<tokens file>.last-used.json` holds when each token last authenticated (written by the server's
background flusher at most once a minute and at shutdown, so a request never waits on it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from conf.errors import InputError
from conf.settings import Settings
from gold.scopes import UNSCOPED, Scope
from pipelines.serving.auth import TokenRecord, bearer_token, issue_token, rotate_secret, upgraded, verify_token

_FILE_VERSION = 2
# Last-used times are written at most this often (ms): often enough for a listing, never per request.
LAST_USED_WRITE_MS = 60_000


def load_tokens(path: Path) -> list[TokenRecord]:
    """Read the stored token records (none when the file does not exist).

    Raises:
        InputError: when the file is not a token file this service wrote.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("tokens"), list):
        raise InputError(f"{path}: expected an object with a 'tokens' list")
    return [TokenRecord.from_json(item) for item in document["tokens"]]


def save_tokens(path: Path, records: Sequence[TokenRecord]) -> None:
    """Replace the token file atomically (temporary file + rename), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"version": _FILE_VERSION, "tokens": [r.to_json() for r in records]}
    fd, temporary = tempfile.mkstemp(prefix=".tokens-", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialize read-modify-write of the token file across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _now_ms() -> int:
    return int(time.time() * 1000)


def create_token(
    settings: Settings,
    actor: str,
    roles: Sequence[str],
    *,
    expires_in_ms: int | None = None,
    scope: Scope = UNSCOPED,
) -> tuple[str, TokenRecord]:
    """Issue a token, store its salted hash in settings.tokens_path and return (token text, record).

    Args:
        settings: names the token file.
        actor: the urn the token acts as.
        roles: its roles.
        expires_in_ms: its lifetime from now (None: it never expires).
        scope: the audit rows it may see.

    Raises:
        InputError: as `pipelines.serving.auth.issue_token`, or for a lifetime that is not positive.
    """
    if expires_in_ms is not None and expires_in_ms <= 0:
        raise InputError(f"--expires-in: {expires_in_ms} ms is not a positive lifetime")
    now = _now_ms()
    expires_at = None if expires_in_ms is None else now + expires_in_ms
    token, record = issue_token(actor, roles, created_at=now, expires_at=expires_at, scope=scope)
    with _locked(settings.tokens_path):
        save_tokens(settings.tokens_path, [*load_tokens(settings.tokens_path), record])
    return token, record


def _replace_record(
    tokens_path: Path, token_id: str, change: Callable[[TokenRecord], TokenRecord]
) -> tuple[TokenRecord, TokenRecord]:
    """Apply `change` to the stored record of `token_id` under the file lock; return (old, new).

    Raises:
        InputError: when no token has that id.
    """
    with _locked(tokens_path):
        records = load_tokens(tokens_path)
        old = next((r for r in records if r.token_id == token_id), None)
        if old is None:
            raise InputError(f"token id: {token_id!r} is not a stored token")
        new = change(old)
        save_tokens(tokens_path, [new if r.token_id == token_id else r for r in records])
    return old, new


def rotate_token(settings: Settings, token_id: str) -> tuple[str, TokenRecord]:
    """Give a stored token a new secret (the old text is refused from the server's next request on).

    Returns:
        The new token text (shown once) and the stored record.

    Raises:
        InputError: when no token has that id.
    """
    issued: dict[str, str] = {}

    def change(old: TokenRecord) -> TokenRecord:
        issued["token"], record = rotate_secret(old, _now_ms())
        return record

    _, record = _replace_record(settings.tokens_path, token_id, change)
    return issued["token"], record


def revoke_token(settings: Settings, token_id: str) -> TokenRecord:
    """Remove a token by id; the server refuses it from its next request on.

    Raises:
        InputError: when no token has that id.
    """
    with _locked(settings.tokens_path):
        records = load_tokens(settings.tokens_path)
        kept = [r for r in records if r.token_id != token_id]
        if len(kept) == len(records):
            raise InputError(f"token id: {token_id!r} is not a stored token")
        save_tokens(settings.tokens_path, kept)
    return next(r for r in records if r.token_id == token_id)


def last_used_path(tokens_path: Path) -> Path:
    """The file beside the token file that holds each token's last authentication time."""
    return tokens_path.with_name(tokens_path.name + ".last-used.json")


def load_last_used(tokens_path: Path) -> dict[str, int]:
    """token id -> epoch ms of its last authentication (empty when never recorded or unreadable)."""
    try:
        document = json.loads(last_used_path(tokens_path).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): int(v) for k, v in document.items() if isinstance(v, int)} if isinstance(document, dict) else {}


def save_last_used(tokens_path: Path, used: dict[str, int]) -> None:
    """Merge `used` into the last-used file (the later time of each token wins), atomically."""
    with _locked(tokens_path):
        merged = load_last_used(tokens_path)
        for token_id, at in used.items():
            merged[token_id] = max(at, merged.get(token_id, 0))
        fd, temporary = tempfile.mkstemp(prefix=".last-used-", dir=tokens_path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(merged, handle, indent=2, sort_keys=True)
            os.replace(temporary, last_used_path(tokens_path))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise


class TokenVerifier:
    """Authenticate bearer tokens against the token file (re-read when it changes); note when each was used.

    Verification is one HMAC-SHA256 whether the id is known or not, cheap enough for every request. A
    token stored by an earlier version (PBKDF2) is verified the old way once and its record rewritten.
    """

    def __init__(self, path: Path):
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._records: dict[str, TokenRecord] = {}
        self._used: dict[str, int] = {}
        self._used_written_at = 0

    def records(self) -> dict[str, TokenRecord]:
        """The token records by id as the file holds them now (re-read only when the file changed)."""
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_ino)
        except FileNotFoundError:
            stamp = (0, 0)
        with self._lock:
            if stamp != self._stamp:
                self._records = {r.token_id: r for r in load_tokens(self._path)}
                self._stamp = stamp
            return self._records

    def verify(self, token: str, now_ms: int | None = None) -> TokenRecord:
        """Return the record of a token text, noting its use.

        Raises:
            AuthError: 401 for a malformed, unknown, wrong or expired token.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        record = verify_token(token, self.records(), now_ms)
        current = upgraded(record, token)
        if current is not record:
            _replace_record(self._path, record.token_id, lambda _: current)
        self._note_use(record.token_id, now_ms)
        return current

    def authenticate(self, authorization: str | None) -> TokenRecord:
        """Return the record of the `Authorization: Bearer` header's token.

        Raises:
            AuthError: 401 for a missing, malformed, unknown or expired token.
        """
        return self.verify(bearer_token(authorization))

    def _note_use(self, token_id: str, now_ms: int) -> None:
        with self._lock:
            self._used[token_id] = now_ms

    def flush(self, now_ms: int | None = None, force: bool = True) -> None:
        """Write the last-used times noted since the last write (unless `force` is off and one was written lately).

        Called off the request path: by the server's background flusher, and at shutdown with `force`.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if not self._used or (not force and now_ms - self._used_written_at < LAST_USED_WRITE_MS):
                return
            used, self._used, self._used_written_at = self._used, {}, now_ms
        self._write_used(used)

    def _write_used(self, used: dict[str, int]) -> None:
        try:
            save_last_used(self._path, used)
        except OSError:
            # A read-only home must not refuse requests; the times are a convenience, not a record.
            pass

