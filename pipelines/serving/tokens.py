"""The API token file: salted token hashes in settings.tokens_path, written atomically with mode 0600."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from conf.errors import InputError
from conf.settings import Settings
from gold.auth import TokenRecord, bearer_token, issue_token, require_role, verify_token

_FILE_VERSION = 1


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


def create_token(settings: Settings, actor: str, roles: Sequence[str]) -> tuple[str, TokenRecord]:
    """Issue a token, store its salted hash in settings.tokens_path and return (token text, record)."""
    token, record = issue_token(actor, roles, created_at=int(time.time() * 1000))
    with _locked(settings.tokens_path):
        save_tokens(settings.tokens_path, [*load_tokens(settings.tokens_path), record])
    return token, record


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


class TokenSnapshot:
    """The token records of one version of the token file, with the tokens verified against them."""

    def __init__(self, records: list[TokenRecord]):
        self.records = records
        self._verified: dict[str, TokenRecord] = {}
        self._lock = threading.Lock()

    def verify(self, token: str) -> TokenRecord:
        """Return the record of `token` among these records (remembered once verified).

        Raises:
            AuthError: 401 for an unknown token.
        """
        digest = _digest(token)
        record = self._verified.get(digest)
        if record is None:
            record = verify_token(token, self.records)
            with self._lock:
                self._verified[digest] = record
        return record

    def remembered(self, token: str) -> TokenRecord | None:
        """Return the record of `token` if it was verified against these records before, else None."""
        return self._verified.get(_digest(token))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenVerifier:
    """Authenticate bearer tokens against the token file, caching verified tokens until the file changes.

    PBKDF2 makes one verification cost tens of milliseconds on purpose; a verified token is remembered
    (by the SHA-256 of its text, in memory only) so a client's later requests do not pay it again.
    The memory belongs to one version of the file (`TokenSnapshot`): a request that verified a token
    against records read before a revoke can only fill the old version's memory, never the new one's.
    """

    def __init__(self, path: Path):
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._snapshot = TokenSnapshot([])

    def snapshot(self) -> TokenSnapshot:
        """The token records as the file holds them now (re-read only when the file changed)."""
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_ino)
        except FileNotFoundError:
            stamp = (0, 0)
        with self._lock:
            if stamp != self._stamp:
                self._snapshot = TokenSnapshot(load_tokens(self._path))
                self._stamp = stamp
            return self._snapshot

    def authenticate(self, authorization: str | None, role: str) -> TokenRecord:
        """Return the record of the header's token after checking it has `role`.

        Raises:
            AuthError: 401 for a missing, malformed or unknown token; 403 when it lacks `role`.
        """
        token = bearer_token(authorization)
        record = self.snapshot().verify(token)
        require_role(record, role)
        return record

    async def authenticate_request(self, authorization: str | None, role: str) -> TokenRecord:
        """`authenticate` for a request handler: a token verified before at once, a new one on a worker thread.

        Verifying a new token (PBKDF2) takes tens of milliseconds and must not block the event loop; a
        remembered one costs a file stat and a hash, less than handing it to a thread.

        Raises:
            AuthError: as `authenticate`.
        """
        record = self.snapshot().remembered(bearer_token(authorization))
        if record is None:
            return await run_in_threadpool(self.authenticate, authorization, role)
        require_role(record, role)
        return record
