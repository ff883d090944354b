"""The table registry: every bronze, silver, gold and ops table, declared once.

Over 400 lines on purpose: the declarations are one list, so every table's columns are found in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from conf.errors import ConfigError
from conf.locations import Location


class TableSettings(Protocol):
    """What naming a table reads of the settings (conf.settings.Settings has it; this module does not import it)."""

    catalog: Any
    home: Location
    table_locations: Mapping[str, str]

    def resolve_path(self, path: str) -> Location: ...


@dataclass(frozen=True)
class TableSpec:
    """One Delta table: where it belongs, its columns and how it is partitioned.

    Args:
        layer: bronze, silver, gold or ops (pipeline bookkeeping).
        name: table name inside the layer's schema.
        columns: the column list in Spark DDL (`name TYPE, ...`), in the table's column order.
        partitioned_by: partition columns (a subset of the columns).
        description: what one row is.
        properties: Delta table properties set when the table is created (and on an existing table
            that lacks them).
    """

    layer: str
    name: str
    columns: str
    partitioned_by: tuple[str, ...] = ()
    description: str = ""
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """The registry key, `<layer>.<name>`."""
        return f"{self.layer}.{self.name}"

    @property
    def column_names(self) -> tuple[str, ...]:
        """The column names in table order."""
        return tuple(_split_top_level(self.columns, lambda part: part.split()[0]))

    @property
    def column_types(self) -> tuple[tuple[str, str], ...]:
        """(name, Spark SQL type) of each column, in table order."""
        return tuple(_split_top_level(self.columns, lambda part: tuple(part.split(None, 1))))


def _split_top_level(ddl: str, pick) -> list[str]:
    """Split a DDL column list on the commas that are not inside <...> or (...)."""
    parts, depth, current = [], 0, []
    for char in ddl:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return [pick(part) for part in parts]


_PROVENANCE = "source_file STRING, line_number BIGINT, batch_id STRING, landed_at TIMESTAMP, land_date DATE"

_SPECS = (
    TableSpec(
        "bronze",
        "landed_files",
        "batch_id STRING, source_file STRING, content_hash STRING, kind STRING, records_read BIGINT, "
        "records_landed BIGINT, records_quarantined BIGINT, duplicates_skipped BIGINT, landed_at TIMESTAMP, "
        "land_date DATE",
        ("land_date",),
        "One input file landed in one batch, with its reconciliation counts "
        "(records_read = records_landed + records_quarantined + duplicates_skipped); content_hash is the "
        "SHA-256 of the file's bytes; kind mcl, mcp, file-sink, usage or empty. Written last: a batch with "
        "ledger rows is committed.",
    ),
    TableSpec(
        "bronze",
        "kafka_offsets",
        "batch_id STRING, topic STRING, kafka_partition INT, first_offset BIGINT, last_offset BIGINT, "
        "records BIGINT, landed_at TIMESTAMP",
        (),
        "The Kafka offsets one landing batch consumed, per topic partition (first..last inclusive; its "
        "records carry source_file kafka://<topic>/<partition> and the offset as line_number). Counts "
        "only once its batch is committed: consumption resumes after the last committed offset.",
    ),
    TableSpec(
        "bronze",
        "aspect_snapshots",
        "entity_urn STRING, entity_type STRING, aspect_name STRING, change_type STRING, aspect_json STRING, "
        "version BIGINT, created_time BIGINT, created_actor STRING, system_metadata STRING, run_id STRING, "
        "source_kind STRING, record_hash STRING, " + _PROVENANCE,
        ("land_date",),
        "One DataHub aspect snapshot (MCL, MCP or file-sink record, action requests included) as landed: "
        "aspect_json is aspect.value as given (null on DELETE), version systemMetadata.version as a number, "
        "created_time/actor from created (MCP, file-sink: lastObserved and ingest.default_actor); "
        "record_hash (SHA-256 of source_kind, urn, type, aspect, change type, aspect JSON, version, created) "
        "is unique across the table; line_number is the file line the record starts on.",
    ),
    TableSpec(
        "bronze",
        "usage_events",
        "event_type STRING, actor_urn STRING, timestamp BIGINT, entity_urn STRING, entity_type STRING, "
        "aspect_name STRING, event_source STRING, source_ip STRING, user_agent STRING, trace_id STRING, "
        "login_source STRING, login_denial_reason STRING, usage_source STRING, raw_document STRING, "
        "record_hash STRING, " + _PROVENANCE,
        ("land_date",),
        "One DataHub usage / audit event document as landed: its fields typed as given (loginSource "
        "unnormalized), the document as raw_document; record_hash (SHA-256 of the typed fields) is unique.",
    ),
    TableSpec(
        "bronze",
        "quarantine",
        "raw_text STRING, source_file STRING, line_number BIGINT, kind STRING, reason STRING, field STRING, "
        "batch_id STRING, quarantined_at TIMESTAMP, land_date DATE",
        ("land_date",),
        "One input record that could not be landed, with the reason naming the field and value "
        "(field: the field the reason names, `record` for the record as a whole).",
    ),
    TableSpec(
        "silver",
        "aspect_state",
        "entity_urn STRING, entity_type STRING, aspect_name STRING, aspect_json STRING, version BIGINT, "
        "order_key STRING, change_type STRING, created_time BIGINT, created_actor STRING, deleted BOOLEAN, "
        "entity_deleted BOOLEAN, record_hash STRING, batch_id STRING, updated_at TIMESTAMP, "
        "source_file STRING, line_number BIGINT, prev_version BIGINT, "
        "prev_order_key STRING, prev_change_type STRING, prev_created_time BIGINT, prev_created_actor STRING, "
        "prev_record_hash STRING, prev_batch_id STRING",
        (),
        "The latest version of every (entity_urn, aspect_name); deleted: that version is a DELETE; "
        "entity_deleted: the entity's key aspect is hard-deleted; prev_*: the row before batch_id wrote it "
        "(its JSON: the bronze snapshot prev_batch_id, prev_record_hash).",
        # Each batch updates keys scattered over the whole table: with deletion vectors its MERGE marks
        # the replaced rows instead of rewriting every file that holds one.
        (("delta.enableDeletionVectors", "true"),),
    ),
    TableSpec(
        "silver",
        "aspect_state_log",
        "entity_urn STRING, entity_type STRING, aspect_name STRING, aspect_json STRING, version BIGINT, "
        "order_key STRING, change_type STRING, created_time BIGINT, created_actor STRING, deleted BOOLEAN, "
        "entity_deleted BOOLEAN, record_hash STRING, batch_id STRING, updated_at TIMESTAMP, "
        "source_file STRING, line_number BIGINT, prev_version BIGINT, "
        "prev_order_key STRING, prev_change_type STRING, prev_created_time BIGINT, prev_created_actor STRING, "
        "prev_record_hash STRING, prev_batch_id STRING, flag_only BOOLEAN, log_seq BIGINT",
        (),
        "A state row of a small batch not folded into silver.aspect_state yet (the current state is both, "
        "the newest row of each key winning); flag_only: the row only sets entity_deleted on the key; "
        "log_seq: the order in which batches were logged.",
    ),
    TableSpec(
        "silver",
        "skipped_snapshots",
        "entity_urn STRING, aspect_name STRING, version BIGINT, order_key STRING, change_type STRING, "
        "reason STRING, state_order_key STRING, record_hash STRING, batch_id STRING, source_file STRING, "
        "line_number BIGINT, recorded_at TIMESTAMP",
        (),
        "A snapshot that was late or a duplicate: it changed no state and emitted no event.",
    ),
    TableSpec(
        "silver",
        "patched_aspects",
        "entity_urn STRING, aspect_name STRING, order_key STRING, record_hash STRING, batch_id STRING, "
        "aspect_json STRING, recorded_at TIMESTAMP",
        (),
        "The full aspect an applied PATCH record (bronze keeps the patch) produced.",
    ),
    TableSpec(
        "silver",
        "entity_change_events",
        "event_id STRING, entity_urn STRING, entity_type STRING, category STRING, operation STRING, "
        "modifier STRING, parameters MAP<STRING, STRING>, actor STRING, event_time BIGINT, version INT, "
        "aspect_name STRING, aspect_entity_urn STRING, aspect_entity_type STRING, change_set_id STRING, "
        "old_value STRING, new_value STRING, source_version BIGINT, "
        "source_order_key STRING, batch_id STRING, source_file STRING, line_number BIGINT, event_date DATE",
        ("event_date",),
        "One DataHub Entity Change Event (ECE V1) with its typed lineage columns.",
        # Written only by insert-only MERGEs: Delta refuses any UPDATE/DELETE of a stored event.
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "gold",
        "audit_events",
        "event_id STRING, event_type STRING, timestamp BIGINT, actor_urn STRING, source_ip STRING, "
        "event_source STRING, user_agent STRING, telemetry_trace_id STRING, entity_urn STRING, "
        "entity_type STRING, aspect_name STRING, login_source STRING, raw_event STRING, origin STRING, "
        "source_id STRING, batch_id STRING, event_date DATE, domain STRING",
        ("event_date",),
        "One audit event as served by the Audit Events Search API: a landed usage event (origin usage, "
        "source_id its record hash) or one aspect write that produced change events (origin change, "
        "source_id its change set id); event_id hashes (type, actor, timestamp, entity urn, aspect name); "
        "domain: the entity's domain urn when published (its `domains` aspect), for scoped readers.",
    ),
    TableSpec(
        "gold",
        "actor_activity_daily",
        "actor_urn STRING, activity_date DATE, events_total BIGINT, events_by_type STRING, "
        "changes_by_category STRING, distinct_entities BIGINT, distinct_entity_types BIGINT, "
        "first_event_time BIGINT, last_event_time BIGINT, failed_logins BIGINT, deletes BIGINT",
        ("activity_date",),
        "What one actor did on one day (UTC), recomputed from gold.audit_events and silver change events; "
        "events_by_type and changes_by_category are JSON objects (name -> count, keys sorted) because the "
        "embedded engine cannot replaceWhere nested columns.",
    ),
    TableSpec(
        "gold",
        "openmetadata_change_events",
        "id STRING, event_type STRING, entity_type STRING, entity_id STRING, entity_fqn STRING, "
        "previous_version DECIMAL(10,1), current_version DECIMAL(10,1), user_name STRING, timestamp BIGINT, "
        "change_description STRING, entity STRING, entity_urn STRING, source_entity_urn STRING, "
        "source_entity_type STRING, aspect_name STRING, change_set_id STRING, entity_sequence BIGINT, "
        "major_change BOOLEAN, batch_id STRING, event_date DATE",
        ("event_date",),
        "One OpenMetadata ChangeEvent per entity change set (changeDescription and entity as JSON text; "
        "entity_sequence numbers an entity's events in version order).",
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "gold",
        "actor_anomalies",
        "actor STRING, granularity STRING, window_start BIGINT, window_end BIGINT, score DOUBLE, kind STRING, "
        "peer_scored BOOLEAN, top_features STRING, model_name STRING, model_version STRING, "
        "scored_at TIMESTAMP, window_date DATE",
        ("window_date",),
        "One actor time bucket (hour or day, [window_start, window_end) in epoch ms) the registered model "
        "flagged as unusual: score (1.0 = at the threshold), kind, whether the actor was scored against "
        "peers for lack of history, and top_features (JSON: feature, value, baseline, deviation).",
    ),
    TableSpec(
        "gold",
        "lineage_edges",
        "edge_id STRING, upstream_urn STRING, downstream_urn STRING, edge_kind STRING, owner_urn STRING, "
        "aspect_name STRING, valid_from_time BIGINT, valid_from_version BIGINT, valid_from_aspect STRING, "
        "added_by STRING, valid_to_time BIGINT, valid_to_version BIGINT, valid_to_aspect STRING, "
        "removed_by STRING, batch_id STRING, published_seq BIGINT",
        (),
        "One lineage edge (upstream_urn -> downstream_urn) for one span of its validity, in epoch ms "
        "[valid_from_time, valid_to_time), valid_to_* null while it holds: held by aspect_name of owner_urn "
        "(edge_kind dataset, column, job-input, job-output, chart-input, dashboard-chart, ...), added and "
        "removed by the version (and actor) of that aspect, or of the owner's status / key aspect when a "
        "delete ended it or a restore started it again; batch_id: the publish that last derived the owner's edges. "
        "Append-only between compactions: each publish appends its owners' rows numbered published_seq (null: 0) "
        "and one row with edge_kind null per owner; an owner's edges are its rows of its highest published_seq "
        "(gold.lineage_graph and the readers fold them so).",
    ),
    TableSpec(
        "ops",
        "stage_progress",
        "stage STRING, source_table STRING, batch_id STRING, source_version BIGINT, rows_in BIGINT, "
        "rows_out BIGINT, run_id STRING, processed_at TIMESTAMP",
        (),
        "Which upstream batch (or table version) a pipeline stage has consumed.",
    ),
    TableSpec(
        "ops",
        "subscriptions",
        "subscription_id STRING, name STRING, url STRING, format STRING, categories ARRAY<STRING>, "
        "operations ARRAY<STRING>, entity_types ARRAY<STRING>, entity_prefixes ARRAY<STRING>, "
        "actors ARRAY<STRING>, om_filter STRING, secret_ciphertext STRING, start_after TIMESTAMP, "
        "created_at TIMESTAMP, paused BOOLEAN, failing_since TIMESTAMP, next_attempt_at TIMESTAMP, "
        "last_error STRING, last_error_at TIMESTAMP, last_delivered_at TIMESTAMP, scope STRING",
        (),
        "One webhook subscription: its target, payload format, filters (empty arrays select everything; "
        "om_filter an OpenMetadata eventFilter as JSON), its secret encrypted with the home's key file, "
        "start_after (batches refined after it are delivered), its delivery state, and the scope it was "
        "created under (JSON, null: unscoped): only events in it are delivered.",
    ),
    TableSpec(
        "ops",
        "subscription_cursors",
        "subscription_id STRING, batch_id STRING, batch_offset BIGINT, batch_complete BOOLEAN, "
        "events_delivered BIGINT, committed_at TIMESTAMP",
        (),
        "One acknowledged step of a subscription's delivery, appended after the receiver answered 2xx "
        "(or the events were dead-lettered): the first batch_offset selected events of batch_id are done.",
    ),
    TableSpec(
        "ops",
        "subscription_dead_letters",
        "subscription_id STRING, subscription STRING, event_id STRING, entity_urn STRING, batch_id STRING, "
        "status INT, error STRING, payload STRING, failed_at TIMESTAMP",
        (),
        "One event a receiver refused for good (a 4xx other than 408/429): the status, the start of the "
        "answer's body, and the event as it was sent.",
    ),
    TableSpec(
        "ops",
        "access_log",
        "access_id STRING, accessed_at_ms BIGINT, principal STRING, actor STRING, method STRING, "
        "endpoint STRING, filters STRING, result_count BIGINT, client_address STRING, status INT, "
        "outcome STRING, batch_id STRING, access_date DATE",
        ("access_date",),
        "One request that read (or tried to read) audit data: who (principal token:<id> or jwt:<iss>#<sub>, "
        "actor), when, which endpoint with which filters (JSON), how many results, from where, and the "
        "outcome (ok, redirect, refused, invalid, busy, error) with the HTTP status; batch_id: the server flush that "
        "appended it (each flush is one link of the audit chain). Older batches are deleted by retention only.",
    ),
    TableSpec(
        "ops",
        "retention_cuts",
        "entry_id STRING, table_key STRING, deleted_batch_id STRING, rows_deleted BIGINT, newest_ms BIGINT, "
        "cutoff_ms BIGINT, retention_days INT, cut_at_ms BIGINT, batch_id STRING",
        (),
        "One batch `lakehouse retention apply` deleted from table_key because its newest record (newest_ms) "
        "was older than cutoff_ms (retention_days before cut_at_ms); batch_id: the cut, linked in the audit "
        "chain before the rows go, so verify tells a batch retention deleted from a forged deletion.",
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "ops",
        "legal_holds",
        "hold_id STRING, subject_kind STRING, subject_urn STRING, reason STRING, action STRING, "
        "recorded_at TIMESTAMP",
        (),
        "One step of a legal hold: action add (a hold on an actor or entity, subject_kind actor or entity) or "
        "remove; a hold added and not removed refuses retention of the batches holding its subject and the "
        "erasure of a held actor.",
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "ops",
        "identities",
        "pseudonym STRING, kind STRING, owner STRING, ciphertext STRING, recorded_at TIMESTAMP",
        (),
        "One personal identifier landing replaced by its pseudonym (kind person, ip or user-agent): the "
        "identity encrypted (AES-256-GCM, base64 nonce and ciphertext) under the key of owner, the person's "
        "pseudonym; erasing the person destroys that key, so the row no longer reads as anyone.",
    ),
    TableSpec(
        "ops",
        "erasures",
        "erasure_id STRING, pseudonym STRING, reason STRING, requested_by STRING, erased_at_ms BIGINT, "
        "identities BIGINT, batch_id STRING",
        (),
        "One erasure: the person's pseudonym (never the identity), why, who asked, when, and how many identity "
        "rows its key encrypted; each erasure is its own batch, linked in the audit chain.",
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "ops",
        "privacy_migrations",
        "entry_id STRING, table_key STRING, delta_version BIGINT, row_count BIGINT, migrated_at_ms BIGINT, "
        "batch_id STRING",
        (),
        "One table `lakehouse privacy enable` rewrote with every personal value pseudonymised: the Delta "
        "version its rewrite committed; batch_id: the migration, linked in the audit chain, so verify accepts "
        "that rewrite and no other.",
        (("delta.appendOnly", "true"),),
    ),
    TableSpec(
        "ops",
        "audit_chain",
        "seq BIGINT, table_key STRING, batch_id STRING, delta_version BIGINT, row_count BIGINT, "
        "batch_digest STRING, prev_digest STRING, link_digest STRING, signature STRING, key_id STRING, "
        "recorded_at_ms BIGINT",
        (),
        "One link of the audit hash chain: the SHA-256 of one batch's rows in one published table "
        "(canonical form: docs/audit-trail.md) as of delta_version, linked to the previous link's digest; "
        "signature (HMAC-SHA256 or Ed25519 of link_digest) and key_id when signing is on.",
        (("delta.appendOnly", "true"),),
    ),
)

TABLES: dict[str, TableSpec] = {spec.key: spec for spec in _SPECS}

# The key of every declared table, for code to name a table by (never by a string literal).
LANDED_FILES = "bronze.landed_files"
KAFKA_OFFSETS = "bronze.kafka_offsets"
ASPECT_SNAPSHOTS = "bronze.aspect_snapshots"
USAGE_EVENTS = "bronze.usage_events"
QUARANTINE = "bronze.quarantine"
ASPECT_STATE = "silver.aspect_state"
ASPECT_STATE_LOG = "silver.aspect_state_log"
SKIPPED_SNAPSHOTS = "silver.skipped_snapshots"
PATCHED_ASPECTS = "silver.patched_aspects"
ENTITY_CHANGE_EVENTS = "silver.entity_change_events"
AUDIT_EVENTS = "gold.audit_events"
ACTOR_ACTIVITY_DAILY = "gold.actor_activity_daily"
OPENMETADATA_CHANGE_EVENTS = "gold.openmetadata_change_events"
ACTOR_ANOMALIES = "gold.actor_anomalies"
LINEAGE_EDGES = "gold.lineage_edges"
STAGE_PROGRESS = "ops.stage_progress"
SUBSCRIPTIONS = "ops.subscriptions"
SUBSCRIPTION_CURSORS = "ops.subscription_cursors"
SUBSCRIPTION_DEAD_LETTERS = "ops.subscription_dead_letters"
ACCESS_LOG = "ops.access_log"
RETENTION_CUTS = "ops.retention_cuts"
LEGAL_HOLDS = "ops.legal_holds"
IDENTITIES = "ops.identities"
ERASURES = "ops.erasures"
PRIVACY_MIGRATIONS = "ops.privacy_migrations"
AUDIT_CHAIN = "ops.audit_chain"
# Columns declared after a table was first released: a home built before gets them added in place
# (null in its old rows), and the audit chain leaves them out of a row's canonical form while null,
# so links recorded before them still verify.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "gold.audit_events": ("domain",),
    "ops.subscriptions": ("scope",),
    "gold.lineage_edges": ("published_seq",),
}


def table_spec(table_key: str) -> TableSpec:
    """Return the declaration of one table.

    Args:
        table_key: `<layer>.<name>`, e.g. `silver.entity_change_events`.

    Raises:
        ConfigError: when the key names no declared table.
    """
    try:
        return TABLES[table_key]
    except KeyError:
        raise ConfigError(f"table_key: unknown table {table_key!r} (known: {', '.join(TABLES)})") from None


def table_name(settings: TableSettings, table_key: str) -> str:
    """Return the fully qualified name of a table: `[catalog.]schema.name`.

    Args:
        settings: the lakehouse settings (catalog and schema names).
        table_key: `<layer>.<name>`.
    """
    spec = table_spec(table_key)
    schema = getattr(settings.catalog.schemas, spec.layer)
    parts = [settings.catalog.name, schema, spec.name] if settings.catalog.name else [schema, spec.name]
    return ".".join(parts)


def schema_name(settings: TableSettings, layer: str) -> str:
    """Return the fully qualified schema (database) name of a layer."""
    schema = getattr(settings.catalog.schemas, layer)
    return f"{settings.catalog.name}.{schema}" if settings.catalog.name else schema


def table_location(settings: TableSettings, table_key: str) -> Location:
    """Return the storage location of a table: the configured one, else `<home>/<layer>/<name>`.

    A local path, or an object-storage URL (`conf.locations.ObjectLocation`) for a home or a
    configured location on object storage.
    """
    spec = table_spec(table_key)
    configured = settings.table_locations.get(table_key)
    return settings.resolve_path(configured) if configured else settings.home / spec.layer / spec.name
