"""Load the YAML settings (base + profile overlay + optional user file) into frozen dataclasses."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conf.errors import ConfigError
from conf.tables import TABLES

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
    parquet_filter_pushdown: bool = True


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
    """How long old table files are kept (quarantined records are kept for good: never lost)."""

    vacuum_hours: int = 168


KAFKA_FORMATS = ("json", "avro")
# A topic's messages are MCL records or usage events; `none` leaves a (default) topic out.
KAFKA_TOPIC_KINDS = ("mcl", "usage", "none")
# DataHub's topics: aspect changes (versioned and timeseries) and usage events.
KAFKA_DEFAULT_TOPICS = {
    "MetadataChangeLog_Versioned_v1": "mcl",
    "MetadataChangeLog_Timeseries_v1": "mcl",
    "DataHubUsageEvent_v1": "usage",
}


@dataclass(frozen=True)
class KafkaSettings:
    """DataHub's Kafka topics as a landing source (off while bootstrap_servers is empty)."""

    bootstrap_servers: str = ""
    topics: Mapping[str, str] = field(default_factory=lambda: dict(KAFKA_DEFAULT_TOPICS))
    group_id: str = "lakehouse-bronze"
    format: str = "json"
    schema_registry_url: str | None = None
    client: Mapping[str, str] = field(default_factory=dict)
    max_records: int = 100000
    max_bytes: int = 268435456
    timeout_seconds: float = 30.0

    @property
    def enabled(self) -> bool:
        """Whether a broker is configured."""
        return bool(self.bootstrap_servers.strip())

    @property
    def consumed_topics(self) -> dict[str, str]:
        """The topics consumed, each with the kind of its messages (those set to `none` left out)."""
        return {topic: kind for topic, kind in sorted(self.topics.items()) if kind != "none"}


@dataclass(frozen=True)
class IngestSettings:
    """Landing inputs into bronze."""

    landing_dirs: tuple[str, ...] = ("landing",)
    default_actor: str = "urn:li:corpuser:datahub"
    max_record_bytes: int = 1048576
    kafka: KafkaSettings = field(default_factory=KafkaSettings)


@dataclass(frozen=True)
class EventSettings:
    """Entity Change Event naming."""

    owner_category: str = "OWNER"


