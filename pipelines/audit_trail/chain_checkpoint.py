"""The chain's head kept outside the home: written after every link, compared by `lakehouse verify --against`.

A checkpoint is one JSON document holding the newest link whole (its fields, digest, signature and key
id), so it can be checked on its own: its `link_digest` recomputes from its fields and its signature
verifies. Someone who can rewrite the home can cut the chain's tail and leave a chain that verifies in
itself; the checkpoint, kept where that person cannot write, still names the link that was cut.

No engine is imported: the API's workers write a checkpoint after each access log flush they link.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conf.errors import InputError, SourceUnavailable
from conf.locations import Location, parse_location
from conf.settings import Settings
from gold.audit_chain import LINK_FIELDS, ChainKey, canonical_json, link_digest, signature_valid
from pipelines.runtime.storage import storage_for

CHECKPOINT_FORMAT = "lakehouse-audit-chain-checkpoint/1"
_HEAD_FIELDS = (*LINK_FIELDS, "link_digest", "signature", "key_id")

log = logging.getLogger("lakehouse.audit_chain")


@dataclass(frozen=True)
class Checkpoint:
    """A head of the chain as it was written outside the home.

    Attributes:
        head: the newest link at the time (every field of an ops.audit_chain row).
        written_at_ms: when the checkpoint was written, epoch ms.
        source: where it was read from.
    """

    head: Mapping[str, Any]
    written_at_ms: int
    source: str

    @property
    def seq(self) -> int:
        """The head link's position in the chain."""
        return int(self.head["seq"])


def checkpoint_document(head: Mapping[str, Any], written_at_ms: int) -> bytes:
    """The checkpoint's bytes for a head link: canonical JSON, one line."""
    document = {"format": CHECKPOINT_FORMAT, "written_at_ms": written_at_ms, "head": {f: head.get(f) for f in _HEAD_FIELDS}}
    return (canonical_json(document) + "\n").encode("utf-8")


def write_checkpoint(settings: Settings, head: Mapping[str, Any] | None) -> bool:
    """Replace the checkpoint at audit_chain.checkpoint with `head` (call under the chain's lock).

    Args:
        settings: the lakehouse settings; nothing is written while audit_chain.checkpoint is unset.
        head: the chain's newest link; None (an empty chain) writes nothing.

    Returns:
        Whether a checkpoint was written.

    Raises:
        SourceUnavailable: naming audit_chain.checkpoint and the location when it cannot be written
            (the links are appended already; the next link or publish writes the checkpoint again).
    """
    target = settings.audit_chain.checkpoint
    if not target or head is None:
        return False
    location = parse_location(target)
    try:
        storage_for(location).write_bytes(location, checkpoint_document(head, int(time.time() * 1000)))
    except Exception as exc:  # noqa: BLE001 - any storage failure: the message names the place
        raise SourceUnavailable(f"audit_chain.checkpoint: {target!r} cannot be written ({_reason(exc)})") from None
    return True


def write_checkpoint_or_log(settings: Settings, head: Mapping[str, Any]) -> None:
    """`write_checkpoint` for a writer that must not fail after its link (the API's access log flush): a
    failure is logged, and the next flush writes the newer head."""
    try:
        write_checkpoint(settings, head)
    except SourceUnavailable as exc:
        log.warning("%s", exc)


def read_checkpoint(source: str | Location, option: str = "--against") -> Checkpoint:
    """Read and check a checkpoint: its head's digest must recompute from its fields.

    Args:
        source: a local path or an object-storage URL.
        option: the option or setting that named it (in error messages).

    Raises:
        InputError: naming `option` and the place when it cannot be read, is not a checkpoint, or its
            head does not match its own digest (the checkpoint was altered).
    """
    location = parse_location(source)
    try:
        raw = storage_for(location).read_bytes(location)
    except FileNotFoundError:
        raise InputError(f"{option}: {str(source)!r} does not exist") from None
    except Exception as exc:  # noqa: BLE001 - any storage failure: the message names the place
        raise InputError(f"{option}: {str(source)!r} cannot be read ({_reason(exc)})") from None
    try:
        document = json.loads(raw)
    except ValueError:
        raise InputError(f"{option}: {str(source)!r} is not JSON, so not a chain checkpoint") from None
    if not isinstance(document, dict) or document.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"{option}: {str(source)!r} is not a chain checkpoint (format {CHECKPOINT_FORMAT!r} expected)")
    head = document.get("head")
    missing = [f for f in _HEAD_FIELDS if not isinstance(head, dict) or f not in head]
    if missing:
        raise InputError(f"{option}: {str(source)!r} is not a chain checkpoint (its head lacks {missing[0]!r})")
    if link_digest(head) != head["link_digest"]:
        raise InputError(f"{option}: {str(source)!r}: its head's link_digest does not match its fields (the checkpoint was altered)")
    return Checkpoint(head, int(document.get("written_at_ms") or 0), str(source))


def checkpoint_problem(chain: Sequence[Mapping[str, Any]], checkpoint: Checkpoint, key: ChainKey) -> str | None:
    """What the chain lacks that the checkpoint names, or None when the chain holds the checkpoint's head.

    Args:
        chain: the chain's links in seq order.
        checkpoint: a checkpoint read with `read_checkpoint`.
        key: the configured signing key (an HMAC signature is checked only with it).
    """
    head = checkpoint.head
    written = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(checkpoint.written_at_ms / 1000))
    if head.get("signature") is not None and not signature_valid(head["link_digest"], head["signature"], head["key_id"], key):
        return f"the checkpoint's head (link {checkpoint.seq}) carries a signature that does not verify (key {head['key_id']})"
    if checkpoint.seq >= len(chain):
        return (
            f"the chain ends at link {len(chain) - 1} but the checkpoint written {written} names link {checkpoint.seq} "
            f"({head['table_key']}, batch {head['batch_id']!r}): links {len(chain)}..{checkpoint.seq} were removed"
        )
    stored = chain[checkpoint.seq]
    if stored["link_digest"] != head["link_digest"]:
        return (
            f"link {checkpoint.seq} is {stored['link_digest']} but the checkpoint written {written} names "
            f"{head['link_digest']} ({head['table_key']}, batch {head['batch_id']!r}): the chain was rewritten up to that link"
        )
    return None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
