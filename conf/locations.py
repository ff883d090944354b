"""Storage locations: a local path, or an object-storage URL (`s3://`, `gs://`, `abfss://`, `az://`).

An object-storage location is joined like a path (`home / "_scratch" / "land"`) and given to the
engine as its URL; it never passes through `Path.resolve()`, which would turn `s3://bucket/x` into
`<cwd>/s3:/bucket/x`. Reading and writing what is there is `pipelines.runtime.storage`'s business.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from conf.errors import ConfigError

OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "abfss", "abfs", "az", "azure")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")


@dataclass(frozen=True)
class ObjectLocation:
    """An object-storage URL, joined and split like a path.

    Attributes:
        scheme: the URL scheme (`s3`, `gs`, `abfss`, ...).
        bucket: the bucket or container (with `@account...` for Azure URLs that carry it).
        key: the object key or prefix inside the bucket, without leading or trailing `/`.
    """

    scheme: str
    bucket: str
    key: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    def __truediv__(self, part: str | os.PathLike[str]) -> ObjectLocation:
        extra = str(part).strip("/")
        if not extra:
            return self
        return ObjectLocation(self.scheme, self.bucket, f"{self.key}/{extra}" if self.key else extra)

    def joinpath(self, *parts: str) -> ObjectLocation:
        """This location with `parts` appended, as `/` does."""
        location = self
        for part in parts:
            location = location / part
        return location

    @property
    def name(self) -> str:
        """The last part of the key (empty at the bucket's root)."""
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectLocation:
        """The location one level up (the bucket's root stays itself)."""
        return ObjectLocation(self.scheme, self.bucket, self.key.rsplit("/", 1)[0] if "/" in self.key else "")

    @property
    def suffix(self) -> str:
        """The name's extension with its dot (`.gz`), as `Path.suffix`."""
        return Path(self.name).suffix

    def with_name(self, name: str) -> ObjectLocation:
        """This location with its last part replaced by `name`."""
        return self.parent / name

    def is_absolute(self) -> bool:
        """Always true: a URL names its bucket."""
        return True

    @property
    def root(self) -> str:
        """The bucket's URL, `<scheme>://<bucket>` (what an object store is opened on)."""
        return f"{self.scheme}://{self.bucket}"


Location = Path | ObjectLocation


def is_object_url(value: str | os.PathLike[str]) -> bool:
    """Whether `value` is a URL of an object store this project reads and writes."""
    match = _URL.match(str(value))
    return bool(match) and match.group(1).lower() in OBJECT_STORE_SCHEMES


def parse_location(value: str | os.PathLike[str] | ObjectLocation, *, base: Location | None = None) -> Location:
    """Turn a setting or argument into a location: an object URL as it is, a path made absolute.

    Args:
        value: `s3://bucket/prefix` (or another object store's URL), or a local path.
        base: what a relative path is relative to (a local folder or an object location); default the
            working directory.

    Raises:
        ConfigError: for a URL whose scheme is not an object store's, or one that names no bucket.
    """
    if isinstance(value, ObjectLocation):
        return value
    text = str(value)
    match = _URL.match(text)
    if match:
        scheme, rest = match.group(1).lower(), match.group(2)
        if scheme == "file":
            return Path(rest).expanduser().resolve()
        if scheme not in OBJECT_STORE_SCHEMES:
            raise ConfigError(
                f"{text!r}: unknown storage scheme {scheme!r} (object stores: {', '.join(OBJECT_STORE_SCHEMES)})"
            )
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise ConfigError(f"{text!r}: names no bucket")
        return ObjectLocation(scheme, bucket, key.strip("/"))
    path = Path(text).expanduser()
    if path.is_absolute():
        return path
    if isinstance(base, ObjectLocation):
        return base / path.as_posix()
    return base / path if base is not None else path.resolve()
