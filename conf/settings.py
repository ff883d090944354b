"""Load the YAML settings (base + profile overlay + optional user file) into frozen dataclasses."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conf.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent
PROFILES_DIR = CONF_DIR / "profiles"
ENGINE_KINDS = ("local", "connect", "classic")
OWNER_CATEGORIES = ("OWNER", "OWNERSHIP")
LAYERS = ("bronze", "silver", "gold", "ops")


@dataclass(frozen=True)
class EngineSettings:
    """Which engine runs the DataFrame code and how to reach it."""

    kind: str = "local"
    connect_url: str | None = None
    master: str | None = None
    stop_on_exit: bool = True
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    memory_limit_mb: int | None = None


@dataclass(frozen=True)
class SchemaNames:
    """Schema (database) name of each layer."""

    bronze: str = "bronze"
    silver: str = "silver"
    gold: str = "gold"
    ops: str = "ops"


@dataclass(frozen=True)
class CatalogSettings:
    """Where tables are registered."""

    name: str | None = None
    managed_tables: bool = False
    schemas: SchemaNames = field(default_factory=SchemaNames)


@dataclass(frozen=True)
class RetentionSettings:
    """How long old table files and quarantined records are kept."""

    vacuum_hours: int = 168
    quarantine_days: int = 90


@dataclass(frozen=True)
class IngestSettings:
    """Landing inputs into bronze."""

    landing_dirs: tuple[str, ...] = ("landing",)
    default_actor: str = "urn:li:corpuser:datahub"
    max_record_bytes: int = 1048576


@dataclass(frozen=True)
class EventSettings:
    """Entity Change Event naming."""

    owner_category: str = "OWNER"


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP audit search API."""

    host: str = "127.0.0.1"
    port: int = 8080
    tokens_file: str = "auth/tokens.json"


@dataclass(frozen=True)
class MlflowSettings:
    """MLflow run tracking."""

    enabled: bool = True
    tracking_uri: str | None = None
    experiment: str = "lakehouse"


@dataclass(frozen=True)
class LockSettings:
    """The run lock that keeps two pipeline runs apart."""

    stale_after_seconds: int = 3600


@dataclass(frozen=True)
class Settings:
    """Every setting of one lakehouse, resolved for one profile."""

    profile: str
    home: Path
    engine: EngineSettings = field(default_factory=EngineSettings)
    catalog: CatalogSettings = field(default_factory=CatalogSettings)
    table_locations: Mapping[str, str] = field(default_factory=dict)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    events: EventSettings = field(default_factory=EventSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    mlflow: MlflowSettings = field(default_factory=MlflowSettings)
    locks: LockSettings = field(default_factory=LockSettings)

    def resolve_path(self, path: str) -> Path:
        """Return `path` as an absolute path, taking a relative one as relative to home."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self.home / candidate

    @property
    def landing_paths(self) -> tuple[Path, ...]:
        """The landing folders as absolute paths."""
        return tuple(self.resolve_path(p) for p in self.ingest.landing_dirs)

    @property
    def tokens_path(self) -> Path:
        """The file holding the API's salted token hashes."""
        return self.resolve_path(self.api.tokens_file)

    @property
    def mlflow_tracking_uri(self) -> str:
        """The MLflow tracking URI: the configured one or a local store under home."""
        if self.mlflow.tracking_uri:
            return self.mlflow.tracking_uri
        return f"sqlite:///{self.home / 'mlruns' / 'mlflow.db'}"


def available_profiles() -> tuple[str, ...]:
    """Return the names of the profile overlays shipped in conf/profiles."""
    return tuple(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))