@dataclass(frozen=True)
class RefineSettings:
    """The refine stage: where a batch's state rows go (docs/change-events.md#state)."""

    state_log_max_rows: int = 10000


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP audit search API."""

    host: str = "127.0.0.1"
    port: int = 8080
    tokens_file: str = "auth/tokens.json"


SERVE_ENGINES = ("inprocess", "spark")
# The Audit Events Search contract's largest page size.
SEARCH_MAX_SIZE = 10_000


@dataclass(frozen=True)
class ServeSettings:
    """How the HTTP API answers searches: the engine, its concurrency bounds and request limits."""

    engine: str = "inprocess"
    query_slots: int = 4
    queue_depth: int = 32
    queue_timeout_seconds: float = 5.0
    version_check_seconds: float = 0.25
    max_body_bytes: int = 1048576
    max_size: int = 10000
    row_cache_mb: int = 256


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
class SubscriptionSettings:
    """Webhook delivery of change events to subscriptions."""

    max_events_per_post: int = 500
    max_concurrent: int = 8
    max_concurrent_per_host: int = 4
    request_timeout_ms: int = 10000
    retry_initial_ms: int = 500
    retry_max_ms: int = 60000
    retry_budget_ms: int = 30000
    pause_after_seconds: int = 3600
    allowed_hosts: tuple[str, ...] = ()
    key_file: str = "auth/subscriptions.key"
    link_base_url: str | None = None
    error_excerpt_chars: int = 500


@dataclass(frozen=True)
class AuditChainSettings:
    """The tamper-evident hash chain over published audit tables (docs/audit-trail.md)."""

    signing: str = "none"
    key_file: str = "auth/audit-chain.key"
    max_examples: int = 10


@dataclass(frozen=True)
class AnomalySettings:
    """The unusual-activity model: its features, training, registry name and scoring."""

    model_name: str = "lakehouse-actor-anomalies"
    alias: str = "champion"
    granularities: tuple[str, ...] = ("hour", "day")
    baseline_days: int = 14
    business_hours: tuple[int, ...] = (7, 19)
    detector: str = "robust"
    threshold_spread: float = 3.5
    min_history: int = 5
    training_days: int = 56
    score_days: int = 2
    score_interval_minutes: int = 60
    seed: int = 0


@dataclass(frozen=True)
class WatchSettings:
    """Watch mode (`lakehouse run --watch`): how landing folders are watched and micro-batches triggered."""

    max_wait_seconds: float = 2.0
    max_files: int = 100
    max_bytes: int = 268435456
    polling: bool = False
    poll_interval_seconds: float = 1.0
    retry_attempts: int = 5
    retry_backoff_seconds: float = 1.0
    heartbeat_seconds: float = 5.0
    compact_every_batches: int = 50
    compact_files_below_mb: int = 32
    openmetadata_every_seconds: float = 10.0


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
    refine: RefineSettings = field(default_factory=RefineSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    mlflow: MlflowSettings = field(default_factory=MlflowSettings)
    locks: LockSettings = field(default_factory=LockSettings)
    anomalies: AnomalySettings = field(default_factory=AnomalySettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    subscriptions: SubscriptionSettings = field(default_factory=SubscriptionSettings)
    audit_chain: AuditChainSettings = field(default_factory=AuditChainSettings)

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
    if profile not in available_profiles():
        # On its own: the profile decides which file is read, so nothing else can be checked without it.
        raise ConfigError(f"profile: unknown profile {profile!r} (available: {', '.join(available_profiles())})")
    # One pass: every file, every --set, every type and every value check add to the same list.
    problems: list[str] = []
    merged = _read_yaml(CONF_DIR / "base.yaml", problems)
    merged = _deep_merge(merged, _read_yaml(PROFILES_DIR / f"{profile}.yaml", problems))
    config_file = config_file or env.get("LAKEHOUSE_CONFIG")
    if config_file:
        merged = _deep_merge(merged, _read_yaml(Path(config_file), problems))
    for override in overrides:
        merged = _deep_merge(merged, _parse_override(override, problems))

    engine = merged.get("engine")
    if isinstance(engine, dict) and engine.get("kind") == "connect" and not engine.get("connect_url"):
        # The environment fallback is a Spark Connect URL: it means nothing to the other engines.
        merged["engine"] = {**engine, "connect_url": env.get("LAKEHOUSE_CONNECT_URL") or env.get("SPARK_REMOTE")}
    home_value = home or merged.get("home") or env.get("LAKEHOUSE_HOME") or ".lakehouse"
    if not isinstance(home_value, (str, os.PathLike)):
        problems.append(f"home: expected a path, got {home_value!r}")
        home_value = ".lakehouse"
    merged["home"] = str(home_value)
    merged["profile"] = profile

    bad: set[str] = set()
    settings = Settings(**_build(Settings, merged, "", problems, bad))
    problems.extend(_check_values(settings, bad))
    if problems:
        raise ConfigError(problems)
    return dataclasses.replace(settings, home=Path(settings.home).expanduser().resolve())


def _read_yaml(path: Path, problems: list[str]) -> dict[str, Any]:
    if not path.exists():
        problems.append(f"{path}: config file does not exist")
        return {}
    if path.is_dir():
        problems.append(f"{path}: is a folder, not a config file")
        return {}
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        problems.append(f"{path}: config file cannot be read ({exc.strerror or exc})")
        return {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: not valid YAML ({exc})")
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
    for part in reversed(_override_path(key.strip().split("."))):
        nested = {part: nested}
    return nested


def _override_path(parts: list[str]) -> list[str]:
    """Split a dotted --set key into nesting levels; below a mapping-typed setting the rest is one map key.

    `engine.spark_conf.spark.sql.shuffle.partitions` -> engine / spark_conf / spark.sql.shuffle.partitions.
    """
    cls: Any = Settings
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            break
        hints = typing.get_type_hints(cls)
        if part not in hints:
            break
        hint = _without_none(hints[part])
        if typing.get_origin(hint) is Mapping:
            rest = parts[i + 1 :]
            return parts[: i + 1] + ([".".join(rest)] if rest else [])
        cls = hint
    return parts


def _without_none(hint: Any) -> Any:
    """`X | None` -> X; any other hint unchanged."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# Settings that earlier versions accepted, and why they are gone: a file that still sets one is told so.
