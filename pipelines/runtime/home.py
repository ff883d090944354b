"""The home of one job, resolved once: where every table and folder is, what every table is called,
and the storage that reads and writes there (a local folder or an object-storage prefix)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from conf.locations import Location
from conf.settings import Settings
from conf.tables import TABLES, table_location, table_name, table_spec
from pipelines.runtime.storage import Storage, StoredFile, register_storage, storage_options


@dataclass(frozen=True)
class Home:
    """A lakehouse home: its root, its tables' names and locations, its folders and its storage.

    Attributes:
        root: the home's folder or object-storage prefix.
        storage: reads and writes files there (and anywhere else with the same options).
        table_names: table key -> `[catalog.]schema.name`.
        table_locations: table key -> where the table's files are.
    """

    root: Location
    storage: Storage = field(repr=False)
    table_names: Mapping[str, str] = field(repr=False)
    table_locations: Mapping[str, Location] = field(repr=False)

    @classmethod
    def of(cls, settings: Settings, options: Mapping[str, str] | None = None) -> Home:
        """Resolve the home of `settings` (every table's name and location, the storage options).

        Args:
            settings: the lakehouse settings.
            options: the storage options; default `storage_options(settings)`.
        """
        storage = Storage(storage_options(settings) if options is None else options)
        return cls(
            root=settings.home,
            storage=storage,
            table_names={key: table_name(settings, key) for key in TABLES},
            table_locations={key: table_location(settings, key) for key in TABLES},
        )

    @property
    def storage_options(self) -> dict[str, str]:
        """The object-storage options delta-rs and the engine are given."""
        return dict(self.storage.options)

    def table_name(self, table_key: str) -> str:
        """The fully qualified name of a declared table, `[catalog.]schema.name`.

        Raises:
            ConfigError: when the key names no declared table.
        """
        table_spec(table_key)
        return self.table_names[table_key]

    def table_location(self, table_key: str) -> Location:
        """Where a declared table's files are.

        Raises:
            ConfigError: when the key names no declared table.
        """
        table_spec(table_key)
        return self.table_locations[table_key]

    def join(self, *parts: str) -> Location:
        """A location under the home."""
        location = self.root
        for part in parts:
            location = location / part
        return location

    def scratch(self, *parts: str) -> Location:
        """A scratch folder under `<home>/_scratch` (files that live for one batch or step)."""
        return self.join("_scratch", *parts)

    def lock(self, name: str) -> Location:
        """The lease file `<home>/_locks/<name>`."""
        return self.join("_locks", name)

    def exists(self, location: Location) -> bool:
        """Whether a file, or a folder holding files, is at `location`."""
        return self.storage.exists(location)

    def list(self, folder: Location) -> list[StoredFile]:
        """Every file below `folder`, sorted."""
        return self.storage.list_files(folder)

    def read(self, location: Location) -> bytes:
        """The bytes of a file (FileNotFoundError when there is none)."""
        return self.storage.read_bytes(location)

    def write(self, location: Location, data: bytes) -> None:
        """Replace a file at once."""
        self.storage.write_bytes(location, data)

    def put_if_absent(self, location: Location, data: bytes) -> bool:
        """Create a file unless one is there (True when this call created it)."""
        return self.storage.put_if_absent(location, data)


# The process umask of each storage.file_access: what the files and folders a command creates allow beyond
# their owner (owner: 0600/0700; group: 0640/0750).
FILE_ACCESS_UMASKS = {"owner": 0o077, "group": 0o027}


def restrict_new_files(settings: Settings) -> None:
    """Set the process umask storage.file_access names, before the command writes anything.

    The umask, not a chmod after each write: the engine and delta-rs run in this process and create their
    files themselves (tables, logs, MLflow's store), so every file and folder created from now on, by
    them and by the worker processes started later, gets the mode at once, with no moment of wider
    access. Files that exist already keep their mode.
    """
    os.umask(FILE_ACCESS_UMASKS[settings.storage.file_access])


_HOMES: dict[tuple, Home] = {}
_HOMES_LOCK = threading.Lock()


def home_of(settings: Settings) -> Home:
    """The resolved home of `settings`, made once per home, table layout and storage options.

    A job resolves its home where it starts; what it calls with the same settings gets the same
    handle (and the object-store clients it holds) instead of resolving everything again.
    """
    options = storage_options(settings)
    key = (
        str(settings.home),
        settings.catalog.name,
        tuple(vars(settings.catalog.schemas).items()),
        tuple(sorted(settings.table_locations.items())),
        tuple(sorted(options.items())),
    )
    with _HOMES_LOCK:
        home = _HOMES.get(key)
        if home is None:
            home = _HOMES[key] = Home.of(settings, options)
            register_storage(home.storage, [home.root, *home.table_locations.values(), *settings.landing_paths])
    return home
