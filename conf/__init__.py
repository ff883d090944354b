"""Settings, table registry and SQL for the lakehouse."""

from conf.errors import (
    AuthError,
    ConcurrencyError,
    ConfigError,
    InputError,
    LakehouseError,
    RequestError,
)
from conf.settings import Settings, load_settings
from conf.tables import TABLES, TableSpec, table_location, table_name, table_spec

__all__ = [
    "AuthError",
    "ConcurrencyError",
    "ConfigError",
    "InputError",
    "LakehouseError",
    "RequestError",
    "Settings",
    "TABLES",
    "TableSpec",
    "load_settings",
    "table_location",
    "table_name",
    "table_spec",
]
