"""Hashing input files in the engine: `binaryFile` reads and `sha2`, the same SHA-256 as hashlib's.

One read lists several files; the engine names each file of it by its path, which engines spell
differently (Sail: `tmp/x.jsonl` and, on object storage, the key alone; JVM Spark: `file:/tmp/x.jsonl`,
`s3://bucket/x.jsonl`). Both sides are therefore compared by the path's key: the path without its scheme,
its bucket and its leading slashes, and files whose keys would be the same are read in separate reads.
Sail 0.7.2 gives a file as many rows as the read partitions its byte range is split into (each the whole
file): the copies have the same hash, but each is read and hashed (`MAX_ENGINE_HASH_BYTES` bounds the
memory that takes). What the engine does not hash is hashed in Python (`pipelines.batch.landing.files`):
a path it would take as a glob pattern, and a larger file.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from conf.locations import Location

log = logging.getLogger("lakehouse.landing")
# The engine reads a path as a glob pattern: with one of these in it, it may read another file, or none.
GLOB_CHARACTERS = re.compile(r"[*?\[\]{}\\]")
# Larger files are hashed in Python: each read partition a file spans holds all of its bytes (see above).
MAX_ENGINE_HASH_BYTES = 512 << 20
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Files per hashing read: each is a path in the read's plan, so a batch of many files is read in several
# reads, each plan the size of one of this many files (docs/scaling.md: plans that do not grow).
MAX_FILES_PER_HASH_READ = 64
# A path as engines spell it, to its key: an optional scheme, an optional //authority, leading slashes.
_PATH_PREFIX = r"^([A-Za-z][A-Za-z0-9+.-]*:)?(//[^/]*)?/*"


def engine_hashable(path: Location, size: int) -> bool:
    """Whether the engine hashes this file: a path that is no glob pattern, of at most MAX_ENGINE_HASH_BYTES."""
    return not GLOB_CHARACTERS.search(str(path)) and size <= MAX_ENGINE_HASH_BYTES


def path_key(path: Location) -> str:
    """A file's path without scheme, bucket and leading slashes: how it is matched with the engine's."""
    return path.key if not isinstance(path, Path) else str(path).lstrip("/")


def engine_path_key(path: Column) -> Column:
    """The key (`path_key`) of a path the engine names a file by, whatever scheme it spells it with."""
    return F.regexp_replace(path, _PATH_PREFIX, "")


def read_groups(paths: Sequence[Location], max_files: int = MAX_FILES_PER_HASH_READ) -> list[list[Location]]:
    """Split files into groups of distinct keys and at most `max_files` files, in order: each group is one engine read."""
    groups: list[list[Location]] = []
    keys: list[set[str]] = []
    for path in paths:
        key = path_key(path)
        for group, seen in zip(groups, keys):
            if key not in seen and len(group) < max_files:
                group.append(path)
                seen.add(key)
                break
        else:
            groups.append([path])
            keys.append({key})
    return groups


def content_hashes(spark: SparkSession, files: Sequence[tuple[Location, int]]) -> dict[Location, str]:
    """The SHA-256 (hex) of each file's bytes, computed by the engine: one read per group of files.

    Args:
        spark: the session.
        files: (path, size in bytes) of files the engine hashes (`engine_hashable`).

    Returns:
        path -> hex SHA-256, the same digest as hashlib's over the file's bytes. The engine lists no row
        for an empty file: its digest is that of no bytes. A file missing here (the engine's read failed)
        is for the caller to hash.
    """
    hashes = {path: EMPTY_SHA256 for path, size in files if size == 0}
    for group in read_groups([path for path, size in files if size > 0]):
        by_key = {path_key(path): path for path in group}
        try:
            rows = (
                spark.read.format("binaryFile")
                .load([str(path) for path in group])
                .select(engine_path_key(F.col("path")).alias("key"), F.sha2(F.col("content"), 256).alias("sha256"))
                .collect()
            )
        except Exception as exc:  # noqa: BLE001 - reading them in Python gives the file's own error, if any
            log.warning("the engine could not hash %d files (%s); hashing them in Python", len(group), exc)
            continue
        for row in rows:
            if row.key in by_key:
                hashes[by_key[row.key]] = row.sha256
    return hashes
