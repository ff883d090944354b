"""Files on local disk and on object storage through one interface: the storage options, listing,
reading, writing, conditional creation (the lease's primitive) and removal.

Local locations use the file system; object-storage locations (`conf.locations.ObjectLocation`) go
through obstore, the Rust object_store crate that delta-rs and the embedded engine use too, given the
same options (`storage_options`). Over 400 lines on purpose: one interface (`Storage`) with its two
backends side by side, so that each operation means the same on both.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat as stat_mode
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from conf.errors import ConfigError
from conf.locations import Location, ObjectLocation, is_object_url, parse_location
from conf.settings import Settings

# Read from the environment when storage.options does not set them: what AWS tools, delta-rs and the
# embedded engine read too, so one set of variables reaches all three.
STANDARD_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
)
# object_store's HTTP client settings: obstore takes them apart from the store's own configuration.
_CLIENT_KEYS = ("ALLOW_HTTP", "ALLOW_INVALID_CERTIFICATES", "CONNECT_TIMEOUT", "TIMEOUT", "PROXY_URL", "USER_AGENT")
_PROVIDER_PREFIXES = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_", "abfss": "AZURE_", "abfs": "AZURE_", "az": "AZURE_", "azure": "AZURE_"}
_READ_BUFFER = 8 << 20


def storage_options(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-storage options of a home: the standard environment, overlaid by `storage.options`.

    Args:
        settings: the lakehouse settings.
        environ: the environment to read (default os.environ).

    Returns:
        Upper-case object_store keys (`AWS_ENDPOINT_URL`, ...) -> values, as delta-rs takes them.
    """
    environ = os.environ if environ is None else environ
    options = {key: environ[key] for key in STANDARD_ENVIRONMENT if environ.get(key)}
    options.update({key.upper(): str(value) for key, value in settings.storage.options.items()})
    return options


@dataclass(frozen=True)
class StoredFile:
    """One file found by a listing.

    Attributes:
        location: where it is.
        size: its size in bytes.
        modified: when it was last written (epoch seconds).
        version: what a conditional write compares (the object's ETag; locally size and mtime).
    """

    location: Location
    size: int
    modified: float
    version: str


