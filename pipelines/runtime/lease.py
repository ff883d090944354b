"""Leases: a file that at most one holder creates (a conditional put), renewed while held, taken over
once its holder is gone. The same on a local home and on object storage, where no file lock exists."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conf.locations import Location
from pipelines.runtime.storage import Storage, StoredFile


@dataclass
class Lease:
    """One holder's lease on a file.

    Attributes:
        storage: where the lease file is.
        location: the lease file.
        token: what the file holds while this holder has it (pid, host, start time and any extra facts).
    """

    storage: Storage
    location: Location
    token: dict[str, Any] = field(default_factory=dict)
    _version: str | None = field(default=None, repr=False)

    @classmethod
    def for_this_process(cls, storage: Storage, location: Location, **facts: Any) -> Lease:
        """A lease whose token names this process (pid, host, start time) and `facts`."""
        token = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(), **facts}
        return cls(storage, location, token)

    def try_acquire(self, is_stale: Callable[[dict, StoredFile], bool]) -> dict | None:
        """Take the lease if it is free, or held by a holder `is_stale` gives up on.

        Args:
            is_stale: given the holder's token and its lease file (whose `modified` is the last
                renewal), whether that holder is gone.

        Returns:
            None when this holder has the lease now; else the live holder's token.
        """
        body = json.dumps(self.token, sort_keys=True).encode()
        while True:
            if self.storage.put_if_absent(self.location, body):
                self._version = self._stored_version()
                return None
            current = self.storage.stat(self.location)
            if current is None:
                continue  # released in between: try again
            holder = read_token(self.storage, self.location)
            if not is_stale(holder, current):
                return holder
            # Replaced only if it is still the file judged stale: of two takers, one wins.
            if self.storage.replace_if_unchanged(self.location, body, current.version):
                self._version = self._stored_version()
                return None

    def renew(self) -> bool:
        """Write the token again (the file's modification time is the heartbeat).

        Returns:
            False when the lease is no longer this holder's (taken over meanwhile).
        """
        if self._version is None:
            return False
        body = json.dumps(self.token, sort_keys=True).encode()
        if not self.storage.replace_if_unchanged(self.location, body, self._version):
            return False
        self._version = self._stored_version()
        return True

    def release(self) -> None:
        """Remove the lease file if this holder still has it (the facts the holder changes aside)."""
        if self._version is not None and _holder(read_token(self.storage, self.location)) == _holder(self.token):
            self.storage.delete(self.location)
        self._version = None

    def _stored_version(self) -> str | None:
        current = self.storage.stat(self.location)
        return current.version if current else None


def _holder(token: dict) -> tuple:
    """Who holds a lease: what a token says of its process, not what the holder updates while it runs."""
    return token.get("pid"), token.get("host"), token.get("started_at")


def read_token(storage: Storage, location: Location) -> dict:
    """The token a lease file holds; {} when there is no file or it is not a token."""
    try:
        token = json.loads(storage.read_bytes(location) or b"{}")
    except (FileNotFoundError, ValueError):
        return {}
    return token if isinstance(token, dict) else {}


def holder_process_gone(holder: dict) -> bool:
    """Whether the holder ran on this host and its process no longer exists (killed with SIGKILL)."""
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError, TypeError):
        return False
    return False