REMOVED_SETTINGS = {
    "retention.quarantine_days": "nothing read it: quarantined records are kept for good",
}


class _Invalid:
    """Marks a value that failed its type check; its key is in `bad` and its value checks are skipped."""


_INVALID = _Invalid()


def _build(cls: type, raw: Any, prefix: str, problems: list[str], bad: set[str]) -> dict[str, Any]:
    """Turn a raw mapping into constructor arguments of dataclass `cls`, collecting every problem.

    A field whose value has the wrong type is left out (the dataclass default stands in) and its key
    is added to `bad`, so the value checks skip it instead of reporting a second, misleading problem.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in sorted(set(raw) - names, key=str):
        removed = REMOVED_SETTINGS.get(f"{prefix}{key}")
        if removed:
            problems.append(f"{prefix}{key}: this setting was removed ({removed}); delete it")
        else:
            problems.append(f"{prefix}{key}: unknown setting (value {raw[key]!r})")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value = _coerce(hints[f.name], raw[f.name], f"{prefix}{f.name}", problems, bad)
        if value is not _INVALID:
            values[f.name] = value
    return values


def _coerce(hint: Any, value: Any, key: str, problems: list[str], bad: set[str]) -> Any:
    def invalid(expected: str) -> _Invalid:
        problems.append(f"{key}: expected {expected}, got {value!r}")
        bad.add(key)
        return _INVALID

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        return _coerce(_without_none(hint), value, key, problems, bad)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            # Also null: a section set to null must not silently fall back to the defaults.
            return invalid("a mapping (a settings section)")
        return hint(**_build(hint, value, f"{key}.", problems, bad))
    if hint is Path:
        return Path(value) if isinstance(value, (str, os.PathLike)) else invalid("a path")
    if origin is tuple:
        if not isinstance(value, list):
            return invalid("a list")
        items = tuple(_coerce(args[0], v, f"{key}[{i}]", problems, bad) for i, v in enumerate(value))
        if any(item is _INVALID for item in items):
            bad.add(key)
            return _INVALID
        return items
    if origin is Mapping:
        if not isinstance(value, dict):
            return invalid("a mapping")
        coerced = {str(k): _coerce(args[1], v, f"{key}.{k}", problems, bad) for k, v in value.items()}
        return types.MappingProxyType({k: v for k, v in coerced.items() if v is not _INVALID})
    if hint is bool:
        return value if isinstance(value, bool) else invalid("true or false")
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else invalid("a whole number")
    if hint is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else invalid("a number")
    if hint is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value if isinstance(value, str) else invalid("a string")
    raise TypeError(f"unsupported setting type {hint!r} for {key}")


def _check_values(settings: Settings, bad: Collection[str] = ()) -> list[str]:
    """Return the problems with values that have the right type but are out of range.

    Keys in `bad` (or below one) failed their type check and are skipped: their problem is already reported.
    """

    def ok(*keys: str) -> bool:
        return not any(k == b or k.startswith(b + ".") or k.startswith(b + "[") for k in keys for b in bad)

    problems = []
    engine = settings.engine
    if ok("engine.kind") and engine.kind not in ENGINE_KINDS:
        problems.append(f"engine.kind: {engine.kind!r} is not one of {', '.join(ENGINE_KINDS)}")
    if ok("engine.kind", "engine.connect_url") and engine.kind == "connect" and not engine.connect_url:
        problems.append(
            "engine.connect_url: None; the connect profile needs a Spark Connect URL "
            "(set it, or LAKEHOUSE_CONNECT_URL / SPARK_REMOTE)"
        )
    if ok("engine.connect_url") and engine.connect_url and not engine.connect_url.startswith("sc://"):
        problems.append(f"engine.connect_url: {engine.connect_url!r} does not start with sc://")
    if ok("engine.memory_limit_mb") and engine.memory_limit_mb is not None and engine.memory_limit_mb < 256:
        problems.append(f"engine.memory_limit_mb: {engine.memory_limit_mb!r} is below 256 (or null for no limit)")
    for layer in LAYERS:
        name = getattr(settings.catalog.schemas, layer)
        if ok(f"catalog.schemas.{layer}") and (not name or not name.replace("_", "").isalnum()):
            problems.append(f"catalog.schemas.{layer}: {name!r} is not a plain identifier")
    name = settings.catalog.name
    if ok("catalog.name") and name is not None and not name.replace("_", "").isalnum():
        problems.append(f"catalog.name: {name!r} is not a plain identifier")
    if ok("catalog.managed_tables", "engine.kind") and settings.catalog.managed_tables and engine.kind == "local":
        problems.append(
            "catalog.managed_tables: True cannot be used with engine.kind local: the embedded engine keeps "
            "no managed tables across sessions (its catalog lives in memory) and has no warehouse dir set; "
            "use false (tables stored under home or table_locations)"
        )
    for key in settings.table_locations:
        if key not in TABLES:
            problems.append(f"table_locations.{key}: unknown table (known: {', '.join(TABLES)})")
    positive = {
        "retention.vacuum_hours": settings.retention.vacuum_hours,
        "ingest.max_record_bytes": settings.ingest.max_record_bytes,
        "locks.stale_after_seconds": settings.locks.stale_after_seconds,
    }
    for key, value in positive.items():
        if ok(key) and value <= 0:
            problems.append(f"{key}: {value!r} must be greater than 0")
    if ok("api.port") and not 0 < settings.api.port < 65536:
        problems.append(f"api.port: {settings.api.port!r} is not a TCP port (1..65535)")
    problems.extend(_check_serve(settings.serve, ok))
    if ok("ingest.default_actor") and not _is_urn(settings.ingest.default_actor):
        problems.append(f"ingest.default_actor: {settings.ingest.default_actor!r} is not an urn:li:<type>:<id>")
    if ok("ingest.landing_dirs") and not settings.ingest.landing_dirs:
        problems.append("ingest.landing_dirs: [] must name at least one folder")
    if ok("events.owner_category") and settings.events.owner_category not in OWNER_CATEGORIES:
        problems.append(
            f"events.owner_category: {settings.events.owner_category!r} is not one of {', '.join(OWNER_CATEGORIES)}"
        )
    problems.extend(_check_anomalies(settings.anomalies, ok))
    problems.extend(_check_kafka(settings.ingest.kafka, ok))
    if ok("audit_chain.signing") and settings.audit_chain.signing not in ("none", "hmac", "ed25519"):
        problems.append(f"audit_chain.signing: {settings.audit_chain.signing!r} is not one of none, hmac, ed25519")
    if ok("audit_chain.max_examples") and settings.audit_chain.max_examples < 1:
        problems.append(f"audit_chain.max_examples: {settings.audit_chain.max_examples!r} must be at least 1")
    problems.extend(_check_watch(settings.watch, ok))
    if ok("refine.state_log_max_rows") and settings.refine.state_log_max_rows < 0:
        problems.append(f"refine.state_log_max_rows: {settings.refine.state_log_max_rows!r} must be 0 or more")
    problems.extend(_check_subscriptions(settings.subscriptions, ok))
    mlflow = settings.mlflow
    if ok("mlflow.experiment") and not mlflow.experiment.strip():
        problems.append(f"mlflow.experiment: {mlflow.experiment!r} must name an experiment")
    elif (
        ok("mlflow.experiment", "mlflow.tracking_uri")
        and _is_databricks_uri(mlflow.tracking_uri)
        and not mlflow.experiment.startswith("/")
    ):
        problems.append(
            f"mlflow.experiment: {mlflow.experiment!r} is not an absolute workspace path; with mlflow.tracking_uri "
            f"{mlflow.tracking_uri!r} Databricks needs one, e.g. /Shared/lakehouse or /Users/<you>/lakehouse"
        )
    return problems


def _is_databricks_uri(uri: str | None) -> bool:
    return uri is not None and (uri == "databricks" or uri.startswith("databricks://"))


def _is_urn(value: str) -> bool:
    parts = value.split(":", 3)
    return len(parts) == 4 and parts[0] == "urn" and parts[1] == "li" and bool(parts[2]) and bool(parts[3])


def _check_kafka(kafka: KafkaSettings, ok) -> list[str]:
    problems = []
    if ok("ingest.kafka.format") and kafka.format not in KAFKA_FORMATS:
        problems.append(f"ingest.kafka.format: {kafka.format!r} is not one of {', '.join(KAFKA_FORMATS)}")
    if ok("ingest.kafka.topics"):
        if not kafka.consumed_topics:
            problems.append(f"ingest.kafka.topics: {dict(kafka.topics)!r} must give at least one topic a kind")
        for topic, kind in kafka.topics.items():
            if kind not in KAFKA_TOPIC_KINDS:
                problems.append(f"ingest.kafka.topics.{topic}: {kind!r} is not one of {', '.join(KAFKA_TOPIC_KINDS)}")
    if (
        ok("ingest.kafka.format", "ingest.kafka.schema_registry_url")
        and kafka.format == "avro"
        and kafka.enabled
        and not (kafka.schema_registry_url or "").startswith(("http://", "https://"))
    ):
        problems.append(
            f"ingest.kafka.schema_registry_url: {kafka.schema_registry_url!r}; format avro needs the Schema "
            "Registry's http(s) URL"
        )
    if ok("ingest.kafka.group_id") and not kafka.group_id.strip():
        problems.append(f"ingest.kafka.group_id: {kafka.group_id!r} must name a consumer group")
    for name in ("max_records", "max_bytes"):
        if ok(f"ingest.kafka.{name}") and getattr(kafka, name) < 1:
            problems.append(f"ingest.kafka.{name}: {getattr(kafka, name)!r} must be at least 1")
    if ok("ingest.kafka.timeout_seconds") and kafka.timeout_seconds <= 0:
        problems.append(f"ingest.kafka.timeout_seconds: {kafka.timeout_seconds!r} must be greater than 0")
    return problems


def _check_subscriptions(subscriptions: SubscriptionSettings, ok) -> list[str]:
    problems = []
    at_least_one = {
        "max_events_per_post": subscriptions.max_events_per_post,
        "max_concurrent": subscriptions.max_concurrent,
        "max_concurrent_per_host": subscriptions.max_concurrent_per_host,
        "request_timeout_ms": subscriptions.request_timeout_ms,
        "retry_initial_ms": subscriptions.retry_initial_ms,
        "pause_after_seconds": subscriptions.pause_after_seconds,
        "error_excerpt_chars": subscriptions.error_excerpt_chars,
    }
    for name, value in at_least_one.items():
        if ok(f"subscriptions.{name}") and value < 1:
            problems.append(f"subscriptions.{name}: {value!r} must be at least 1")
    if ok("subscriptions.retry_max_ms", "subscriptions.retry_initial_ms") and (
        subscriptions.retry_max_ms < subscriptions.retry_initial_ms
    ):
        problems.append(
            f"subscriptions.retry_max_ms: {subscriptions.retry_max_ms!r} is below subscriptions.retry_initial_ms "
            f"({subscriptions.retry_initial_ms!r})"
        )
    if ok("subscriptions.retry_budget_ms") and subscriptions.retry_budget_ms < 0:
        problems.append(f"subscriptions.retry_budget_ms: {subscriptions.retry_budget_ms!r} must be 0 or more")
    if ok("subscriptions.allowed_hosts"):
        for i, host in enumerate(subscriptions.allowed_hosts):
            bare = host[2:] if host.startswith("*.") else host
            if not bare or "/" in bare or ":" in bare or " " in bare:
                problems.append(f"subscriptions.allowed_hosts[{i}]: {host!r} is not a host name or *.domain pattern")
    if ok("subscriptions.key_file") and not subscriptions.key_file.strip():
        problems.append(f"subscriptions.key_file: {subscriptions.key_file!r} must name a file")
    link = subscriptions.link_base_url
    if ok("subscriptions.link_base_url") and link is not None and not link.startswith(("http://", "https://")):
        problems.append(f"subscriptions.link_base_url: {link!r} is not an http or https URL")
    return problems


def _check_watch(watch: WatchSettings, ok) -> list[str]:
    problems = []
    for name in ("max_wait_seconds", "max_files", "max_bytes", "poll_interval_seconds", "heartbeat_seconds"):
        value = getattr(watch, name)
        if ok(f"watch.{name}") and value <= 0:
            problems.append(f"watch.{name}: {value!r} must be greater than 0")
    for name in ("retry_attempts", "retry_backoff_seconds", "compact_every_batches", "compact_files_below_mb",
                 "openmetadata_every_seconds"):
        value = getattr(watch, name)
        if ok(f"watch.{name}") and value < 0:
            problems.append(f"watch.{name}: {value!r} must be 0 or more")
    return problems


def _check_anomalies(anomalies: AnomalySettings, ok) -> list[str]:
    problems = []
    for name in ("baseline_days", "min_history", "training_days", "score_days", "score_interval_minutes"):
        value = getattr(anomalies, name)
        if ok(f"anomalies.{name}") and value < 1:
            problems.append(f"anomalies.{name}: {value!r} must be at least 1")
    if ok("anomalies.threshold_spread") and anomalies.threshold_spread <= 0:
        problems.append(f"anomalies.threshold_spread: {anomalies.threshold_spread!r} must be positive")
    if ok("anomalies.detector") and anomalies.detector not in ("robust", "forest", "combined"):
        problems.append(f"anomalies.detector: {anomalies.detector!r} is not one of robust, forest, combined")
    if ok("anomalies.granularities"):
        unknown = [g for g in anomalies.granularities if g not in ("hour", "day")]
        if unknown or not anomalies.granularities:
            problems.append(f"anomalies.granularities: {list(anomalies.granularities)!r} must be hour and/or day")
    hours = anomalies.business_hours
    if ok("anomalies.business_hours") and not (len(hours) == 2 and 0 <= hours[0] < hours[1] <= 24):
        problems.append(f"anomalies.business_hours: {list(hours)!r} must be [start, end) with 0 <= start < end <= 24")
    for name in ("model_name", "alias"):
        value = getattr(anomalies, name)
        if ok(f"anomalies.{name}") and not value.strip():
            problems.append(f"anomalies.{name}: {value!r} must not be empty")
    return problems


def _check_serve(serve: ServeSettings, ok: Callable[..., bool]) -> list[str]:
    """Return the problems with the serve section's values."""
    problems = []
    if ok("serve.engine") and serve.engine not in SERVE_ENGINES:
        problems.append(f"serve.engine: {serve.engine!r} is not one of {', '.join(SERVE_ENGINES)}")
    for name, value, least in (
        ("query_slots", serve.query_slots, 1),
        ("queue_depth", serve.queue_depth, 0),
        ("max_body_bytes", serve.max_body_bytes, 1024),
        ("max_size", serve.max_size, 1),
        ("row_cache_mb", serve.row_cache_mb, 0),
    ):
        if ok(f"serve.{name}") and value < least:
            problems.append(f"serve.{name}: {value!r} must be at least {least}")
    if ok("serve.max_size") and serve.max_size > SEARCH_MAX_SIZE:
        problems.append(f"serve.max_size: {serve.max_size!r} is above the search contract's limit {SEARCH_MAX_SIZE}")
    if ok("serve.queue_timeout_seconds") and serve.queue_timeout_seconds <= 0:
        problems.append(f"serve.queue_timeout_seconds: {serve.queue_timeout_seconds!r} must be above 0")
    if ok("serve.version_check_seconds") and serve.version_check_seconds < 0:
        problems.append(f"serve.version_check_seconds: {serve.version_check_seconds!r} must be at least 0")
    return problems
