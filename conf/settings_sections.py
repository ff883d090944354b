"""The sections of the settings as frozen dataclasses, with their defaults and the values some of them allow.

`conf.settings.load_settings` builds them from the YAML files; `conf.settings_checks` checks their values.
Over 400 lines on purpose: declarations only, one dataclass per section of `base.yaml`, read side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conf.locations import Location, parse_location

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
    native_lag_ignore_nulls: bool = True
    batch_rows: int | None = None


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
class RetentionDays:
    """Days each table keeps a batch after its newest record (0: kept for good); `lakehouse retention apply`."""

    audit_events: int = 0
    change_events: int = 0
    usage_events: int = 0
    quarantine: int = 0


@dataclass(frozen=True)
class RetentionSettings:
    """How long old table files and old batches are kept (by default every batch is kept for good)."""

    vacuum_hours: int = 168
    days: RetentionDays = field(default_factory=RetentionDays)


KAFKA_FORMATS = ("json", "avro")
# Where a partition bronze holds nothing of starts: its earliest message, or the group's committed offset.
KAFKA_START_AT = ("earliest", "group_offsets")
KAFKA_SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# librdkafka properties that hold secrets: they come from files or the environment, never from settings.
KAFKA_SECRET_PROPERTIES = ("sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password", "ssl.key.pem",
                           "ssl.keystore.password", "sasl.oauthbearer.config")  # fmt: skip
# librdkafka properties that ingest.kafka.security sets, with the key that sets each.
KAFKA_SECURITY_PROPERTIES = {
    "security.protocol": "protocol", "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "username", "sasl.oauthbearer.client.id": "username", "sasl.oauthbearer.method": "sasl_mechanism",
    "sasl.oauthbearer.token.endpoint.url": "oauth_token_endpoint", "sasl.oauthbearer.scope": "oauth_scope",
    "ssl.ca.location": "tls_ca_file", "ssl.certificate.location": "tls_cert_file", "ssl.key.location": "tls_key_file",
}  # fmt: skip
# A topic's messages are MCL records or usage events; `none` leaves a (default) topic out.
KAFKA_TOPIC_KINDS = ("mcl", "usage", "none")
# DataHub's topics: aspect changes (versioned and timeseries) and usage events.
KAFKA_DEFAULT_TOPICS = {
    "MetadataChangeLog_Versioned_v1": "mcl",
    "MetadataChangeLog_Timeseries_v1": "mcl",
    "DataHubUsageEvent_v1": "usage",
}


@dataclass(frozen=True)
class KafkaSecurity:
    """How the consumer authenticates to the brokers and encrypts the connection (secrets: files or variables)."""

    protocol: str = "plaintext"
    sasl_mechanism: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str = "LAKEHOUSE_KAFKA_PASSWORD"
    oauth_token_endpoint: str | None = None
    oauth_scope: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    @property
    def uses_sasl(self) -> bool:
        """Whether the protocol authenticates with SASL."""
        return self.protocol.startswith("sasl_")

    @property
    def uses_tls(self) -> bool:
        """Whether the protocol encrypts with TLS."""
        return self.protocol in ("ssl", "sasl_ssl")


@dataclass(frozen=True)
class RegistryAuth:
    """How the Schema Registry client authenticates: basic auth or a bearer token, and the CA that signs its certificate."""

    username: str | None = None
    password_file: str | None = None
    password_env: str = "LAKEHOUSE_SCHEMA_REGISTRY_PASSWORD"
    token_file: str | None = None
    token_env: str | None = None
    logical_cluster: str | None = None
    tls_ca_file: str | None = None


@dataclass(frozen=True)
class KafkaSettings:
    """DataHub's Kafka topics as a landing source (off while bootstrap_servers is empty)."""

    bootstrap_servers: str = ""
    topics: Mapping[str, str] = field(default_factory=lambda: dict(KAFKA_DEFAULT_TOPICS))
    group_id: str = "lakehouse-bronze"
    format: str = "json"
    schema_registry_url: str | None = None
    client: Mapping[str, str] = field(default_factory=dict)
    start_at: str = "earliest"
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    registry_auth: RegistryAuth = field(default_factory=RegistryAuth)
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


BACKFILL_ENGINES = ("postgres", "mariadb")
BACKFILL_TLS_MODES = ("disable", "prefer", "require", "verify-ca", "verify-full")


@dataclass(frozen=True)
class BackfillSettings:
    """DataHub's own database (`metadata_aspect_v2`) as a one-time source of its whole history."""

    engine: str = "postgres"
    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "datahub"
    user: str = "datahub"
    password_file: str | None = None
    password_env: str = "LAKEHOUSE_BACKFILL_PASSWORD"
    table: str = "metadata_aspect_v2"
    tls_mode: str = "prefer"
    tls_ca_file: str | None = None
    window_rows: int = 100000
    source_name: str | None = None
    handoff_topics: tuple[str, ...] = ("MetadataChangeLog_Versioned_v1",)
    handoff_margin_seconds: float = 300.0

    @property
    def provenance(self) -> str:
        """The name the backfilled rows carry as their source (`source_name`, else engine://host:port/database)."""
        return self.source_name or f"{self.engine}://{self.host}:{self.port}/{self.database}"