class Storage:
    """File operations on local paths and object-storage locations, with one set of storage options."""

    def __init__(self, options: Mapping[str, str]):
        self.options = dict(options)
        self._stores: dict[str, Any] = {}

    # --- reading -------------------------------------------------------------------------------

    def stat(self, location: Location) -> StoredFile | None:
        """The file at `location`, or None when there is none."""
        if isinstance(location, Path):
            try:
                st = location.stat()
            except (FileNotFoundError, NotADirectoryError):
                return None
            if stat_mode.S_ISDIR(st.st_mode):
                return None
            return StoredFile(location, st.st_size, st.st_mtime, f"{st.st_size}:{st.st_mtime_ns}")
        import obstore

        try:
            meta = obstore.head(self._store(location), location.key)
        except FileNotFoundError:
            return None
        return _stored(location, meta)

    def exists(self, location: Location) -> bool:
        """Whether a file, or a folder holding any file, is at `location`."""
        if isinstance(location, Path):
            return location.exists()
        return self.stat(location) is not None or self.has_files(location)

    def has_files(self, folder: Location, suffix: str = "") -> bool:
        """Whether any file (whose name ends with `suffix`) is below `folder`."""
        if isinstance(folder, Path):
            return folder.is_dir() and any(p.name.endswith(suffix) for p in folder.rglob("*") if p.is_file())
        # Lazily: the first match ends the listing (a table's log may hold thousands of objects).
        return any(f.location.name.endswith(suffix) for f in self._objects(folder))

    def list_files(self, folder: Location) -> list[StoredFile]:
        """Every file below `folder` (recursively), sorted by location; none when it does not exist."""
        if isinstance(folder, Path):
            if not folder.is_dir():
                return []
            found = [self.stat(p) for p in folder.rglob("*") if p.is_file()]
            return sorted((f for f in found if f is not None), key=lambda f: str(f.location))
        return sorted(self._objects(folder), key=lambda f: str(f.location))

    def _objects(self, folder: ObjectLocation) -> Iterator[StoredFile]:
        import obstore

        for chunk in obstore.list(self._store(folder), folder.key + "/" if folder.key else None):
            for meta in chunk:
                yield _stored(ObjectLocation(folder.scheme, folder.bucket, meta["path"]), meta)

    def read_bytes(self, location: Location) -> bytes:
        """The bytes of a file.

        Raises:
            FileNotFoundError: when there is none.
        """
        if isinstance(location, Path):
            return location.read_bytes()
        import obstore

        return bytes(obstore.get(self._store(location), location.key).bytes())

    def read_range(self, location: Location, start: int, length: int) -> bytes:
        """`length` bytes of a file from byte `start`, which must lie inside it (one ranged read of an object)."""
        if isinstance(location, Path):
            with open(location, "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        import obstore

        return bytes(obstore.get_range(self._store(location), location.key, start=start, length=length))

    def open_read(self, location: Location) -> BinaryIO:
        """Open a file for reading its bytes (seekable; objects are read in ranges as asked for)."""
        if isinstance(location, Path):
            return open(location, "rb")
        import obstore

        raw = _ObjectReader(obstore.open_reader(self._store(location), location.key, buffer_size=_READ_BUFFER))
        return io.BufferedReader(raw, buffer_size=_READ_BUFFER)

    def read_parquet(self, folder: Location) -> Any:
        """The Parquet files below `folder` as one pyarrow Table (small scratch results only)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if isinstance(folder, Path):
            return pq.read_table(folder)
        files = [f.location for f in self.list_files(folder) if f.location.name.endswith(".parquet")]
        return pa.concat_tables([pq.read_table(io.BytesIO(self.read_bytes(f))) for f in files]) if files else pa.table({})

    # --- writing -------------------------------------------------------------------------------

    def write_bytes(self, location: Location, data: bytes) -> None:
        """Replace the file at `location` with `data` at once: a reader sees the old file or the new one."""
        if isinstance(location, Path):
            location.parent.mkdir(parents=True, exist_ok=True)
            partial = location.with_name(f".{location.name}.{os.getpid()}.tmp")
            partial.write_bytes(data)
            os.replace(partial, location)
            return
        import obstore

        obstore.put(self._store(location), location.key, data)

    @contextlib.contextmanager
    def open_write(self, location: Location) -> Iterator[BinaryIO]:
        """Write a file as a stream (locally its folder is created; an object is uploaded in parts)."""
        if isinstance(location, Path):
            location.parent.mkdir(parents=True, exist_ok=True)
            with open(location, "wb") as handle:
                yield handle
            return
        import obstore

        writer = io.BufferedWriter(_ObjectWriter(obstore.open_writer(self._store(location), location.key)), _READ_BUFFER)
        try:
            yield writer
        finally:
            writer.close()

    def put_if_absent(self, location: Location, data: bytes) -> bool:
        """Create the file at `location` holding `data`, unless a file is there already.

        Atomic on both kinds of storage: of two writers, exactly one creates the file (locally a hard
        link of a complete file, never an empty file; on object storage a conditional PUT).

        Returns:
            True when this call created the file.
        """
        if isinstance(location, Path):
            location.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=location.parent, prefix=f".{location.name}.", delete=False) as handle:
                handle.write(data)
            try:
                os.link(handle.name, location)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(handle.name)
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self._store(location), location.key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def replace_if_unchanged(self, location: Location, data: bytes, version: str) -> bool:
        """Replace the file at `location` with `data` if it is still the version a `stat` gave.

        On object storage a conditional PUT (If-Match); locally the version is compared just before
        an atomic rename (a writer in between is not detected: local homes have one host).

        Returns:
            True when the file was replaced; False when it changed or is gone.
        """
        if isinstance(location, Path):
            current = self.stat(location)
            if current is None or current.version != version:
                return False
            self.write_bytes(location, data)
            return True
        import obstore
        from obstore.exceptions import PreconditionError

        try:
            obstore.put(self._store(location), location.key, data, mode={"e_tag": version})
        except (PreconditionError, FileNotFoundError):
            return False
        return True

    def delete(self, location: Location) -> None:
        """Remove the file at `location`, if there is one."""
        if isinstance(location, Path):
            location.unlink(missing_ok=True)
            return
        import obstore

        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self._store(location), location.key)

    def remove_tree(self, folder: Location) -> None:
        """Remove a folder and everything below it, if it exists (scratch space)."""
        if isinstance(folder, Path):
            shutil.rmtree(folder, ignore_errors=True)
            return
        import obstore

        keys = [f.location.key for f in self.list_files(folder)]
        if keys:
            obstore.delete(self._store(folder), keys)

    # --- object stores -------------------------------------------------------------------------

    def _store(self, location: ObjectLocation) -> Any:
        store = self._stores.get(location.root)
        if store is None:
            store = self._stores[location.root] = self._open_store(location)
        return store

    def _open_store(self, location: ObjectLocation) -> Any:
        from obstore.store import from_url

        prefix = _PROVIDER_PREFIXES[location.scheme]
        config, client = {}, {}
        for key, value in self.options.items():
            bare = key.removeprefix(prefix)
            if bare in _CLIENT_KEYS:
                client[bare.lower()] = value
            elif key.startswith(prefix):
                config[key] = value
        try:
            return from_url(location.root, config=config or None, client_options=client or None)
        except BaseException as exc:  # obstore reports a bad key as a Rust panic, which is no Exception
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise ConfigError(f"storage.options: cannot open {location.root} with keys {sorted(self.options)} ({exc})") from None


_BY_BUCKET: dict[str, Storage] = {}
_BY_BUCKET_LOCK = threading.Lock()


def register_storage(storage: Storage, locations: Iterable[Location]) -> None:
    """Make `storage` the one `storage_for` gives for the buckets of `locations` (a home's, when resolved)."""
    with _BY_BUCKET_LOCK:
        for location in locations:
            if isinstance(location, ObjectLocation):
                _BY_BUCKET[location.root] = storage


def storage_for(location: Location) -> Storage:
    """The storage that reads and writes `location`.

    Local paths need no options. An object location gets the storage of the home resolved for its
    bucket (`pipelines.runtime.home.home_of`), else one with the standard environment's options: the
    file readers of the landing are handed locations, not the home.
    """
    if isinstance(location, Path):
        return _LOCAL
    with _BY_BUCKET_LOCK:
        storage = _BY_BUCKET.get(location.root)
        if storage is None:
            storage = _BY_BUCKET[location.root] = Storage(
                {key: os.environ[key] for key in STANDARD_ENVIRONMENT if os.environ.get(key)}
            )
    return storage


def open_source(path: str) -> contextlib.AbstractContextManager[str | BinaryIO]:
    """What pyarrow reads a file from: a local path as it is, an object-storage URL opened as a stream.

    Use as `with open_source(path) as source: pq.read_table(source)`.
    """
    if not is_object_url(path):
        return contextlib.nullcontext(path)
    location = parse_location(path)
    return storage_for(location).open_read(location)


def file_exists(path: str) -> bool:
    """Whether a file is at `path` (a local path or an object-storage URL)."""
    location = parse_location(path)
    return storage_for(location).stat(location) is not None


def table_exists(location: str | Location) -> bool:
    """Whether a Delta table is at `location`, a local path or an object-storage location or URL.

    The one existence check of the project: a table exists once its log holds a file. Listing the log
    is one request on object storage, where `Path` calls do not apply and delta-rs's own check would
    read the whole log.
    """
    location = parse_location(location)
    return storage_for(location).has_files(location / "_delta_log")


def delta_storage_options(location: str | Location) -> dict[str, str] | None:
    """The storage options delta-rs needs for a table at `location` (None for a local one)."""
    if not is_object_url(location) and not isinstance(location, ObjectLocation):
        return None
    return storage_for(parse_location(location)).options or None


def _stored(location: ObjectLocation, meta: Mapping[str, Any]) -> StoredFile:
    return StoredFile(location, int(meta["size"]), meta["last_modified"].timestamp(), str(meta.get("e_tag") or ""))


class _ObjectReader(io.RawIOBase):
    """obstore's readable file as a raw binary stream (bytes, readinto), which gzip and io wrap."""

    def __init__(self, handle: Any):
        self._handle = handle

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = memoryview(self._handle.read(len(buffer))).cast("B")
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


class _ObjectWriter(io.RawIOBase):
    """obstore's writable file (a multipart upload, completed on close) as a raw binary stream."""

    def __init__(self, handle: Any):
        self._handle = handle

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._handle.write(chunk)
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


_LOCAL = Storage({})
