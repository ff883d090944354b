"""The order of aspect versions and of the copies of one version: one definition, read by Spark and by Python.

A version's ordering key sorts as text: `v<version>.<rank>`, or `t<created time>.<rank>` when the record
has no version, each number left-padded with zeros to KEY_DIGITS, rank DELETE_RANK for a DELETE (after the
upsert of the same version) else OTHER_RANK. A PATCH is an operation, not a value, so a PATCH's key ends
with where it stands in its input (`.<line>.<CRC-32 of the file name>`): two patches with one time are both
applied, in the order of their lines. Not the landing time: a key, and the change set and event ids made from
it, must not depend on when or in which batch the record landed, so that a life of batches ends with the ids
one run over the same input gives. Of two copies of one version, the first in ARRIVAL_ORDER counts.

`silver.sequencing` renders these rules as Spark columns; `order_key` and `patch_arrival` here compute them in
Python for the serving's as-of reads, which run without a session (tests compare the two).
"""

from __future__ import annotations

import zlib

from silver.patches import PATCH

KEY_DIGITS = 19
CRC_DIGITS = 10
BY_VERSION, BY_TIME = "v", "t"
DELETE_RANK, OTHER_RANK = "1", "0"
# Arrival order of bronze rows: of two copies of one version, the first one here is the one that counts.
ARRIVAL_ORDER = ("landed_at", "batch_id", "source_file", "line_number")


def lpad(text: str, width: int) -> str:
    """Spark's `lpad(text, width, '0')`: padded with zeros on the left to `width`, or cut to its first `width`."""
    return text[:width] if len(text) >= width else "0" * (width - len(text)) + text


def order_key(version: int | None, created_time: int | None, change_type: str, arrival: str | None = None) -> str:
    """The ordering key of one aspect version; given `arrival` (`patch_arrival`), a PATCH's key ends with it."""
    upper = change_type.upper()
    rank = DELETE_RANK if upper == "DELETE" else OTHER_RANK
    if version is not None:
        key = f"{BY_VERSION}{lpad(str(version), KEY_DIGITS)}.{rank}"
    else:
        key = f"{BY_TIME}{lpad(str(created_time or 0), KEY_DIGITS)}.{rank}"
    return f"{key}.{arrival}" if arrival is not None and upper == PATCH else key


def patch_arrival(line_number: int, source_file: str) -> str:
    """Where a bronze row stands in its input, as sortable text: its line, then the file name's CRC-32."""
    crc = zlib.crc32(source_file.encode("utf-8"))
    return f"{lpad(str(line_number), KEY_DIGITS)}.{lpad(str(crc), CRC_DIGITS)}"