def load_settings(
    profile: str | None = None,
    home: str | os.PathLike[str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> Settings:
    """Build the settings of one profile from base.yaml, the profile overlay and an optional user file.

    Args:
        profile: profile name (a file in conf/profiles); default LAKEHOUSE_PROFILE, else "local".
        home: storage root; default the YAML `home`, else LAKEHOUSE_HOME, else ./.lakehouse.
        config_file: extra YAML overlaid last; default LAKEHOUSE_CONFIG when set.
        env: environment variables to read (default os.environ).
        overrides: `dotted.key=value` settings applied last (values read as YAML), e.g.
            `catalog.name=main` from `--set` on the command line or a job definition.

    Returns:
        The validated, frozen settings.

    Raises:
        ConfigError: listing every problem found, each naming the key and the bad value.
    """
    env = os.environ if env is None else env
    profile = profile or env.get("LAKEHOUSE_PROFILE") or "local"
    problems: list[str] = []
    if profile not in available_profiles():
        raise ConfigError(f"profile: unknown profile {profile!r} (available: {', '.join(available_profiles())})")
    merged = _read_yaml(CONF_DIR / "base.yaml", problems)
    merged = _deep_merge(merged, _read_yaml(PROFILES_DIR / f"{profile}.yaml", problems))
    config_file = config_file or env.get("LAKEHOUSE_CONFIG")
    if config_file:
        merged = _deep_merge(merged, _read_yaml(Path(config_file), problems))
    for override in overrides:
        merged = _deep_merge(merged, _parse_override(override, problems))
    if problems:
        raise ConfigError(problems)

    engine = dict(merged.get("engine") or {})
    if not engine.get("connect_url"):
        engine["connect_url"] = env.get("LAKEHOUSE_CONNECT_URL") or env.get("SPARK_REMOTE")
    merged["engine"] = engine
    home_value = home or merged.get("home") or env.get("LAKEHOUSE_HOME") or ".lakehouse"
    merged["home"] = str(home_value)
    merged["profile"] = profile

    values = _build(Settings, merged, "", problems)
    if not problems:
        settings = Settings(**values)
        problems.extend(_check_values(settings))
    if problems:
        raise ConfigError(problems)
    return dataclasses.replace(settings, home=Path(settings.home).expanduser().resolve())


def _read_yaml(path: Path, problems: list[str]) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError as exc:
        problems.append(f"{path}: not valid YAML ({exc})")
        return {}
    if not path.exists():
        problems.append(f"{path}: config file does not exist")
        return {}
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        problems.append(f"{path}: the top level must be a mapping, got {type(loaded).__name__}")
        return {}
    return loaded


def _parse_override(override: str, problems: list[str]) -> dict[str, Any]:
    key, sep, text = override.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        problems.append(f"--set: {override!r} is not of the form dotted.key=value")
        return {}
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    nested: Any = value
    for part in reversed(key.strip().split(".")):
        nested = {part: nested}
    return nested


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _build(cls: type, raw: Any, prefix: str, problems: list[str]) -> dict[str, Any]:
    """Turn a raw mapping into constructor arguments of dataclass `cls`, collecting every problem."""
    if not isinstance(raw, dict):
        problems.append(f"{prefix.rstrip('.') or '<root>'}: expected a mapping, got {raw!r}")
        return {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in sorted(set(raw) - names):
        problems.append(f"{prefix}{key}: unknown setting (value {raw[key]!r})")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        values[f.name] = _coerce(hints[f.name], raw[f.name], f"{prefix}{f.name}", problems)
    return values


def _coerce(hint: Any, value: Any, key: str, problems: list[str]) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, key, problems)
    if dataclasses.is_dataclass(hint):
        return hint(**_build(hint, value, f"{key}.", problems))
    if hint is Path:
        return Path(value)
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r}")
            return ()
        return tuple(_coerce(args[0], v, f"{key}[{i}]", problems) for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {value!r}")
            return {}
        return types.MappingProxyType({str(k): _coerce(args[1], v, f"{key}.{k}", problems) for k, v in value.items()})
    if hint is bool:
        if not isinstance(value, bool):
            problems.append(f"{key}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key}: expected a whole number, got {value!r}")
        return value
    if hint is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            problems.append(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported setting type {hint!r} for {key}")


def _check_values(settings: Settings) -> list[str]:
    """Return the problems with values that have the right type but are out of range."""
    problems = []
    engine = settings.engine
    if engine.kind not in ENGINE_KINDS:
        problems.append(f"engine.kind: {engine.kind!r} is not one of {', '.join(ENGINE_KINDS)}")
    if engine.kind == "connect" and not engine.connect_url:
        problems.append(
            "engine.connect_url: None; the connect profile needs a Spark Connect URL "
            "(set it, or LAKEHOUSE_CONNECT_URL / SPARK_REMOTE)"
        )
    if engine.connect_url and not engine.connect_url.startswith("sc://"):
        problems.append(f"engine.connect_url: {engine.connect_url!r} does not start with sc://")
    for layer in LAYERS:
        name = getattr(settings.catalog.schemas, layer)
        if not name or not name.replace("_", "").isalnum():
            problems.append(f"catalog.schemas.{layer}: {name!r} is not a plain identifier")
    if settings.catalog.name is not None and not settings.catalog.name.replace("_", "").isalnum():
        problems.append(f"catalog.name: {settings.catalog.name!r} is not a plain identifier")
    from conf.tables import TABLES  # imported here: conf.tables imports this module

    for key in settings.table_locations:
        if key not in TABLES:
            problems.append(f"table_locations.{key}: unknown table (known: {', '.join(TABLES)})")
    if engine.memory_limit_mb is not None and engine.memory_limit_mb < 256:
        problems.append(f"engine.memory_limit_mb: {engine.memory_limit_mb!r} is below 256 (or null for no limit)")
    positive = {
        "retention.vacuum_hours": settings.retention.vacuum_hours,
        "retention.quarantine_days": settings.retention.quarantine_days,
        "ingest.max_record_bytes": settings.ingest.max_record_bytes,
        "locks.stale_after_seconds": settings.locks.stale_after_seconds,
    }
    for key, value in positive.items():
        if isinstance(value, int) and value <= 0:
            problems.append(f"{key}: {value!r} must be greater than 0")
    if not 0 < settings.api.port < 65536:
        problems.append(f"api.port: {settings.api.port!r} is not a TCP port (1..65535)")
    if not _is_urn(settings.ingest.default_actor):
        problems.append(f"ingest.default_actor: {settings.ingest.default_actor!r} is not an urn:li:<type>:<id>")
    if not settings.ingest.landing_dirs:
        problems.append("ingest.landing_dirs: [] must name at least one folder")
    if settings.events.owner_category not in OWNER_CATEGORIES:
        problems.append(
            f"events.owner_category: {settings.events.owner_category!r} is not one of {', '.join(OWNER_CATEGORIES)}"
        )
    return problems


def _is_urn(value: str) -> bool:
    parts = value.split(":", 3)
    return len(parts) == 4 and parts[0] == "urn" and parts[1] == "li" and bool(parts[2]) and bool(parts[3])
