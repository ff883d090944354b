"""The value checks of loaded settings: ranges, choices and rules across keys, each problem naming its key.

Type problems are found while the settings are built (`conf.settings`); these checks skip the keys that
failed there, so a bad value is reported once.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Collection
from pathlib import Path

from conf.settings_sections import (
    BACKFILL_ENGINES,
    BACKFILL_TLS_MODES,
    ENGINE_KINDS,
    KAFKA_FORMATS,
    KAFKA_SASL_MECHANISMS,
    KAFKA_SECRET_PROPERTIES,
    KAFKA_SECURITY_PROPERTIES,
    KAFKA_SECURITY_PROTOCOLS,
    KAFKA_START_AT,
    KAFKA_TOPIC_KINDS,
    LAYERS,
    LOG_FORMATS,
    LOG_LEVELS,
    OWNER_CATEGORIES,
    SEARCH_MAX_SIZE,
    SERVE_ENGINES,
    AnomalySettings,
    BackfillSettings,
    BiSettings,
    KafkaSecurity,
    KafkaSettings,
    RegistryAuth,
    ServeSettings,
    Settings,
    SubscriptionSettings,
    WatchSettings,
)
from conf.identity_checks import check_access_log, check_identity
from conf.locations import is_object_url
from conf.tables import TABLES
from conf.values import least_problem, port_problem

# storage.file_access: who besides their owner may read the files a command writes (pipelines/runtime/home.py).
FILE_ACCESS = ("owner", "group")


def value_problems(settings: Settings, bad: Collection[str] = ()) -> list[str]:
    """Return the problems with values that have the right type but are out of range.

    Keys in `bad` (or below one) failed their type check and are skipped: their problem is already reported.
    """

    def ok(*keys: str) -> bool:
        return not any(k == b or k.startswith(b + ".") or k.startswith(b + "[") for k in keys for b in bad)

    problems = []
    engine = settings.engine
    for key, value, allowed in (("format", settings.log.format, LOG_FORMATS), ("level", settings.log.level, LOG_LEVELS)):
        if ok(f"log.{key}") and value not in allowed:
            problems.append(f"log.{key}: {value!r} is not one of {', '.join(allowed)}")
    if ok("engine.kind") and engine.kind not in ENGINE_KINDS:
        problems.append(f"engine.kind: {engine.kind!r} is not one of {', '.join(ENGINE_KINDS)}")
    if ok("engine.kind", "engine.connect_url") and engine.kind == "connect" and not engine.connect_url:
        problems.append(
            "engine.connect_url: None; the connect profile needs a Spark Connect URL "
            "(set it, or LAKEHOUSE_CONNECT_URL / SPARK_REMOTE)"
        )
    if ok("engine.connect_url") and engine.connect_url and not engine.connect_url.startswith("sc://"):
        problems.append(f"engine.connect_url: {engine.connect_url!r} does not start with sc://")
    if ok("engine.batch_rows") and engine.batch_rows is not None:
        problems.extend(filter(None, [least_problem("engine.batch_rows", engine.batch_rows, 64)]))
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
    if ok("api.port") and (problem := port_problem("api.port", settings.api.port)):
        problems.append(problem)
    problems.extend(_check_serve(settings.serve, ok))
    for name, days in vars(settings.retention.days).items():
        if ok(f"retention.days.{name}") and days < 0:
            problems.append(f"retention.days.{name}: {days!r} must be 0 (keep for good) or more")
    if ok("ingest.default_actor") and not _is_urn(settings.ingest.default_actor):
        problems.append(f"ingest.default_actor: {settings.ingest.default_actor!r} is not an urn:li:<type>:<id>")
    if ok("ingest.landing_dirs") and not settings.ingest.landing_dirs:
        problems.append("ingest.landing_dirs: [] must name at least one folder")
    if ok("events.owner_category") and settings.events.owner_category not in OWNER_CATEGORIES:
        problems.append(
            f"events.owner_category: {settings.events.owner_category!r} is not one of {', '.join(OWNER_CATEGORIES)}"
        )
    if ok("storage.file_access") and settings.storage.file_access not in FILE_ACCESS:
        problems.append(f"storage.file_access: {settings.storage.file_access!r} is not one of {', '.join(FILE_ACCESS)}")
    problems.extend(_check_anomalies(settings.anomalies, ok))
    problems.extend(_check_kafka(settings.ingest.kafka, ok))
    problems.extend(_check_backfill(settings.ingest.backfill, ok))
    if ok("audit_chain.signing") and settings.audit_chain.signing not in ("none", "hmac", "ed25519"):
        problems.append(f"audit_chain.signing: {settings.audit_chain.signing!r} is not one of none, hmac, ed25519")
    if ok("audit_chain.max_examples") and (
        problem := least_problem("audit_chain.max_examples", settings.audit_chain.max_examples, 1)
    ):
        problems.append(problem)
    checkpoint = settings.audit_chain.checkpoint
    if ok("audit_chain.checkpoint") and checkpoint is not None and not (
        is_object_url(checkpoint) or Path(checkpoint).expanduser().is_absolute()
    ):
        problems.append(
            f"audit_chain.checkpoint: {checkpoint!r} must be an absolute path or an object-storage URL (outside the home)"
        )
    problems.extend(_check_watch(settings.watch, ok))
    if ok("refine.state_log_max_rows") and settings.refine.state_log_max_rows < 0:
        problems.append(f"refine.state_log_max_rows: {settings.refine.state_log_max_rows!r} must be 0 or more")
    problems.extend(_check_subscriptions(settings.subscriptions, ok))
    problems.extend(check_identity(settings.identity, ok))
    problems.extend(check_access_log(settings.access_log, ok))
    problems.extend(_check_bi(settings.bi, ok))
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


def _check_backfill(backfill: BackfillSettings, ok) -> list[str]:
    problems = []
    if ok("ingest.backfill.engine") and backfill.engine not in BACKFILL_ENGINES:
        problems.append(f"ingest.backfill.engine: {backfill.engine!r} is not one of {', '.join(BACKFILL_ENGINES)}")
    if ok("ingest.backfill.tls_mode") and backfill.tls_mode not in BACKFILL_TLS_MODES:
        problems.append(
            f"ingest.backfill.tls_mode: {backfill.tls_mode!r} is not one of {', '.join(BACKFILL_TLS_MODES)}"
        )
    if ok("ingest.backfill.port") and (problem := port_problem("ingest.backfill.port", backfill.port)):
        problems.append(problem)
    if ok("ingest.backfill.handoff_margin_seconds") and backfill.handoff_margin_seconds < 0:
        problems.append(f"ingest.backfill.handoff_margin_seconds: {backfill.handoff_margin_seconds!r} must be 0 or more")
    if ok("ingest.backfill.window_rows") and (
        problem := least_problem("ingest.backfill.window_rows", backfill.window_rows, 1)
    ):
        problems.append(problem)
    if ok("ingest.backfill.table") and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", backfill.table):
        problems.append(f"ingest.backfill.table: {backfill.table!r} is not a table name (letters, digits, _)")
    return problems


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
        if ok(f"ingest.kafka.{name}") and (problem := least_problem(f"ingest.kafka.{name}", getattr(kafka, name), 1)):
            problems.append(problem)
    if ok("ingest.kafka.timeout_seconds") and kafka.timeout_seconds <= 0:
        problems.append(f"ingest.kafka.timeout_seconds: {kafka.timeout_seconds!r} must be greater than 0")
    if ok("ingest.kafka.start_at") and kafka.start_at not in KAFKA_START_AT:
        problems.append(f"ingest.kafka.start_at: {kafka.start_at!r} is not one of {', '.join(KAFKA_START_AT)}")
    if ok("ingest.kafka.client"):
        for name in sorted(set(kafka.client) & set(KAFKA_SECRET_PROPERTIES)):
            problems.append(
                f"ingest.kafka.client.{name}: a secret is not a setting; give its file or variable in ingest.kafka.security"
            )
        for name in sorted(set(kafka.client) & set(KAFKA_SECURITY_PROPERTIES)):
            problems.append(f"ingest.kafka.client.{name}: set ingest.kafka.security.{KAFKA_SECURITY_PROPERTIES[name]} instead")
    if ok("ingest.kafka.security"):
        problems.extend(_check_kafka_security(kafka.security))
    if ok("ingest.kafka.registry_auth"):
        problems.extend(_check_registry_auth(kafka.registry_auth))
    return problems


def _check_kafka_security(security: KafkaSecurity) -> list[str]:
    key = "ingest.kafka.security"
    if security.protocol not in KAFKA_SECURITY_PROTOCOLS:
        return [f"{key}.protocol: {security.protocol!r} is not one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"]
    problems = []
    mechanism = security.sasl_mechanism
    if security.uses_sasl and mechanism not in KAFKA_SASL_MECHANISMS:
        problems.append(f"{key}.sasl_mechanism: {mechanism!r} is not one of {', '.join(KAFKA_SASL_MECHANISMS)}")
    if not security.uses_sasl and mechanism is not None:
        problems.append(f"{key}.sasl_mechanism: {mechanism!r} needs protocol sasl_plaintext or sasl_ssl, not {security.protocol!r}")
    if security.uses_sasl and mechanism in KAFKA_SASL_MECHANISMS and not (security.username or "").strip():
        who = "the OAuth client id" if mechanism == "OAUTHBEARER" else "the SASL user"
        problems.append(f"{key}.username: {security.username!r}; {mechanism} needs {who}")
    if mechanism == "OAUTHBEARER" and not (security.oauth_token_endpoint or "").startswith(("http://", "https://")):
        problems.append(f"{key}.oauth_token_endpoint: {security.oauth_token_endpoint!r}; OAUTHBEARER needs the token endpoint's http(s) URL")
    if bool(security.tls_cert_file) != bool(security.tls_key_file):
        problems.append(f"{key}.tls_cert_file / tls_key_file: a client certificate needs its key, and a key its certificate")
    for name in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
        if getattr(security, name) and not security.uses_tls:
            problems.append(f"{key}.{name}: {getattr(security, name)!r} needs protocol ssl or sasl_ssl, not {security.protocol!r}")
    return problems


def _check_registry_auth(auth: RegistryAuth) -> list[str]:
    key = "ingest.kafka.registry_auth"
    problems = []
    token = auth.token_file or auth.token_env
    if auth.username and token:
        problems.append(f"{key}: username {auth.username!r} and a bearer token are both set; give one of the two")
    if auth.token_file and auth.token_env:
        problems.append(f"{key}.token_file / token_env: give one of the two")
    if auth.password_file and not auth.username:
        problems.append(f"{key}.password_file: {auth.password_file!r} needs a username")
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
        if ok(f"subscriptions.{name}") and (problem := least_problem(f"subscriptions.{name}", value, 1)):
            problems.append(problem)
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
    if ok("subscriptions.allowed_networks"):
        for i, network in enumerate(subscriptions.allowed_networks):
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                problems.append(f"subscriptions.allowed_networks[{i}]: {network!r} is not a network (CIDR, e.g. 10.1.0.0/16)")
    if ok("subscriptions.key_file") and not subscriptions.key_file.strip():
        problems.append(f"subscriptions.key_file: {subscriptions.key_file!r} must name a file")
    link = subscriptions.link_base_url
    if ok("subscriptions.link_base_url") and link is not None and not link.startswith(("http://", "https://")):
        problems.append(f"subscriptions.link_base_url: {link!r} is not an http or https URL")
    return problems


def _check_watch(watch: WatchSettings, ok) -> list[str]:
    problems = []
    if ok("watch.metrics_port") and watch.metrics_port is not None and (problem := port_problem("watch.metrics_port", watch.metrics_port)):
        problems.append(problem)
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
        if ok(f"anomalies.{name}") and (problem := least_problem(f"anomalies.{name}", value, 1)):
            problems.append(problem)
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
        ("max_json_depth", serve.max_json_depth, 2),
        ("rate_limit_per_minute", serve.rate_limit_per_minute, 0),
        ("rate_limit_burst", serve.rate_limit_burst, 1),
        ("workers", serve.workers, 0),
    ):
        if ok(f"serve.{name}") and (problem := least_problem(f"serve.{name}", value, least)):
            problems.append(problem)
    if ok("serve.max_size") and serve.max_size > SEARCH_MAX_SIZE:
        problems.append(f"serve.max_size: {serve.max_size!r} is above the search contract's limit {SEARCH_MAX_SIZE}")
    if ok("serve.queue_timeout_seconds") and serve.queue_timeout_seconds <= 0:
        problems.append(f"serve.queue_timeout_seconds: {serve.queue_timeout_seconds!r} must be above 0")
    if ok("serve.version_check_seconds") and (
        problem := least_problem("serve.version_check_seconds", serve.version_check_seconds, 0)
    ):
        problems.append(problem)
    if ok("serve.tls_cert_file", "serve.tls_key_file") and (serve.tls_cert_file is None) != (serve.tls_key_file is None):
        problems.append(
            f"serve.tls_cert_file: {serve.tls_cert_file!r} and serve.tls_key_file: {serve.tls_key_file!r} "
            "must be set together (or both left null)"
        )
    return problems


def _check_bi(bi: BiSettings, ok: Callable[..., bool]) -> list[str]:
    """Return the problems with the bi section's values."""
    problems = []
    if ok("bi.port") and (problem := port_problem("bi.port", bi.port)):
        problems.append(problem)
    if ok("bi.sync_interval_seconds") and bi.sync_interval_seconds < 0:
        problems.append(f"bi.sync_interval_seconds: {bi.sync_interval_seconds!r} must be 0 (no polling) or more")
    if ok("bi.lock_timeout_ms") and (problem := least_problem("bi.lock_timeout_ms", bi.lock_timeout_ms, 1)):
        problems.append(problem)
    if ok("bi.idle_transaction_timeout_seconds") and bi.idle_transaction_timeout_seconds < 0:
        problems.append(f"bi.idle_transaction_timeout_seconds: {bi.idle_transaction_timeout_seconds!r} must be 0 (never) or more")
    if ok("bi.run_as") and not bi.run_as.strip():
        problems.append(f"bi.run_as: {bi.run_as!r} must name a system user")
    if ok("bi.dsn") and bi.dsn is not None and not bi.dsn.strip():
        problems.append(f"bi.dsn: {bi.dsn!r} must be a libpq connection string or URI (or null)")
    return problems