@dataclass(frozen=True)
class IngestSettings:
    """Landing inputs into bronze."""

    landing_dirs: tuple[str, ...] = ("landing",)
    default_actor: str = "urn:li:corpuser:datahub"
    max_record_bytes: int = 1048576
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    backfill: BackfillSettings = field(default_factory=BackfillSettings)


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
    metrics: bool = True
    max_json_depth: int = 32
    rate_limit_per_minute: int = 0
    rate_limit_burst: int = 20
    scroll_key_file: str = "auth/scroll.key"
    api_docs: bool = False
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    workers: int = 0
    index_dir: str | None = None
    row_files: bool = True


@dataclass(frozen=True)
class MlflowSettings:
    """MLflow run tracking."""

    enabled: bool = True
    tracking_uri: str | None = None
    experiment: str = "lakehouse"


@dataclass(frozen=True)
class StorageSettings:
    """How object-storage homes and tables are reached (docs/object-storage.md)."""

    options: Mapping[str, str] = field(default_factory=dict)
    local_dir: str | None = None
    file_access: str = "owner"


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
    allowed_networks: tuple[str, ...] = ()
    key_file: str = "auth/subscriptions.key"
    link_base_url: str | None = None
    error_excerpt_chars: int = 500


@dataclass(frozen=True)
class AuditChainSettings:
    """The tamper-evident hash chain over published audit tables (docs/audit-trail.md)."""

    signing: str = "none"
    key_file: str = "auth/audit-chain.key"
    max_examples: int = 10
    checkpoint: str | None = None


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


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class LogSettings:
    """How log lines are written: as text or one JSON object per line, and from which level."""

    format: str = "text"
    level: str = "info"


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
    metrics_port: int | None = None


@dataclass(frozen=True)
class IdentitySettings:
    """Who may call the API: token lifetimes, bearer JWTs of an identity provider, scopes of roles (docs/api.md)."""

    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwks_url: str | None = None
    jwks_file: str | None = None
    jwt_algorithms: tuple[str, ...] = ("RS256", "ES256")
    jwks_refresh_seconds: float = 300.0
    jwks_min_refresh_seconds: float = 30.0
    jwt_leeway_seconds: int = 30
    actor_claim: str = "sub"
    roles_claim: str = "roles"
    role_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scope_claims: Mapping[str, str] = field(default_factory=dict)
    role_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AccessLogSettings:
    """The audit of the auditors: every read of audit data recorded in ops.access_log (docs/audit-trail.md)."""

    enabled: bool = True
    flush_seconds: float = 5.0
    max_buffered: int = 10000
    retention_days: int = 400


@dataclass(frozen=True)
class BiSettings:
    """The PostgreSQL replica of gold that BI tools connect to (docs/bi.md)."""

    dsn: str | None = None
    host: str = "127.0.0.1"
    port: int = 5433
    data_dir: str = "bi/postgres"
    run_as: str = "lakehouse-pg"
    sync_on_publish: bool = False
    sync_interval_seconds: float = 2.0
    lock_timeout_ms: int = 1000
    idle_transaction_timeout_seconds: int = 600


@dataclass(frozen=True)
class PrivacySettings:
    """Personal identifiers stored as keyed pseudonyms, identities encrypted per person (docs/privacy.md)."""

    pseudonymise: bool = False
    key_file: str = "auth/privacy-keys.json"


@dataclass(frozen=True)
class Settings:
    """Every setting of one lakehouse, resolved for one profile."""

    profile: str
    home: Location
    storage: StorageSettings = field(default_factory=StorageSettings)
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
    log: LogSettings = field(default_factory=LogSettings)
    identity: IdentitySettings = field(default_factory=IdentitySettings)
    access_log: AccessLogSettings = field(default_factory=AccessLogSettings)
    bi: BiSettings = field(default_factory=BiSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)

    def resolve_path(self, path: str) -> Location:
        """Return `path` as an absolute location, taking a relative one as relative to home."""
        return parse_location(path, base=self.home)

    @property
    def local_home(self) -> Path:
        """The local folder of what never goes to object storage (key files, the default MLflow store).

        The home itself when it is local; for an object-storage home, `storage.local_dir`, else
        `~/.lakehouse/<scheme>/<bucket>/<prefix>`.
        """
        if isinstance(self.home, Path):
            return self.home
        if self.storage.local_dir:
            return Path(self.storage.local_dir).expanduser().resolve()
        return Path.home() / ".lakehouse" / self.home.scheme / self.home.bucket / self.home.key

    def secret_path(self, path: str) -> Path:
        """Return the local path of a secret file (tokens, keys): relative ones are under `local_home`."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self.local_home / candidate

    @property
    def landing_paths(self) -> tuple[Location, ...]:
        """The landing folders as absolute locations."""
        return tuple(self.resolve_path(p) for p in self.ingest.landing_dirs)

    @property
    def tokens_path(self) -> Path:
        """The file holding the API's salted token hashes (a local file)."""
        return self.secret_path(self.api.tokens_file)

    @property
    def mlflow_local_store(self) -> Path | None:
        """The local MLflow store's database file under home; None when a tracking URI is configured."""
        return None if self.mlflow.tracking_uri else self.local_home / "mlruns" / "mlflow.db"

    @property
    def mlflow_tracking_uri(self) -> str:
        """The MLflow tracking URI: the configured one or a local store under home."""
        local_store = self.mlflow_local_store
        return f"sqlite:///{local_store}" if local_store else self.mlflow.tracking_uri
