"""Deterministic, realistic DataHub metadata history for tests, benchmarks and the demo.

Writes what a DataHub instance produces over some days, in exactly the shapes DataHub serializes:
MetadataChangeLog (MCL) JSON lines of entity aspects (optionally some entities as MCP lines or as a
file-sink JSON array), usage (audit) event documents, and action requests (proposals) as MCL lines.
The history edits every aspect the lakehouse diffs (tags, terms, domains, owners, structured
properties, deprecation, schemas, descriptions, status, key aspects), adds realistic noise (no-op
rewrites, exact duplicates, out-of-order versions) and a configurable share of malformed lines. A
manifest (`manifest.json`) lists every file with its counts and the exact malformed lines.

Pure Python, no Spark. The same arguments give byte-identical files: every entity's history comes
from its own seeded random stream, so neither the part size nor the number of worker processes
changes the content. Parts are generated in parallel (one process per core by default).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import gzip as gzip_module
import hashlib
import io
import json
import math
import multiprocessing
import os
import random
import shutil
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bronze.formats import USAGE_EVENT_TYPES
from conf.errors import InputError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT_VERSION = 1
DEFAULT_PART_SIZE = 200_000
DEFAULT_START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
DAY_MS = 86_400_000
_MAX_SMALL_PARTS = 8
_MIN_PART_RECORDS = 25_000
MIN_ENTITIES = 11  # one of each entity type, and a person besides the `datahub` system user

ENTITY_TYPES = (
    "corpuser",
    "corpGroup",
    "tag",
    "domain",
    "glossaryTerm",
    "dataset",
    "chart",
    "dashboard",
    "dataFlow",
    "dataJob",
)
REFERENCE_TYPES = ENTITY_TYPES[:5]
ASSET_TYPES = ENTITY_TYPES[5:]
_ASSET_WEIGHTS = {"dataset": 0.50, "chart": 0.18, "dashboard": 0.08, "dataFlow": 0.04, "dataJob": 0.20}
# Reference entity counts grow with the square root of the instance size (a 500k-entity instance
# has about a thousand users, not thirty thousand), capped at a share of all entities.
_REFERENCE_SCALE = {"corpuser": 1.5, "corpGroup": 0.3, "tag": 0.5, "domain": 0.15, "glossaryTerm": 0.8}
_REFERENCE_CAP_SHARE = 0.15

KEY_ASPECTS = {
    "corpuser": "corpUserKey",
    "corpGroup": "corpGroupKey",
    "tag": "tagKey",
    "domain": "domainKey",
    "glossaryTerm": "glossaryTermKey",
    "dataset": "datasetKey",
    "chart": "chartKey",
    "dashboard": "dashboardKey",
    "dataFlow": "dataFlowKey",
    "dataJob": "dataJobKey",
}

ACTION_REQUEST_TYPES = (
    "DOMAIN_ASSOCIATION",
    "OWNER_ASSOCIATION",
    "TAG_ASSOCIATION",
    "CREATE_GLOSSARY_TERM",
    "TERM_ASSOCIATION",
    "UPDATE_DESCRIPTION",
    "STRUCTURED_PROPERTY_ASSOCIATION",
)

# Malformed kinds: (kind, broken field, reason). Entity and action request lines use the MCL kinds.
MCL_MALFORMED_KINDS = (
    ("malformed_json", "json", "malformed_json"),
    ("missing_entity_urn", "entityUrn", "missing"),
    ("missing_aspect_name", "aspectName", "missing"),
    ("missing_change_type", "changeType", "missing"),
    ("bad_urn", "entityUrn", "bad_urn"),
    ("aspect_not_json", "aspect.value", "not_json"),
    ("iso_time", "created.time", "not_epoch_ms"),
)
MCP_MALFORMED_KINDS = (
    ("malformed_json", "json", "malformed_json"),
    ("missing_entity_urn", "entityUrn", "missing"),
    ("missing_aspect_name", "aspectName", "missing"),
    ("missing_change_type", "changeType", "missing"),
    ("bad_urn", "entityUrn", "bad_urn"),
    ("aspect_not_json", "aspect.value", "not_json"),
    ("iso_time", "systemMetadata.lastObserved", "not_epoch_ms"),
)
USAGE_MALFORMED_KINDS = (
    ("malformed_json", "json", "malformed_json"),
    ("missing_actor", "actorUrn", "missing"),
    ("missing_type", "type", "missing"),
    ("missing_timestamp", "timestamp", "missing"),
    ("unknown_type", "type", "unknown_type"),
    ("iso_time", "timestamp", "not_epoch_ms"),
)

_INGEST_ACTOR = "urn:li:corpuser:datahub"
_NOT_MOVABLE = ("out_of_order", "duplicate", "reobserve")
_NO_RUN = "no-run-id-provided"
_CT = '"contentType": "application/json"}'

_FMT_MCL, _FMT_MCP, _FMT_FILE_SINK = 0, 1, 2
_FORMAT_NAMES = ("mcl", "mcp", "file-sink")
_FORMAT_SUFFIX = (".mcl.jsonl", ".mcp.jsonl", ".file-sink.json")

# ---------------------------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------------------------

_FIXED_USERS = ("datahub", "jdoe", "asmith", "kpatel", "mlee", "rgarcia")
_FIRST_NAMES = (
    "alice", "bruno", "chen", "dana", "elif", "farah", "goran", "hana", "ivan", "jamal", "keiko", "lars",
    "maria", "nikhil", "olga", "pedro", "qing", "rosa", "sanjay", "tomas", "uma", "victor", "wei", "ximena",
    "yusuf", "zoe", "amara", "bjorn", "carmen", "dmitri", "esther", "felix", "grace", "hugo", "ines", "joao",
)
_LAST_NAMES = (
    "nguyen", "garcia", "smith", "kowalski", "okafor", "tanaka", "muller", "rossi", "silva", "novak",
    "haddad", "larsen", "kim", "patel", "ivanova", "dubois", "jensen", "moreau", "fischer", "sato",
    "alvarez", "cohen", "oconnor", "mehta", "bauer", "lindqvist", "wong", "petrov", "costa", "yilmaz",
)
_DEPARTMENTS = ("Data Engineering", "Analytics", "Finance", "Marketing", "Sales Ops", "Security", "Platform")
_TITLES = ("Data Engineer", "Senior Data Engineer", "Analytics Engineer", "Data Analyst", "Data Steward",
           "Staff Engineer", "Product Manager", "Finance Analyst", "Head of Data")
_FIXED_GROUPS = ("analytics", "data-eng", "finance-team", "marketing-ops", "platform", "security",
                 "data-governance", "bi-developers", "ml-platform", "sales-analytics")
_FIXED_TAGS = ("PII", "Gold", "Silver", "Bronze", "Sensitive", "GDPR", "Finance", "Marketing", "Legacy",
               "Tier1", "Tier2", "Certified", "Experimental", "HIPAA", "SOX", "Raw", "Curated", "Critical")
_FIXED_DOMAINS = ("engineering", "finance", "marketing", "sales", "product", "operations", "people",
                  "legal", "customer-success", "data-platform", "supply-chain", "risk")
_FIXED_TERMS = (
    "Customer.Address", "Customer.Email", "Customer.Phone", "Customer.Name", "Finance.Revenue",
    "Finance.Cost", "Finance.Margin", "Finance.Invoice", "Classification.Public", "Classification.Internal",
    "Classification.Confidential", "Classification.Restricted", "Sales.Order", "Sales.Lead",
    "Sales.Opportunity", "Marketing.Campaign", "Marketing.Attribution", "Product.SKU",
)
_TERM_NODES = ("Customer", "Finance", "Classification", "Sales", "Marketing", "Product")
_TAG_COLORS = ("#FF6B6B", "#4ECDC4", "#FFD93D", "#1A535C", "#6A4C93", "#8AC926", "#1982C4", "#FF924C")

_PLATFORMS = ("snowflake", "bigquery", "postgres", "hive", "redshift")
_PLATFORM_NAMES = {
    "snowflake": (("analytics", "raw", "finance_dw", "marketing"), ("public", "core", "staging", "reporting")),
    "bigquery": (("proj", "acme-prod", "acme-analytics"), ("sales", "events", "crm", "billing")),
    "postgres": (("appdb", "billing", "inventory"), ("public",)),
    "hive": (("warehouse", "logs"), ("default", "curated", "raw")),
    "redshift": (("dwh", "events_db"), ("public", "mart", "stage")),
}
_TABLE_STEMS = ("orders", "refunds", "customers", "sessions", "payments", "invoices", "shipments",
                "products", "page_views", "subscriptions", "accounts", "events", "inventory", "campaigns",
                "leads", "tickets", "transactions", "users", "returns", "clicks")
_CHART_TOOLS = ("looker", "tableau", "superset", "powerbi")
_CHART_STEMS = ("weekly_orders", "revenue_by_region", "churn_rate", "active_users", "funnel_conversion",
                "refund_ratio", "pipeline_value", "ticket_backlog", "inventory_levels", "cohort_retention")
_DASHBOARD_STEMS = ("revenue_overview", "sales_pipeline", "customer_health", "ops_daily", "marketing_roi",
                    "finance_close", "support_kpis", "exec_summary")
_ORCHESTRATORS = ("airflow", "dagster", "prefect")
_FLOW_STEMS = ("daily_etl", "hourly_events", "finance_close", "crm_sync", "ml_features", "reverse_etl")
_JOB_STEMS = ("load_sessions", "extract_orders", "transform_customers", "publish_metrics", "dedupe_events",
              "snapshot_accounts", "score_leads", "export_invoices")

_OWNER_TYPES = (
    ("TECHNICAL_OWNER", "urn:li:ownershipType:__system__technical_owner"),
    ("BUSINESS_OWNER", "urn:li:ownershipType:__system__business_owner"),
    ("DATA_STEWARD", "urn:li:ownershipType:__system__data_steward"),
    ("NONE", "urn:li:ownershipType:__system__none"),
    ("CUSTOM", "urn:li:ownershipType:sla_owner"),
)
_OWNER_TYPE_WEIGHTS = (0.45, 0.25, 0.2, 0.04, 0.06)

# (property urn, value kind, choices); values are DataHub's union `{"string": ...}` / `{"double": ...}`.
_STRUCTURED_PROPERTIES = (
    ("urn:li:structuredProperty:io.acryl.dataManagement.certifier", "user", None),
    ("urn:li:structuredProperty:io.acryl.dataManagement.replicationSLA", "double", (7.0, 30.0, 90.0, 365.0, 730.0)),
    ("urn:li:structuredProperty:io.acryl.privacy.classification", "string",
     ("Public", "Internal", "Confidential", "Restricted")),
    ("urn:li:structuredProperty:io.acryl.privacy.retentionTime", "double", (7.0, 30.0, 90.0, 365.0, 730.0)),
    ("urn:li:structuredProperty:io.acryl.privacy.dataCategories", "strings",
     ("PII", "Financial", "Health", "Behavioral", "Contact")),
    ("urn:li:structuredProperty:io.acryl.dataQuality.tier", "string", ("Tier 1", "Tier 2", "Tier 3")),
)

# Column vocabulary: (name, type family).
_COLUMNS = (
    ("customer_id", "id"), ("order_id", "id"), ("account_id", "id"), ("user_id", "id"), ("product_id", "id"),
    ("session_id", "short"), ("email", "long"), ("phone", "short"), ("first_name", "short"),
    ("last_name", "short"), ("full_name", "long"), ("country", "code"), ("region", "short"), ("city", "short"),
    ("postal_code", "short"), ("currency", "code"), ("status", "short"), ("channel", "short"), ("notes", "text"),
    ("comment", "text"), ("payload", "bytes"), ("created_at", "ts"), ("updated_at", "ts"), ("deleted_at", "ts"),
    ("event_time", "ts"), ("order_date", "date"), ("signup_date", "date"), ("birth_date", "date"),
    ("amount", "decimal"), ("total_amount", "decimal"), ("tax", "decimal"), ("discount", "float"),
    ("price", "decimal"), ("unit_cost", "decimal"), ("score", "float"), ("quantity", "int"), ("item_count", "int"),
    ("is_active", "bool"), ("is_test", "bool"), ("is_deleted", "bool"), ("ip_address", "short"),
    ("user_agent", "text"), ("sku", "short"), ("campaign_id", "short"), ("utm_source", "short"),
    ("labels", "array"), ("attributes", "map"),
)
_RENAMES = {"email": "email_address", "phone": "phone_number", "amount": "amount_usd", "status": "order_status",
            "notes": "internal_notes", "country": "country_code", "price": "unit_price", "score": "risk_score"}
_TYPE_CLASS = {
    "id": "NumberType", "int": "NumberType", "decimal": "NumberType", "float": "NumberType",
    "short": "StringType", "long": "StringType", "code": "StringType", "text": "StringType",
    "bytes": "BytesType", "ts": "TimeType", "date": "DateType", "bool": "BooleanType",
    "array": "ArrayType", "map": "MapType", "struct": "RecordType",
}
_NATIVE = {
    "snowflake": {
        "id": ("NUMBER(38,0)",), "int": ("NUMBER(38,0)", "INTEGER"), "decimal": ("NUMBER(12,2)", "NUMBER(18,4)"),
        "float": ("FLOAT",), "short": ("VARCHAR(64)", "VARCHAR(256)"), "long": ("VARCHAR(256)", "VARCHAR(16777216)"),
        "code": ("VARCHAR(3)", "VARCHAR(8)"), "text": ("TEXT", "VARCHAR(16777216)"), "bytes": ("BINARY",),
        "ts": ("TIMESTAMP_NTZ", "TIMESTAMP_TZ"), "date": ("DATE",), "bool": ("BOOLEAN",), "array": ("ARRAY",),
        "map": ("OBJECT",), "struct": ("OBJECT",),
    },
    "bigquery": {
        "id": ("INT64",), "int": ("INT64",), "decimal": ("NUMERIC", "BIGNUMERIC"), "float": ("FLOAT64",),
        "short": ("STRING",), "long": ("STRING",), "code": ("STRING(3)", "STRING"), "text": ("STRING",),
        "bytes": ("BYTES",), "ts": ("TIMESTAMP", "DATETIME"), "date": ("DATE",), "bool": ("BOOL",),
        "array": ("ARRAY<STRING>",), "map": ("JSON",), "struct": ("STRUCT<street STRING, city STRING, zip STRING>",),
    },
    "postgres": {
        "id": ("BIGINT", "INTEGER"), "int": ("INTEGER", "SMALLINT", "BIGINT"),
        "decimal": ("NUMERIC(12,2)", "NUMERIC(18,4)"), "float": ("DOUBLE PRECISION", "REAL"),
        "short": ("VARCHAR(64)", "VARCHAR(255)"), "long": ("VARCHAR(255)", "TEXT"),
        "code": ("CHAR(3)", "VARCHAR(8)"), "text": ("TEXT",), "bytes": ("BYTEA",),
        "ts": ("TIMESTAMP WITHOUT TIME ZONE", "TIMESTAMP WITH TIME ZONE"), "date": ("DATE",), "bool": ("BOOLEAN",),
        "array": ("TEXT[]",), "map": ("JSONB",), "struct": ("JSONB",),
    },
    "hive": {
        "id": ("bigint",), "int": ("int", "bigint"), "decimal": ("decimal(12,2)", "decimal(18,4)"),
        "float": ("double", "float"), "short": ("string", "varchar(64)"), "long": ("string",),
        "code": ("char(3)", "string"), "text": ("string",), "bytes": ("binary",), "ts": ("timestamp",),
        "date": ("date",), "bool": ("boolean",), "array": ("array<string>",), "map": ("map<string,string>",),
        "struct": ("struct<street:string,city:string,zip:string>",),
    },
    "redshift": {
        "id": ("BIGINT",), "int": ("INTEGER", "BIGINT"), "decimal": ("NUMERIC(12,2)", "NUMERIC(18,4)"),
        "float": ("DOUBLE PRECISION", "REAL"), "short": ("VARCHAR(64)", "VARCHAR(256)"),
        "long": ("VARCHAR(256)", "VARCHAR(65535)"), "code": ("CHAR(3)",), "text": ("VARCHAR(65535)",),
        "bytes": ("VARBYTE",), "ts": ("TIMESTAMP", "TIMESTAMPTZ"), "date": ("DATE",), "bool": ("BOOLEAN",),
        "array": ("SUPER",), "map": ("SUPER",), "struct": ("SUPER",),
    },
}
# A retype across families (an int becoming a string, a date becoming a timestamp), else within one.
_CROSS_RETYPE = {"int": "decimal", "id": "short", "date": "ts", "ts": "short", "float": "decimal", "decimal": "float",
                 "short": "long", "code": "short", "bool": "short", "long": "text", "text": "long"}

_DESCRIPTION_TEMPLATES = (
    "Raw {name} table",
    "{name}: one row per {entity}, loaded nightly from the source system",
    "Curated {entity} facts used by finance and growth reporting",
    "Daily snapshot of {entity} records; see the runbook before backfilling",
    "{entity} data for the EMEA region (incl. Z\u00fcrich and M\u00fcnchen)",
    "Deprecated copy of {name}; prefer the curated mart",
)
_FIELD_DESCRIPTIONS = ("{f}: as delivered by the source", "{f} in UTC", "{f} (nullable for legacy rows)",
                       "Primary {f} used for joins", "{f}: masked for non-admin roles",
                       "{f} \u2013 business definition pending")
_DEPRECATION_NOTES = ("Replaced; migrate before Q1", "Replaced; migrate before Q2", "Replaced; migrate before Q3",
                      "Replaced; migrate before Q4", "Superseded by the curated mart", "Source system retired")

_USER_AGENTS = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/123.0.6312.122 Safari/537.36 Edg/123.0.2420.97",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4_1) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.4.1 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:124.0) Gecko/20100101 Firefox/124.0",
)
_API_AGENTS = (
    "DataHub-RestClient/0.13.2.4 (python-requests/2.31.0)",
    "python-requests/2.31.0",
    "acryl-datahub-actions/0.0.15",
    "curl/8.4.0",
    "Apache-HttpClient/4.5.14 (Java/17.0.10)",
    "okta-scim/1.0",
)
_LOGIN_SOURCES = ("PASSWORD_LOGIN", "SSO_LOGIN", "OIDC_IMPLICIT_LOGIN", "PASSWORD_RESET", "FALLBACK_LOGIN",
                  "SIGN_UP_LINK_LOGIN", "GUEST_LOGIN")
_LOGIN_WEIGHTS = (0.35, 0.4, 0.1, 0.04, 0.03, 0.05, 0.03)
_DENIAL_REASONS = ("INVALID_CREDENTIALS", "USER_NOT_FOUND", "USER_SUSPENDED", "NATIVE_AUTH_DISABLED",
                   "SSO_CALLBACK_FAILED")
_UNKNOWN_USAGE_TYPES = ("SearchAcrossEntitiesEvent", "PageViewEvent", "ExportCsvEvent")

_USAGE_WEIGHTS = {
    "EntityEvent": 40.0, "UpdateAspectEvent": 20.0, "LogInEvent": 14.0, "FailedLogInEvent": 3.0,
    "DeleteEntityEvent": 1.5, "CreateUserEvent": 1.5, "UpdateUserEvent": 2.5, "CreateAccessTokenEvent": 2.5,
    "RevokeAccessTokenEvent": 1.5, "CreatePolicyEvent": 1.2, "UpdatePolicyEvent": 2.0, "DeletePolicyEvent": 0.5,
    "CreateIngestionSourceEvent": 1.3, "UpdateIngestionSourceEvent": 2.5,
}
_PERSON_EVENTS = frozenset({"LogInEvent", "FailedLogInEvent", "EntityEvent", "CreateAccessTokenEvent"})
_ENTITY_VIEW_ASPECTS = ("datasetProperties", "schemaMetadata", "ownership", "globalTags", "glossaryTerms",
                        "domains", "editableDatasetProperties", "deprecation", "structuredProperties")
_UPDATE_ASPECTS = ("ownership", "globalTags", "glossaryTerms", "domains", "editableDatasetProperties",
                   "editableSchemaMetadata", "deprecation", "structuredProperties", "status")


# ---------------------------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MalformedLine:
    """One deliberately malformed line: its 1-based line number, the field it breaks and why."""

    line: int
    field: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form."""
        return {"line": self.line, "field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class GeneratedFile:
    """Counts for one written file; `records` = `lines` - malformed lines (for file-sink: array items)."""

    path: str
    kind: str
    format: str
    batch: int
    lines: int
    records: int
    malformed: tuple[MalformedLine, ...]
    aspect_versions: int = 0
    usage_events: int = 0
    action_requests: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    deletes: int = 0
    first_time_ms: int | None = None
    last_time_ms: int | None = None
    aspects: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    event_types: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form."""
        return {
            "path": self.path,
            "kind": self.kind,
            "format": self.format,
            "batch": self.batch,
            "lines": self.lines,
            "records": self.records,
            "malformed": [m.to_json() for m in self.malformed],
            "aspect_versions": self.aspect_versions,
            "usage_events": self.usage_events,
            "action_requests": self.action_requests,
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
            "deletes": self.deletes,
            "first_time_ms": self.first_time_ms,
            "last_time_ms": self.last_time_ms,
            "aspects": dict(sorted(self.aspects.items())),
            "operations": dict(sorted(self.operations.items())),
            "event_types": dict(sorted(self.event_types.items())),
            "bytes": self.bytes,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> GeneratedFile:
        """Rebuild an entry from its manifest form."""
        values = dict(document)
        values["malformed"] = tuple(MalformedLine(**m) for m in document["malformed"])
        return cls(**values)


@dataclass(frozen=True)
class GeneratorManifest:
    """What one generator run wrote under `out_dir` (also saved as `out_dir/manifest.json`)."""

    out_dir: Path
    parameters: dict[str, Any]
    files: tuple[GeneratedFile, ...]
    entities: dict[str, int]
    actors: tuple[str, ...]

    @property
    def totals(self) -> dict[str, Any]:
        """Sums over all files: lines, records, malformed, aspect versions, usage events, action requests."""
        ops: Counter[str] = Counter()
        events: Counter[str] = Counter()
        for f in self.files:
            ops.update(f.operations)
            events.update(f.event_types)
        return {
            "files": len(self.files),
            "lines": sum(f.lines for f in self.files),
            "records": sum(f.records for f in self.files),
            "malformed": sum(len(f.malformed) for f in self.files),
            "aspect_versions": sum(f.aspect_versions for f in self.files),
            "usage_events": sum(f.usage_events for f in self.files),
            "action_requests": sum(f.action_requests for f in self.files),
            "duplicates": sum(f.duplicates for f in self.files),
            "out_of_order": sum(f.out_of_order for f in self.files),
            "deletes": sum(f.deletes for f in self.files),
            "bytes": sum(f.bytes for f in self.files),
            "operations": dict(sorted(ops.items())),
            "event_types": dict(sorted(events.items())),
        }

    def files_of(self, kind: str, batch: int | None = None) -> list[GeneratedFile]:
        """Return the files of one kind (`aspects`, `usage`, `action_requests`), optionally of one batch."""
        return [f for f in self.files if f.kind == kind and (batch is None or f.batch == batch)]

    def path_of(self, entry: GeneratedFile) -> Path:
        """Return the absolute path of a listed file."""
        return self.out_dir / entry.path

    def to_json(self) -> dict[str, Any]:
        """Return the manifest document."""
        return {
            "generator": "bronze.generator",
            "format_version": MANIFEST_FORMAT_VERSION,
            "parameters": self.parameters,
            "totals": self.totals,
            "entities": self.entities,
            "actors": list(self.actors),
            "files": [f.to_json() for f in self.files],
        }

    def write(self) -> Path:
        """Write `manifest.json` into `out_dir` and return its path."""
        path = self.out_dir / MANIFEST_NAME
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, out_dir: Path | str) -> GeneratorManifest:
        """Read the manifest a run wrote into `out_dir`.

        Raises:
            InputError: when `out_dir/manifest.json` is missing or is not a generator manifest.
        """
        path = Path(out_dir) / MANIFEST_NAME
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"out_dir: {str(out_dir)!r} has no {MANIFEST_NAME}") from None
        except ValueError as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        if document.get("generator") != "bronze.generator":
            raise InputError(f"{path}: 'generator' is {document.get('generator')!r}, not 'bronze.generator'")
        return cls(
            out_dir=Path(out_dir),
            parameters=document["parameters"],
            files=tuple(GeneratedFile.from_json(f) for f in document["files"]),
            entities=document["entities"],
            actors=tuple(document["actors"]),
        )


# ---------------------------------------------------------------------------------------------
# The universe: which entity sits at which index, and the urns everybody refers to
# ---------------------------------------------------------------------------------------------


def _crc(seed: int, index: int, salt: str) -> int:
    return zlib.crc32(f"{seed}:{index}:{salt}".encode())


def _pick(options: Sequence[Any], seed: int, index: int, salt: str) -> Any:
    return options[_crc(seed, index, salt) % len(options)]


def _entity_counts(entities: int) -> dict[str, int]:
    """Split `entities` over the entity types: reference types by square root, assets by weight."""
    cap = max(1, int(entities * _REFERENCE_CAP_SHARE))
    counts = {t: max(2 if t == "corpuser" else 1, min(cap, round(s * math.sqrt(entities))))
              for t, s in _REFERENCE_SCALE.items()}
    assets = entities - sum(counts.values())
    if assets < len(ASSET_TYPES):
        counts["corpuser"] = max(2, counts["corpuser"] - (len(ASSET_TYPES) - assets))
        assets = entities - sum(counts.values())
    raw = {t: assets * w for t, w in _ASSET_WEIGHTS.items()}
    asset_counts = {t: max(1, int(v)) for t, v in raw.items()}
    remainder = assets - sum(asset_counts.values())
    for t in sorted(raw, key=lambda k: (raw[k] - int(raw[k])), reverse=True):
        if remainder <= 0:
            break
        asset_counts[t] += 1
        remainder -= 1
    while remainder < 0:  # the minimum of one each overshot: take back from the largest type
        largest = max(asset_counts, key=asset_counts.get)
        asset_counts[largest] -= 1
        remainder += 1
    counts.update(asset_counts)
    return counts


def _unique_names(fixed: Sequence[str], count: int, make: Any) -> list[str]:
    names = list(fixed[:count])
    seen = set(names)
    k = len(names)
    while len(names) < count:
        name = make(k)
        if name in seen:
            name = f"{name}{k}"
        seen.add(name)
        names.append(name)
        k += 1
    return names


class _Universe:
    """Entity layout of one generated instance: type and urn of every global entity index.

    Reference entities (users, groups, tags, domains, glossary terms) take the first indices; assets
    follow, their types interleaved evenly. Urns derive from (seed, index) so any part can name any
    entity without generating it.
    """

    def __init__(self, entities: int, seed: int, start_ms: int, end_ms: int):
        self.entities = entities
        self.seed = seed
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.counts = _entity_counts(entities)
        rng = random.Random(f"universe/{seed}")
        users = _unique_names(_FIXED_USERS, self.counts["corpuser"], lambda k: self._person(rng, k))
        self.user_names = users
        self.users = [f"urn:li:corpuser:{u}" for u in users]
        self.groups = [f"urn:li:corpGroup:{g}" for g in _unique_names(
            _FIXED_GROUPS, self.counts["corpGroup"], lambda k: f"{rng.choice(_FIXED_GROUPS)}-{k}")]
        self.tags = [f"urn:li:tag:{t}" for t in _unique_names(_FIXED_TAGS, self.counts["tag"], lambda k: f"Tag{k}")]
        self.domains = [f"urn:li:domain:{d}" for d in _unique_names(
            _FIXED_DOMAINS, self.counts["domain"], lambda k: f"{rng.choice(_FIXED_DOMAINS)}-{k}")]
        self.terms = [f"urn:li:glossaryTerm:{t}" for t in _unique_names(
            _FIXED_TERMS, self.counts["glossaryTerm"], lambda k: f"{rng.choice(_TERM_NODES)}.Term{k}")]
        self.reference = {"corpuser": self.users, "corpGroup": self.groups, "tag": self.tags,
                          "domain": self.domains, "glossaryTerm": self.terms}
        self.reference_offsets: dict[str, int] = {}
        offset = 0
        for t in REFERENCE_TYPES:
            self.reference_offsets[t] = offset
            offset += self.counts[t]
        self.asset_start = offset
        codes = array("B")
        for code, t in enumerate(REFERENCE_TYPES):
            codes.extend([code] * self.counts[t])
        # Even interleave: the k-th asset of a type sits at fractional position (k + 0.5) / count.
        slots = []
        for t in ASSET_TYPES:
            n = self.counts[t]
            code = ENTITY_TYPES.index(t)
            slots.extend(((k + 0.5) / n, code) for k in range(n))
        slots.sort()
        codes.extend(code for _, code in slots)
        self.codes = codes
        self.by_type: dict[str, array] = {t: array("i") for t in ENTITY_TYPES}
        for i, code in enumerate(codes):
            self.by_type[ENTITY_TYPES[code]].append(i)

    @staticmethod
    def _person(rng: random.Random, k: int) -> str:
        first, last = rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES)
        if k % 4 == 0:
            return f"{first}.{last}@acme.com"
        return f"{first[0]}{last}"

    def type_of(self, index: int) -> str:
        return ENTITY_TYPES[self.codes[index]]

    def urn(self, index: int) -> str:
        """Return the urn of the entity at a global index."""
        t = self.type_of(index)
        if t in self.reference:
            return self.reference[t][index - self.reference_offsets[t]]
        s = self.seed
        if t == "dataset":
            platform, name, env = self.dataset_parts(index)
            return f"urn:li:dataset:(urn:li:dataPlatform:{platform},{name},{env})"
        if t in ("chart", "dashboard"):
            stems = _CHART_STEMS if t == "chart" else _DASHBOARD_STEMS
            return f"urn:li:{t}:({_pick(_CHART_TOOLS, s, index, 'tool')},{_pick(stems, s, index, t)}_{index})"
        if t == "dataFlow":
            cluster = "prod" if _crc(s, index, "env") % 10 else "dev"
            orchestrator, flow = _pick(_ORCHESTRATORS, s, index, "o"), _pick(_FLOW_STEMS, s, index, "f")
            return f"urn:li:dataFlow:({orchestrator},{flow}_{index},{cluster})"
        flows = self.by_type["dataFlow"]
        flow = self.urn(flows[_crc(s, index, "flow") % len(flows)])
        return f"urn:li:dataJob:({flow},{_pick(_JOB_STEMS, s, index, 'j')}_{index})"

    def dataset_parts(self, index: int) -> tuple[str, str, str]:
        """Return (platform, qualified name, environment) of the dataset at `index`."""
        s = self.seed
        platform = _pick(_PLATFORMS, s, index, "platform")
        dbs, schemas = _PLATFORM_NAMES[platform]
        database, schema = _pick(dbs, s, index, "db"), _pick(schemas, s, index, "schema")
        name = f"{database}.{schema}.{_pick(_TABLE_STEMS, s, index, 't')}_{index}"
        env = "PROD" if _crc(s, index, "env") % 10 else "DEV"
        return platform, name, env

    def random_of(self, rng: random.Random, entity_type: str) -> int:
        indices = self.by_type[entity_type]
        return indices[int(len(indices) * rng.random())]

    def random_asset(self, rng: random.Random) -> int:
        return self.asset_start + int((self.entities - self.asset_start) * rng.random())

    def actor(self, rng: random.Random) -> str:
        """A person acting in the UI; a few people do most of the work (quadratic skew), never `datahub`."""
        n = len(self.users) - 1
        return self.users[1 + int(n * rng.random() ** 2)]


# ---------------------------------------------------------------------------------------------
# One entity's history
# ---------------------------------------------------------------------------------------------


# `json.dumps` with its default settings, without the per-call keyword handling (it is called for
# every aspect value); the output is byte-for-byte that of `json.dumps`.
_dumps = json.JSONEncoder().encode


def _stamp(t: int, actor: str) -> dict[str, Any]:
    return {"time": t, "actor": actor}


def _run_id(rng: random.Random, source: str, t: int) -> str:
    return f"{source}-{t // 1000}-{rng.getrandbits(24):06x}"


def _type_union(family: str) -> str:
    cls = _TYPE_CLASS[family]
    if family == "array":
        return '{"type": {"com.linkedin.schema.ArrayType": {"nestedType": ["string"]}}}'
    if family == "map":
        return '{"type": {"com.linkedin.schema.MapType": {"keyType": "string", "valueType": "string"}}}'
    return '{"type": {"com.linkedin.schema.%s": {}}}' % cls


class _Field:
    """A schema field; `rendered` caches its JSON for the schemaMetadata template."""

    __slots__ = ("path", "nullable", "family", "native", "key", "description", "tags", "terms", "rendered")

    def __init__(self, path: str, nullable: bool, family: str, native: str, key: bool = False):
        self.path = path
        self.nullable = nullable
        self.family = family
        self.native = native
        self.key = key
        self.description: str | None = None
        self.tags: tuple[str, ...] = ()
        self.terms: tuple[str, ...] = ()
        self.rendered: str | None = None

    def render(self, t: int) -> str:
        if self.rendered is None:
            parts = ['{"fieldPath": ', _dumps(self.path), ', "nullable": ', "true" if self.nullable else "false"]
            if self.description is not None:
                parts += [', "description": ', _dumps(self.description)]
            parts += [', "type": ', _type_union(self.family), ', "nativeDataType": ', _dumps(self.native),
                      ', "recursive": false']
            if self.tags:
                parts += [', "globalTags": ', _dumps({"tags": [{"tag": x} for x in self.tags]})]
            if self.terms:
                parts += [', "glossaryTerms": ', _dumps({
                    "terms": [{"urn": x, "actor": _INGEST_ACTOR} for x in self.terms],
                    "auditStamp": _stamp(t, _INGEST_ACTOR)})]
            parts += [', "isPartOfKey": ', "true" if self.key else "false", "}"]
            self.rendered = "".join(parts)
        return self.rendered


class _Aspect:
    __slots__ = ("version", "escaped", "sysmeta", "run_id", "record", "value")

    def __init__(self, version: int, escaped: str, sysmeta: str, run_id: str, record: int, value: str):
        self.version = version
        self.escaped = escaped
        self.sysmeta = sysmeta
        self.run_id = run_id
        self.record = record
        self.value = value


@dataclass
class _Options:
    duplicate_share: float
    out_of_order_share: float
    hard_delete_share: float
    mcp_share: float
    file_sink_share: float


class _Sink:
    """Records of one part: (sort_ms, seq, format, line or file-sink dict, aspect, operation, time_ms)."""

    def __init__(self) -> None:
        self.records: list[list[Any]] = []

    def add(self, sort_ms: int, fmt: int, line: Any, aspect: str, op: str, time_ms: int) -> int:
        self.records.append([sort_ms, len(self.records), fmt, line, aspect, op, time_ms])
        return len(self.records) - 1


class _EntityWriter:
    """Writes versions of one entity's aspects, in MCL, MCP or file-sink shape, tracking versions."""

    def __init__(self, entity_type: str, urn: str, fmt: int, sink: _Sink, rng: random.Random, options: _Options):
        if '"' in urn or "\\" in urn:
            raise InputError(f"urn: {urn!r} would need JSON escaping")
        self.entity_type = entity_type
        self.urn = urn
        self.fmt = fmt
        self.sink = sink
        self.rng = rng
        self.options = options
        self.state: dict[str, _Aspect] = {}
        self.head = f'{{"entityType": "{entity_type}", "entityUrn": "{urn}", "changeType": '

    def _render(self, aspect: str, version: int, escaped: str, value: str, t: int, actor: str, run_id: str,
                prev: _Aspect | None) -> tuple[Any, str]:
        """Return the record (a line, or a dict for the file sink) and its systemMetadata JSON."""
        fmt = self.fmt
        if fmt == _FMT_MCL:
            last_run = prev.run_id if prev else _NO_RUN
            sysmeta = f'{{"lastObserved": {t}, "runId": "{run_id}", "lastRunId": "{last_run}", "version": "{version}"}}'
            parts = [self.head, '"UPSERT", "aspectName": "', aspect, '", "aspect": {"value": ', escaped, ", ", _CT,
                     ', "systemMetadata": ', sysmeta]
            if prev:
                parts += [', "previousAspectValue": {"value": ', prev.escaped, ", ", _CT,
                          ', "previousSystemMetadata": ', prev.sysmeta]
            parts += [f', "created": {{"time": {t}, "actor": "{actor}"}}}}']
            return "".join(parts), sysmeta
        if fmt == _FMT_MCP:
            sysmeta = f'{{"lastObserved": {t}, "runId": "{run_id}", "lastRunId": "{_NO_RUN}"}}'
            return "".join([self.head, '"UPSERT", "aspectName": "', aspect, '", "aspect": {"value": ', escaped, ", ",
                            _CT, ', "systemMetadata": ', sysmeta, "}"]), sysmeta
        record = {"entityType": self.entity_type, "entityUrn": self.urn, "changeType": "UPSERT", "aspectName": aspect,
                  "aspect": {"json": json.loads(value)},
                  "systemMetadata": {"lastObserved": t, "runId": run_id, "lastRunId": _NO_RUN}}
        return record, ""

    def upsert(self, aspect: str, value: str, t: int, actor: str, run_id: str, op: str) -> None:
        """Write a new version of `aspect` (its JSON text `value`) at time `t` by `actor`."""
        prev = self.state.get(aspect)
        version = prev.version + 1 if prev else 1
        escaped = _dumps(value)
        fmt = self.fmt
        line, sysmeta = self._render(aspect, version, escaped, value, t, actor, run_id, prev)
        sink = self.sink
        index = sink.add(t, fmt, line, aspect, op, t)
        opts = self.options
        if fmt != _FMT_FILE_SINK and self.rng.random() < opts.duplicate_share:
            # A replay of the very same record a little later (a re-sent Kafka message, a re-run file).
            sink.add(t + 1 + int(self.rng.random() * 600_000), fmt, line, aspect, "duplicate", t)
        if (prev is not None and fmt == _FMT_MCL and sink.records[prev.record][5] not in _NOT_MOVABLE
                and self.rng.random() < opts.out_of_order_share):
            # The older version arrives after the newer one.
            older = sink.records[prev.record]
            older[0] = t + 1 + int(self.rng.random() * 5_000)
            older[5] = "out_of_order"
        self.state[aspect] = _Aspect(version, escaped, sysmeta, run_id, index, value)

    def reobserve(self, aspect: str, t: int, actor: str, run_id: str) -> None:
        """Write the current value again under the same version: an ingestion run that found nothing new.

        DataHub keeps the version and only the system metadata (lastObserved, runId) moves on.
        """
        prev = self.state[aspect]
        line, sysmeta = self._render(aspect, prev.version, prev.escaped, prev.value, t, actor, run_id, prev)
        index = self.sink.add(t, self.fmt, line, aspect, "reobserve", t)
        self.state[aspect] = _Aspect(prev.version, prev.escaped, sysmeta, run_id, index, prev.value)

    def hard_delete(self, t: int, actor: str) -> int:
        """Write DataHub's DELETE records: every aspect in name order, then the key aspect; return the end time."""
        key = KEY_ASPECTS[self.entity_type]
        names = sorted(a for a in self.state if a != key) + [key]
        for name in names:
            prev = self.state[name]
            if self.fmt == _FMT_MCL:
                sysmeta = (f'{{"lastObserved": {t}, "runId": "{_NO_RUN}", "lastRunId": "{prev.run_id}", '
                           f'"version": "{prev.version}"}}')
                line = "".join([self.head, '"DELETE", "aspectName": "', name, '", "systemMetadata": ', sysmeta,
                                ', "previousAspectValue": {"value": ', prev.escaped, ", ", _CT,
                                ', "previousSystemMetadata": ', prev.sysmeta,
                                f', "created": {{"time": {t}, "actor": "{actor}"}}}}'])
            else:
                line = "".join([self.head, '"DELETE", "aspectName": "', name, '", "systemMetadata": ',
                                f'{{"lastObserved": {t}, "runId": "{_NO_RUN}", "lastRunId": "{_NO_RUN}"}}}}'])
            self.sink.add(t, self.fmt, line, name, "hard_delete", t)
            t += 1
        self.state.clear()
        return t


_OP_TABLES: dict[str, tuple[list[str], list[float]]] = {}
# Aspects an ingestion run writes, and so may observe again unchanged.
_REOBSERVED = frozenset({"schemaMetadata", "datasetProperties", "subTypes", "chartInfo", "dashboardInfo",
                         "dataFlowInfo", "dataJobInfo", "dataJobInputOutput", "glossaryTermInfo"})


class _Simulator:
    """Plays one entity's life: creation by ingestion, then edits by people and ingestion runs."""

    # Mean number of edits after creation, per entity type.
    EDITS = {"dataset": 16.0, "chart": 7.0, "dashboard": 6.0, "dataFlow": 5.0, "dataJob": 6.0,
             "glossaryTerm": 5.0, "corpuser": 1.5, "corpGroup": 1.5, "tag": 0.8, "domain": 0.8}
    COMMON_OPS = {
        "tag_add": 4.0, "tag_remove": 2.5, "tags_noop": 0.8,
        "term_add": 3.0, "term_remove": 1.8, "terms_noop": 0.4,
        "domain_set": 3.0, "domain_clear": 0.7, "domains_noop": 0.3,
        "owner_add": 3.0, "owner_remove": 1.8, "owner_type_change": 2.0, "ownership_noop": 1.2,
        "structured_property_add": 2.5, "structured_property_modify": 2.0, "structured_property_remove": 1.2,
        "structured_properties_noop": 0.5,
        "deprecation_toggle": 1.6, "deprecation_note": 0.4,
        "soft_delete": 0.7, "status_noop": 0.3,
        "info_modify": 1.0, "info_noop": 0.8, "reobserve": 1.0,
    }
    DATASET_OPS = {
        "schema_field_add": 5.0, "schema_field_remove": 2.5, "schema_field_retype": 3.5, "schema_field_rename": 1.2,
        "schema_field_doc": 2.5, "schema_field_tag": 1.5, "schema_field_term": 1.0, "schema_noop": 4.0,
        "properties_description": 2.5, "properties_description_empty": 0.6, "properties_custom": 1.5,
        "properties_noop": 2.5,
        "editable_description": 3.5, "editable_description_empty": 0.8, "editable_noop": 0.6,
        "field_doc": 3.0, "field_tag": 3.0, "field_term": 2.5, "reobserve": 2.0,
    }
    REFERENCE_OPS = {
        "corpuser": {"info_modify": 2.0, "membership_change": 2.0, "status_noop": 0.3, "soft_delete": 0.2},
        "corpGroup": {"owner_add": 1.5, "owner_remove": 0.8, "info_modify": 1.0},
        "tag": {"owner_add": 1.0, "info_modify": 1.5},
        "domain": {"owner_add": 1.0, "info_modify": 1.5, "owner_type_change": 0.5},
    }

    def __init__(self, u: _Universe, index: int, sink: _Sink, options: _Options):
        self.u = u
        self.index = index
        self.rng = random.Random(f"{u.seed}/entity/{index}")
        rng = self.rng
        self.entity_type = u.type_of(index)
        self.urn = u.urn(index)
        self.parts = u.dataset_parts(index) if self.entity_type == "dataset" else ("", "", "")
        fmt = _FMT_MCL
        if self.entity_type in ASSET_TYPES:
            draw = rng.random()
            if draw < options.mcp_share:
                fmt = _FMT_MCP
            elif draw < options.mcp_share + options.file_sink_share:
                fmt = _FMT_FILE_SINK
        self.w = _EntityWriter(self.entity_type, self.urn, fmt, sink, rng, options)
        self.options = options
        self.removed = False
        self.tags: list[str] = []
        self.terms: list[tuple[str, str]] = []
        self.domains: list[str] = []
        self.owners: list[list[str]] = []
        self.properties: list[list[Any]] = []
        self.deprecated: dict[str, Any] | None = None
        ops = _OP_TABLES.get(self.entity_type)
        if ops is None:
            ops = _OP_TABLES[self.entity_type] = self._op_table()
        self.ops = ops

    # -- helpers -------------------------------------------------------------------------------

    def _op_table(self) -> tuple[list[str], list[float]]:
        t = self.entity_type
        if t in self.REFERENCE_OPS:
            table = dict(self.REFERENCE_OPS[t])
        else:
            table = dict(self.COMMON_OPS)
            if t == "dataset":
                table.update(self.DATASET_OPS)
            if t == "glossaryTerm":
                for name in ("term_add", "term_remove", "terms_noop"):
                    table.pop(name)
        names = list(table)
        cum, total = [], 0.0
        for name in names:
            total += table[name]
            cum.append(total)
        return names, cum

    def _ingest_source(self) -> str:
        t = self.entity_type
        if t == "dataset":
            return self.parts[0]
        if t in ("chart", "dashboard"):
            return self.urn.split("(", 1)[1].split(",", 1)[0]
        if t in ("dataFlow", "dataJob"):
            return self.urn.split("(", 1)[1].split(",", 1)[0].replace("urn:li:dataFlow:(", "")
        if t == "glossaryTerm":
            return "glossary"
        if t in ("corpuser", "corpGroup"):
            return "okta"
        return ""

    def run(self) -> None:
        """Write the whole history of this entity into the sink."""
        u, rng = self.u, self.rng
        span = u.end_ms - u.start_ms
        if self.entity_type in REFERENCE_TYPES:
            created = u.start_ms + int(span * 0.02 * rng.random())
        else:
            created = u.start_ms + int(span * 0.95 * rng.random() ** 1.3)
        t = self.create(created)
        edits = min(int(rng.expovariate(1.0 / self.EDITS[self.entity_type])), 400)
        times = sorted(t + 60_000 + int(max(0, u.end_ms - t - 120_000) * rng.random()) for _ in range(edits))
        names, cum = self.ops
        for when in times:
            t = max(when, t + 1)
            if self.removed and rng.random() < 0.5:
                t = self.op_restore(t)
                continue
            op = names[bisect.bisect(cum, rng.random() * cum[-1])]
            t = getattr(self, "op_" + op)(t)
        if (self.entity_type in ASSET_TYPES and self.w.fmt != _FMT_FILE_SINK
                and rng.random() < self.options.hard_delete_share and t + 120_000 < u.end_ms):
            when = t + 60_000 + int((u.end_ms - t - 120_000) * rng.random())
            self.w.hard_delete(when, u.actor(rng))

    def _user_write(self, aspect: str, value: str, t: int, op: str, actor: str | None = None) -> int:
        self.w.upsert(aspect, value, t, actor or self.u.actor(self.rng), _NO_RUN, op)
        return t + 1

    # -- creation ------------------------------------------------------------------------------

    def create(self, t: int) -> int:
        """Write the first versions an ingestion run (or the UI, for tags and domains) writes."""
        rng, u, et = self.rng, self.u, self.entity_type
        source = self._ingest_source()
        run = _run_id(rng, source, t) if source else _NO_RUN
        actor = _INGEST_ACTOR if source else u.actor(rng)
        w = self.w
        writes: list[tuple[str, str]] = [(KEY_ASPECTS[et], self._key_value())]
        if et == "dataset":
            self._init_schema()
            self.props_created = t
            self.props_rev = 1
            self.props_description: str | None = self._dataset_description(1)
            self.custom = {"owner_team": rng.choice(("analytics", "data-eng", "finance", "growth")),
                           "retention_days": rng.choice(("30", "90", "365", "730"))}
            self.schema_version = 0
            self.schema_created = t + 2
            self.editable_description: str | None = None
            self.editable_created: int | None = None
            self.editable_fields: dict[str, list[Any]] = {}
            self.editable_fields_created: int | None = None
            writes += [("datasetProperties", self._dataset_properties(t + 1)),
                       ("schemaMetadata", self._schema_metadata(t + 2)),
                       ("subTypes", _dumps({"typeNames": [rng.choice(("Table", "Table", "View"))]}))]
        elif et in ("chart", "dashboard", "dataFlow", "dataJob", "glossaryTerm", "corpuser", "corpGroup", "tag",
                    "domain"):
            self.info_rev = 1
            writes.append(self._info(t + 1, actor))
            if et == "dataJob":
                writes.append(("dataJobInputOutput", self._job_io()))
            if et == "corpuser":
                self.groups = [u.groups[int(len(u.groups) * rng.random())]]
                writes.append(("groupMembership", _dumps({"groups": self.groups})))
        if et != "domain":
            writes.append(("status", '{"removed": false}'))
        if et not in ("corpuser", "tag"):
            self.owners = [[self._owner_urn(), *_OWNER_TYPES[0]]]
            writes.append(("ownership", self._ownership(t + len(writes), actor)))
        for k, (aspect, value) in enumerate(writes):
            w.upsert(aspect, value, t + k, actor, run, "create")
        return t + len(writes)

    def _key_value(self) -> str:
        et, urn = self.entity_type, self.urn
        if et == "dataset":
            platform, name, env = self.parts
            return _dumps({"platform": f"urn:li:dataPlatform:{platform}", "name": name, "origin": env})
        inner = urn.split(":", 3)[3]
        if et in ("chart", "dashboard"):
            tool, ident = inner[1:-1].split(",", 1)
            return _dumps({"dashboardTool": tool, ("chartId" if et == "chart" else "dashboardId"): ident})
        if et == "dataFlow":
            orchestrator, flow_id, cluster = inner[1:-1].split(",")
            return _dumps({"orchestrator": orchestrator, "flowId": flow_id, "cluster": cluster})
        if et == "dataJob":
            flow, job_id = inner[1:-1].rsplit(",", 1)
            return _dumps({"flow": flow, "jobId": job_id})
        return _dumps({{"corpuser": "username", "corpGroup": "name", "tag": "name", "domain": "id",
                        "glossaryTerm": "name"}[et]: inner})

    def _info(self, t: int, actor: str) -> tuple[str, str]:
        et, rng, u = self.entity_type, self.rng, self.u
        rev = self.info_rev
        if not hasattr(self, "info_created"):
            self.info_created = (t, actor)
        created_at, created_by = self.info_created
        inner = self.urn.split(":", 3)[3]
        suffix = "" if rev == 1 else f" (rev {rev})"
        if et in ("chart", "dashboard"):
            title = inner[1:-1].split(",", 1)[1].replace("_", " ").title()
            modified = {"created": _stamp(created_at, created_by), "lastModified": _stamp(t, actor)}
            if et == "chart":
                value = {"customProperties": {}, "title": title, "description": f"{title} tile{suffix}",
                         "lastModified": modified}
                return "chartInfo", _dumps(value)
            if not hasattr(self, "dashboard_charts"):
                self.dashboard_charts = sorted({u.urn(u.random_of(rng, "chart")) for _ in range(rng.randint(1, 6))})
            value = {"customProperties": {}, "title": title, "description": f"{title} dashboard{suffix}",
                     "charts": self.dashboard_charts, "datasets": [], "dashboards": [], "lastModified": modified}
            return "dashboardInfo", _dumps(value)
        if et == "dataFlow":
            name = inner[1:-1].split(",")[1]
            return "dataFlowInfo", _dumps({"customProperties": {"schedule": "0 2 * * *"}, "name": name,
                                           "description": f"Pipeline {name}{suffix}"})
        if et == "dataJob":
            name = inner[1:-1].rsplit(",", 1)[1]
            return "dataJobInfo", _dumps({"customProperties": {}, "name": name, "description": f"Task {name}{suffix}",
                                          "type": {"string": "COMMAND"}})
        if et == "glossaryTerm":
            return "glossaryTermInfo", _dumps({"customProperties": {}, "name": inner.rsplit(".", 1)[-1],
                                               "definition": f"Business definition of {inner}{suffix}",
                                               "termSource": "INTERNAL"})
        if et == "corpuser":
            handle = inner.split("@")[0]
            first, _, last = handle.partition(".")
            if not last:
                first, last = handle[:1], handle[1:]
            full = f"{first.title()} {last.title()}" if handle != "datahub" else "DataHub"
            return "corpUserInfo", _dumps({
                "customProperties": {}, "active": rev % 5 != 0, "displayName": full,
                "email": inner if "@" in inner else f"{inner}@acme.com",
                "title": _pick(_TITLES, u.seed, self.index + rev, "title"),
                "departmentName": _pick(_DEPARTMENTS, u.seed, self.index, "dept"), "firstName": first.title(),
                "lastName": last.title(), "fullName": full})
        if et == "corpGroup":
            members = sorted({u.users[1 + int((len(u.users) - 1) * rng.random())] for _ in range(3)})
            return "corpGroupInfo", _dumps({"displayName": inner.replace("-", " ").title(),
                                            "email": f"{inner}@acme.com", "admins": members[:1], "members": members,
                                            "groups": [], "description": f"The {inner} team{suffix}"})
        if et == "tag":
            return "tagProperties", _dumps({"name": inner, "description": f"Assets tagged {inner}{suffix}",
                                            "colorHex": _pick(_TAG_COLORS, u.seed, self.index + rev, "color")})
        return "domainProperties", _dumps({"name": inner.replace("-", " ").title(),
                                           "description": f"Everything owned by {inner}{suffix}",
                                           "created": _stamp(created_at, created_by)})

    def _job_io(self) -> str:
        u, rng = self.u, self.rng
        inputs = sorted({u.urn(u.random_of(rng, "dataset")) for _ in range(rng.randint(1, 3))})
        outputs = [u.urn(u.random_of(rng, "dataset"))]
        return _dumps({"inputDatasets": inputs, "outputDatasets": outputs, "inputDatajobs": []})

    def _owner_urn(self) -> str:
        u, rng = self.u, self.rng
        if rng.random() < 0.2:
            return u.groups[int(len(u.groups) * rng.random())]
        return u.actor(rng)

    def _ownership(self, t: int, actor: str) -> str:
        owners = [{"owner": o, "type": ty, "typeUrn": tu} for o, ty, tu in self.owners]
        return _dumps({"owners": owners, "ownerTypes": {}, "lastModified": _stamp(t, actor)})

    # -- dataset schema --------------------------------------------------------------------------

    def _init_schema(self) -> None:
        rng = self.rng
        self.platform = self.parts[0]
        natives = _NATIVE[self.platform]
        id_name = rng.choice(("id", "customer_id", "order_id", "account_id"))
        fields = [_Field(id_name, False, "id", natives["id"][0], key=True)]
        names = {id_name}
        for name, family in rng.sample(_COLUMNS, rng.randint(3, 11)):
            if name not in names:
                names.add(name)
                fields.append(_Field(name, rng.random() < 0.4, family, rng.choice(natives[family])))
        if rng.random() < 0.2:
            fields.append(_Field("address", True, "struct", natives["struct"][0]))
            for child in ("street", "city", "zip"):
                fields.append(_Field(f"address.{child}", True, "short", natives["short"][0]))
        self.fields = fields
        self.schema_hash = hashlib.sha1(self.urn.encode()).hexdigest()

    def _field_names(self) -> set[str]:
        return {f.path for f in self.fields}

    def _schema_metadata(self, t: int) -> str:
        platform, name, _ = self.parts
        return "".join([
            '{"schemaName": ', _dumps(name), f', "platform": "urn:li:dataPlatform:{platform}"',
            f', "version": {self.schema_version}',
            f', "created": {{"time": {self.schema_created}, "actor": "{_INGEST_ACTOR}"}}',
            f', "lastModified": {{"time": {t}, "actor": "{_INGEST_ACTOR}"}}',
            f', "hash": "{self.schema_hash}"',
            ', "platformSchema": {"com.linkedin.schema.OtherSchema": {"rawSchema": ""}}',
            ', "fields": [', ", ".join(f.render(self.schema_created) for f in self.fields), "]}",
        ])

    def _schema_write(self, t: int, op: str, changed: bool = True) -> int:
        if changed:
            self.schema_version += 1
        self.schema_hash = "%040x" % self.rng.getrandbits(160)
        source = self.platform
        self.w.upsert("schemaMetadata", self._schema_metadata(t), t, _INGEST_ACTOR, _run_id(self.rng, source, t), op)
        return t + 1

    def _leaf_fields(self) -> list[_Field]:
        return [f for f in self.fields if not f.key and f.family != "struct"]

    def op_schema_field_add(self, t: int) -> int:
        rng = self.rng
        present = self._field_names()
        options = [c for c in _COLUMNS if c[0] not in present]
        name, family = rng.choice(options) if options else (f"extra_col_{len(self.fields)}", "short")
        self.fields.append(_Field(name, rng.random() < 0.6, family, rng.choice(_NATIVE[self.platform][family])))
        return self._schema_write(t, "schema_field_add")

    def op_schema_field_remove(self, t: int) -> int:
        leaves = self._leaf_fields()
        if len(leaves) < 2:
            return self.op_schema_field_add(t)
        victim = self.rng.choice(leaves)
        self.fields.remove(victim)
        return self._schema_write(t, "schema_field_remove")

    def op_schema_field_retype(self, t: int) -> int:
        rng = self.rng
        natives = _NATIVE[self.platform]
        candidates = [f for f in self._leaf_fields() if f.family not in ("array", "map")]
        if not candidates:
            return self.op_schema_field_add(t)
        f = rng.choice(candidates)
        same = [n for n in natives[f.family] if n != f.native]
        if same and rng.random() < 0.7:
            f.native = rng.choice(same)
        else:
            family = _CROSS_RETYPE.get(f.family, "short")
            f.family = family
            options = [n for n in natives[family] if n != f.native] or ["VARCHAR(1024)"]
            f.native = rng.choice(options)
        f.rendered = None
        return self._schema_write(t, "schema_field_retype")

    def op_schema_field_rename(self, t: int) -> int:
        leaves = self._leaf_fields()
        if not leaves:
            return self.op_schema_field_add(t)
        f = self.rng.choice(leaves)
        new = _RENAMES.get(f.path, f"{f.path}_v2")
        if new in self._field_names():
            return self.op_schema_field_retype(t)
        f.path = new
        f.rendered = None
        return self._schema_write(t, "schema_field_rename")

    def op_schema_field_doc(self, t: int) -> int:
        rng = self.rng
        f = rng.choice(self.fields)
        if f.description is not None and rng.random() < 0.3:
            f.description = None
        else:
            f.description = rng.choice(_FIELD_DESCRIPTIONS).format(f=f.path)
            if rng.random() < 0.5:
                f.description += f" (v{self.schema_version + 1})"
        f.rendered = None
        return self._schema_write(t, "schema_field_doc")

    def op_schema_field_tag(self, t: int) -> int:
        rng = self.rng
        f = rng.choice(self.fields)
        if f.tags and rng.random() < 0.4:
            f.tags = f.tags[1:]
        else:
            tag = self.u.tags[int(len(self.u.tags) * rng.random() ** 2)]
            if tag not in f.tags:
                f.tags = f.tags + (tag,)
        f.rendered = None
        return self._schema_write(t, "schema_field_tag")

    def op_schema_field_term(self, t: int) -> int:
        rng = self.rng
        f = rng.choice(self.fields)
        if f.terms and rng.random() < 0.4:
            f.terms = ()
        else:
            term = self.u.terms[int(len(self.u.terms) * rng.random() ** 2)]
            if term not in f.terms:
                f.terms = f.terms + (term,)
        f.rendered = None
        return self._schema_write(t, "schema_field_term")

    def op_schema_noop(self, t: int) -> int:
        # A re-ingestion: new lastModified and hash, sometimes the fields in another order.
        if self.rng.random() < 0.3 and len(self.fields) > 2:
            key, rest = self.fields[:1], self.fields[1:]
            self.rng.shuffle(rest)
            self.fields = key + rest
        return self._schema_write(t, "schema_noop", changed=False)

    # -- dataset properties ----------------------------------------------------------------------

    def _dataset_description(self, rev: int) -> str:
        _, name, _ = self.parts
        entity = name.rsplit(".", 1)[1].rsplit("_", 1)[0]
        text = self.rng.choice(_DESCRIPTION_TEMPLATES).format(name=name, entity=entity)
        return text if rev == 1 else f"{text} (rev {rev})"

    def _dataset_properties(self, t: int) -> str:
        _, name, _ = self.parts
        value: dict[str, Any] = {"customProperties": dict(self.custom), "name": name.rsplit(".", 1)[1],
                                 "qualifiedName": name}
        if self.props_description is not None:
            value["description"] = self.props_description
        value["created"] = {"time": self.props_created - DAY_MS}
        value["lastModified"] = {"time": t}
        value["tags"] = []
        return _dumps(value)

    def _props_write(self, t: int, op: str) -> int:
        run = _run_id(self.rng, self.platform, t)
        self.w.upsert("datasetProperties", self._dataset_properties(t), t, _INGEST_ACTOR, run, op)
        return t + 1

    def op_properties_description(self, t: int) -> int:
        self.props_rev += 1
        self.props_description = self._dataset_description(self.props_rev)
        return self._props_write(t, "properties_description")

    def op_properties_description_empty(self, t: int) -> int:
        if self.props_description is None:
            return self.op_properties_description(t)
        self.props_description = "" if self.rng.random() < 0.5 else None
        return self._props_write(t, "properties_description_empty")

    def op_properties_custom(self, t: int) -> int:
        self.custom["retention_days"] = self.rng.choice(("30", "90", "180", "365", "730"))
        if self.rng.random() < 0.3:
            self.custom["row_count"] = str(int(self.rng.expovariate(1e-6)))
        return self._props_write(t, "properties_custom")

    def op_properties_noop(self, t: int) -> int:
        return self._props_write(t, "properties_noop")

    def _editable_write(self, t: int, op: str, actor: str | None = None) -> int:
        actor = actor or self.u.actor(self.rng)
        if self.editable_created is None:
            self.editable_created = t
            self.editable_creator = actor
        value: dict[str, Any] = {"created": _stamp(self.editable_created, self.editable_creator),
                                 "lastModified": _stamp(t, actor)}
        if self.editable_description is not None:
            value["description"] = self.editable_description
        return self._user_write("editableDatasetProperties", _dumps(value), t, op, actor)

    def op_editable_description(self, t: int) -> int:
        _, name, _ = self.parts
        self.editable_rev = getattr(self, "editable_rev", 0) + 1
        actor = self.u.actor(self.rng)
        handle = actor.rsplit(":", 1)[1].split("@")[0]
        self.editable_description = f"Curated description #{self.editable_rev} of {name} by {handle}"
        return self._editable_write(t, "editable_description", actor)

    def op_editable_description_empty(self, t: int) -> int:
        if not self.editable_description:
            return self.op_editable_description(t)
        self.editable_description = ""
        return self._editable_write(t, "editable_description_empty")

    def op_editable_noop(self, t: int) -> int:
        if self.editable_created is None:
            return self.op_editable_description(t)
        return self._editable_write(t, "editable_noop")

    def _field_info_write(self, t: int, op: str, actor: str | None = None) -> int:
        actor = actor or self.u.actor(self.rng)
        if self.editable_fields_created is None:
            self.editable_fields_created = t
            self.editable_fields_creator = actor
        infos = []
        for path, (description, tags, terms) in self.editable_fields.items():
            info: dict[str, Any] = {"fieldPath": path}
            if description is not None:
                info["description"] = description
            if tags is not None:
                info["globalTags"] = {"tags": [{"tag": x} for x in tags]}
            if terms is not None:
                info["glossaryTerms"] = {"terms": [{"urn": x, "actor": a} for x, a in terms],
                                         "auditStamp": _stamp(t, actor)}
            infos.append(info)
        value = {"created": _stamp(self.editable_fields_created, self.editable_fields_creator),
                 "lastModified": _stamp(t, actor), "editableSchemaFieldInfo": infos}
        return self._user_write("editableSchemaMetadata", _dumps(value), t, op, actor)

    def _editable_field(self) -> tuple[str, list[Any]]:
        rng = self.rng
        if self.editable_fields and rng.random() < 0.5:
            path = rng.choice(list(self.editable_fields))
        else:
            path = rng.choice(self.fields).path
        return path, self.editable_fields.setdefault(path, [None, None, None])

    def op_field_doc(self, t: int) -> int:
        rng = self.rng
        path, entry = self._editable_field()
        actor = self.u.actor(rng)
        if entry[0] and rng.random() < 0.25:
            entry[0] = ""
        else:
            entry[0] = f"{path}: documented by {actor.rsplit(':', 1)[1].split('@')[0]} v{rng.randint(1, 9)}"
        return self._field_info_write(t, "field_doc", actor)

    def op_field_tag(self, t: int) -> int:
        rng = self.rng
        _, entry = self._editable_field()
        tags = list(entry[1] or [])
        if tags and rng.random() < 0.45:
            tags.pop(int(len(tags) * rng.random()))
            op = "field_tag_remove"
        else:
            tag = self.u.tags[int(len(self.u.tags) * rng.random() ** 2)]
            if tag in tags:
                tags.remove(tag)
                op = "field_tag_remove"
            else:
                tags.append(tag)
                op = "field_tag_add"
        entry[1] = tags
        return self._field_info_write(t, op)

    def op_field_term(self, t: int) -> int:
        rng = self.rng
        _, entry = self._editable_field()
        terms = list(entry[2] or [])
        if terms and rng.random() < 0.45:
            terms.pop(int(len(terms) * rng.random()))
            op = "field_term_remove"
        else:
            term = self.u.terms[int(len(self.u.terms) * rng.random() ** 2)]
            if any(x == term for x, _ in terms):
                terms = [(x, a) for x, a in terms if x != term]
                op = "field_term_remove"
            else:
                terms.append((term, self.u.actor(rng)))
                op = "field_term_add"
        entry[2] = terms
        return self._field_info_write(t, op)

    # -- aspects every asset has -----------------------------------------------------------------

    def _tags_write(self, t: int, op: str) -> int:
        return self._user_write("globalTags", _dumps({"tags": [{"tag": x} for x in self.tags]}), t, op)

    def op_tag_add(self, t: int) -> int:
        tag = self.u.tags[int(len(self.u.tags) * self.rng.random() ** 2)]
        if tag in self.tags:
            return self.op_tag_remove(t)
        self.tags.append(tag)
        return self._tags_write(t, "tag_add")

    def op_tag_remove(self, t: int) -> int:
        if not self.tags:
            return self.op_tag_add(t)
        self.tags.pop(int(len(self.tags) * self.rng.random()))
        return self._tags_write(t, "tag_remove")

    def op_tags_noop(self, t: int) -> int:
        if "globalTags" not in self.w.state:
            return self.op_tag_add(t)
        self.rng.shuffle(self.tags)
        return self._tags_write(t, "tags_noop")

    def _terms_write(self, t: int, op: str) -> int:
        actor = self.u.actor(self.rng)
        value = {"terms": [{"urn": x, "actor": a} for x, a in self.terms], "auditStamp": _stamp(t, actor)}
        return self._user_write("glossaryTerms", _dumps(value), t, op, actor)

    def op_term_add(self, t: int) -> int:
        term = self.u.terms[int(len(self.u.terms) * self.rng.random() ** 2)]
        if any(x == term for x, _ in self.terms):
            return self.op_term_remove(t)
        self.terms.append((term, self.u.actor(self.rng)))
        return self._terms_write(t, "term_add")

    def op_term_remove(self, t: int) -> int:
        if not self.terms:
            return self.op_term_add(t)
        self.terms.pop(int(len(self.terms) * self.rng.random()))
        return self._terms_write(t, "term_remove")

    def op_terms_noop(self, t: int) -> int:
        if "glossaryTerms" not in self.w.state:
            return self.op_term_add(t)
        return self._terms_write(t, "terms_noop")

    def _domains_write(self, t: int, op: str) -> int:
        return self._user_write("domains", _dumps({"domains": self.domains}), t, op)

    def op_domain_set(self, t: int) -> int:
        u, rng = self.u, self.rng
        domain = u.domains[int(len(u.domains) * rng.random() ** 1.5)]
        if self.domains == [domain]:
            return self.op_domain_clear(t)
        op = "domain_change" if self.domains else "domain_set"
        self.domains = [domain]
        if rng.random() < 0.05 and len(u.domains) > 1:
            self.domains.append(u.domains[(u.domains.index(domain) + 1) % len(u.domains)])
        return self._domains_write(t, op)

    def op_domain_clear(self, t: int) -> int:
        if not self.domains:
            return self.op_domain_set(t)
        self.domains = []
        return self._domains_write(t, "domain_clear")

    def op_domains_noop(self, t: int) -> int:
        if "domains" not in self.w.state:
            return self.op_domain_set(t)
        self.domains.reverse()
        return self._domains_write(t, "domains_noop")

    def _ownership_write(self, t: int, op: str) -> int:
        actor = self.u.actor(self.rng)
        return self._user_write("ownership", self._ownership(t, actor), t, op, actor)

    def _owner_type(self) -> tuple[str, str]:
        return self.rng.choices(_OWNER_TYPES, weights=_OWNER_TYPE_WEIGHTS)[0]

    def op_owner_add(self, t: int) -> int:
        owner = self._owner_urn()
        if any(o[0] == owner for o in self.owners):
            return self.op_owner_type_change(t)
        self.owners.append([owner, *self._owner_type()])
        return self._ownership_write(t, "owner_add")

    def op_owner_remove(self, t: int) -> int:
        if len(self.owners) < 2:
            return self.op_owner_add(t)
        self.owners.pop(int(len(self.owners) * self.rng.random()))
        return self._ownership_write(t, "owner_remove")

    def op_owner_type_change(self, t: int) -> int:
        if not self.owners:
            return self.op_owner_add(t)
        owner = self.rng.choice(self.owners)
        new_type = self._owner_type()
        while new_type[0] == owner[1]:
            new_type = self._owner_type()
        owner[1], owner[2] = new_type
        return self._ownership_write(t, "owner_type_change")

    def op_ownership_noop(self, t: int) -> int:
        self.owners.reverse()
        return self._ownership_write(t, "ownership_noop")

    def _property_values(self, kind: str, choices: Any) -> list[dict[str, Any]]:
        rng = self.rng
        if kind == "user":
            return [{"string": self.u.actor(rng)}]
        if kind == "double":
            return [{"double": rng.choice(choices)}]
        if kind == "strings":
            return [{"string": v} for v in rng.sample(choices, rng.randint(1, 3))]
        return [{"string": rng.choice(choices)}]

    def _properties_write(self, t: int, op: str) -> int:
        actor = self.u.actor(self.rng)
        props = [{"propertyUrn": p, "values": values, "created": _stamp(created, creator),
                  "lastModified": _stamp(modified, modifier)}
                 for p, values, created, creator, modified, modifier in self.properties]
        return self._user_write("structuredProperties", _dumps({"properties": props}), t, op, actor)

    def op_structured_property_add(self, t: int) -> int:
        present = {p[0] for p in self.properties}
        options = [p for p in _STRUCTURED_PROPERTIES if p[0] not in present]
        if not options:
            return self.op_structured_property_modify(t)
        urn, kind, choices = self.rng.choice(options)
        actor = self.u.actor(self.rng)
        self.properties.append([urn, self._property_values(kind, choices), t, actor, t, actor])
        return self._properties_write(t, "structured_property_add")

    def op_structured_property_modify(self, t: int) -> int:
        if not self.properties:
            return self.op_structured_property_add(t)
        prop = self.rng.choice(self.properties)
        _, kind, choices = next(p for p in _STRUCTURED_PROPERTIES if p[0] == prop[0])
        values = self._property_values(kind, choices)
        for _ in range(4):
            if values != prop[1]:
                break
            values = self._property_values(kind, choices)
        prop[1] = values
        prop[4] = t
        prop[5] = self.u.actor(self.rng)
        return self._properties_write(t, "structured_property_modify")

    def op_structured_property_remove(self, t: int) -> int:
        if not self.properties:
            return self.op_structured_property_add(t)
        self.properties.pop(int(len(self.properties) * self.rng.random()))
        return self._properties_write(t, "structured_property_remove")

    def op_structured_properties_noop(self, t: int) -> int:
        if "structuredProperties" not in self.w.state:
            return self.op_structured_property_add(t)
        self.properties.reverse()
        return self._properties_write(t, "structured_properties_noop")

    def _deprecation_write(self, t: int, op: str, actor: str) -> int:
        return self._user_write("deprecation", _dumps(self.deprecated), t, op, actor)

    def op_deprecation_toggle(self, t: int) -> int:
        rng = self.rng
        actor = self.u.actor(rng)
        if self.deprecated and self.deprecated["deprecated"]:
            self.deprecated = {"deprecated": False, "note": "", "actor": actor}
            return self._deprecation_write(t, "undeprecate", actor)
        self.deprecated = {"deprecated": True, "decommissionTime": t + rng.randint(30, 120) * DAY_MS,
                           "note": rng.choice(_DEPRECATION_NOTES), "actor": actor}
        return self._deprecation_write(t, "deprecate", actor)

    def op_deprecation_note(self, t: int) -> int:
        if not (self.deprecated and self.deprecated["deprecated"]):
            return self.op_deprecation_toggle(t)
        actor = self.u.actor(self.rng)
        self.deprecated = dict(self.deprecated, note=self.rng.choice(_DEPRECATION_NOTES), actor=actor)
        return self._deprecation_write(t, "deprecation_note", actor)

    def op_soft_delete(self, t: int) -> int:
        if self.removed or "status" not in self.w.state:
            return self.op_status_noop(t)
        self.removed = True
        return self._user_write("status", '{"removed": true}', t, "soft_delete")

    def op_restore(self, t: int) -> int:
        self.removed = False
        return self._user_write("status", '{"removed": false}', t, "restore")

    def op_status_noop(self, t: int) -> int:
        if "status" not in self.w.state:
            return self.op_info_noop(t)
        value = '{"removed": true}' if self.removed else '{"removed": false}'
        return self._user_write("status", value, t, "status_noop")

    def _info_write(self, t: int, op: str) -> int:
        source = self._ingest_source()
        if source:
            run, actor = _run_id(self.rng, source, t), _INGEST_ACTOR
        else:
            run, actor = _NO_RUN, self.u.actor(self.rng)
        aspect, value = self._info(t, actor)
        self.w.upsert(aspect, value, t, actor, run, op)
        return t + 1

    def op_info_modify(self, t: int) -> int:
        if self.entity_type == "dataset":
            return self.op_properties_description(t)
        self.info_rev += 1
        return self._info_write(t, "info_modify")

    def op_info_noop(self, t: int) -> int:
        if self.entity_type == "dataset":
            return self.op_properties_noop(t)
        return self._info_write(t, "info_noop")

    def op_reobserve(self, t: int) -> int:
        # Ingestion re-ran and saw the same metadata: same version, new lastObserved and runId.
        source = self._ingest_source()
        written = [a for a in self.w.state if a in _REOBSERVED]
        if not source or not written:
            return self.op_info_noop(t)
        self.w.reobserve(self.rng.choice(written), t, _INGEST_ACTOR, _run_id(self.rng, source, t))
        return t + 1

    def op_membership_change(self, t: int) -> int:
        u, rng = self.u, self.rng
        group = u.groups[int(len(u.groups) * rng.random())]
        if group in self.groups and len(self.groups) > 1:
            self.groups.remove(group)
        elif group not in self.groups:
            self.groups.append(group)
        w = self.w
        w.upsert("groupMembership", _dumps({"groups": self.groups}), t, _INGEST_ACTOR, _run_id(rng, "okta", t),
                 "membership_change")
        return t + 1


# ---------------------------------------------------------------------------------------------
# Malformed copies
# ---------------------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _corrupt(line: str, kind: str, rng: random.Random) -> str:
    """Return a broken copy of a good JSON line."""
    if kind == "malformed_json":
        return line[: max(1, int(len(line) * (0.2 + 0.6 * rng.random())))]
    doc = json.loads(line)
    if kind == "missing_entity_urn":
        doc.pop("entityUrn")
    elif kind == "missing_aspect_name":
        doc.pop("aspectName")
    elif kind == "missing_change_type":
        doc.pop("changeType")
    elif kind == "bad_urn":
        urn = doc["entityUrn"]
        doc["entityUrn"] = rng.choice((urn.replace("urn:li:", "", 1), "urn:li:" + doc["entityType"],
                                       urn.replace("urn:li:", "urn::", 1), "urn:li:"))
    elif kind == "aspect_not_json":
        value = doc["aspect"]["value"]
        doc["aspect"]["value"] = rng.choice((value[: len(value) // 2], "N/A", "{'removed': False}"))
    elif kind == "iso_time":
        if "created" in doc:
            doc["created"]["time"] = _iso(doc["created"]["time"])
        else:
            doc["systemMetadata"]["lastObserved"] = _iso(doc["systemMetadata"]["lastObserved"])
    elif kind == "missing_actor":
        doc.pop("actorUrn")
    elif kind == "missing_type":
        doc.pop("type")
    elif kind == "missing_timestamp":
        doc.pop("timestamp")
    elif kind == "unknown_type":
        doc["type"] = rng.choice(_UNKNOWN_USAGE_TYPES)
    elif kind == "iso_time_usage":
        doc["timestamp"] = _iso(doc["timestamp"])
    else:
        raise InputError(f"kind: {kind!r} is not a malformed line kind")
    return json.dumps(doc)


def _malformed_count(share: float, lines: int) -> int:
    if share <= 0 or lines == 0:
        return 0
    return max(1, round(share * lines))


def _with_malformed(lines: list[str], share: float, kinds: Sequence[tuple[str, str, str]], rng: random.Random,
                    needs_aspect: bool) -> tuple[list[str], list[MalformedLine]]:
    """Insert broken copies of some lines at random places; return all lines and the broken ones' entries."""
    count = _malformed_count(share, len(lines))
    if count == 0:
        return lines, []
    offset = int(len(kinds) * rng.random())
    inserts: list[tuple[int, int, str, str, str]] = []
    for k in range(count):
        kind, fld, reason = kinds[(offset + k) % len(kinds)]
        source = int(len(lines) * rng.random())
        if needs_aspect and kind in ("aspect_not_json",):
            for step in range(len(lines)):
                candidate = lines[(source + step) % len(lines)]
                if '"aspect": {"value": ' in candidate:
                    source = (source + step) % len(lines)
                    break
            else:
                kind, fld, reason = kinds[1]
        corrupt_kind = "iso_time_usage" if (kind == "iso_time" and fld == "timestamp") else kind
        broken = _corrupt(lines[source], corrupt_kind, rng)
        inserts.append((int((len(lines) + 1) * rng.random()), k, broken, fld, reason))
    inserts.sort()
    out: list[str] = []
    entries: list[MalformedLine] = []
    position = 0
    for at, _, broken, fld, reason in inserts:
        out.extend(lines[position:at])
        position = at
        out.append(broken)
        entries.append(MalformedLine(len(out), fld, reason))
    out.extend(lines[position:])
    return out, entries


# ---------------------------------------------------------------------------------------------
# Writing files
# ---------------------------------------------------------------------------------------------


def _write_lines(path: Path, lines: Sequence[str], gzip: bool, head: str = "", separator: str = "\n",
                 tail: str = "\n") -> int:
    """Write `head`, the lines joined by `separator`, then `tail` (none when there are no lines); return the size.

    Written in slices, so a part never exists twice in memory. Gzip output is byte-stable (no name, mtime 0).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw:
        binary: Any = raw
        if gzip:
            binary = gzip_module.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
        with io.TextIOWrapper(binary, encoding="utf-8", newline="\n", write_through=False) as out:
            if lines or head:
                out.write(head)
            for start in range(0, len(lines), 4096):
                if start:
                    out.write(separator)
                out.write(separator.join(lines[start:start + 4096]))
            if lines:
                out.write(tail)
    return path.stat().st_size


def _relative(kind: str, batch: int, batches: int, part: int, suffix: str, gzip: bool) -> str:
    folder = kind if batches == 1 else f"batch-{batch:05d}/{kind}"
    return f"{folder}/part-{part:05d}{suffix}{'.gz' if gzip else ''}"


@dataclass(frozen=True)
class _PartTask:
    part: int
    first: int
    last: int
    out_dir: str
    batches: int
    malformed_share: float
    gzip: bool
    kind: str  # "aspects" or "action_requests"


_WORKER_UNIVERSE: _Universe | None = None
_WORKER_OPTIONS: _Options | None = None


def _init_worker(universe: _Universe, options: _Options) -> None:
    global _WORKER_UNIVERSE, _WORKER_OPTIONS
    _WORKER_UNIVERSE = universe
    _WORKER_OPTIONS = options


def _split_batches(records: list[list[Any]], batches: int) -> list[list[list[Any]]]:
    n = len(records)
    return [records[n * b // batches: n * (b + 1) // batches] for b in range(batches)]


def _aspect_file(records: list[list[Any]], fmt: int, path: str, kind: str, batch: int, task: _PartTask,
                 rng: random.Random) -> GeneratedFile:
    """Write one file of aspect (or action request) records and return its manifest entry."""
    aspects: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    for r in records:
        aspects[r[4]] += 1
        ops[r[5]] += 1
    times = [r[6] for r in records]
    malformed: list[MalformedLine] = []
    target = Path(task.out_dir) / path
    if fmt == _FMT_FILE_SINK:
        # DataHub's file sink: a JSON array, one indented object per record.
        if records:
            size = _write_lines(target, [json.dumps(r[3], indent=4) for r in records], task.gzip, head="[\n",
                                separator=",\n", tail="\n]")
        else:
            size = _write_lines(target, ["[]"], task.gzip, tail="")
        lines_count = len(records)
    else:
        lines = [r[3] for r in records]
        kinds = MCP_MALFORMED_KINDS if fmt == _FMT_MCP else MCL_MALFORMED_KINDS
        lines, malformed = _with_malformed(lines, task.malformed_share, kinds, rng, needs_aspect=True)
        size = _write_lines(target, lines, task.gzip)
        lines_count = len(lines)
    is_requests = kind == "action_requests"
    return GeneratedFile(
        path=path, kind=kind, format=_FORMAT_NAMES[fmt], batch=batch, lines=lines_count,
        records=lines_count - len(malformed), malformed=tuple(malformed),
        aspect_versions=0 if is_requests else len(records),
        action_requests=ops.get("request_created", 0) if is_requests else 0,
        duplicates=ops.get("duplicate", 0), out_of_order=ops.get("out_of_order", 0),
        deletes=ops.get("hard_delete", 0), first_time_ms=min(times) if times else None,
        last_time_ms=max(times) if times else None, aspects=dict(aspects), operations=dict(ops), bytes=size,
    )


def _write_records(sink: _Sink, task: _PartTask, rng: random.Random) -> list[GeneratedFile]:
    records = sink.records
    records.sort(key=lambda r: (r[0], r[1]))
    files: list[GeneratedFile] = []
    for fmt in (_FMT_MCL, _FMT_MCP, _FMT_FILE_SINK):
        of_format = [r for r in records if r[2] == fmt]
        if not of_format:
            continue
        for batch, chunk in enumerate(_split_batches(of_format, task.batches)):
            path = _relative(task.kind, batch, task.batches, task.part, _FORMAT_SUFFIX[fmt], task.gzip)
            files.append(_aspect_file(chunk, fmt, path, task.kind, batch, task, rng))
    return files


@contextlib.contextmanager
def _without_gc() -> Iterator[None]:
    """Pause the cycle collector: a part allocates millions of small acyclic objects, and the collector's
    repeated scans of them cost about a seventh of the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _aspect_part(task: _PartTask) -> list[GeneratedFile]:
    """Generate and write the histories of entities [first, last) of the universe."""
    universe, options = _WORKER_UNIVERSE, _WORKER_OPTIONS
    assert universe is not None and options is not None
    with _without_gc():
        sink = _Sink()
        for index in range(task.first, task.last):
            _Simulator(universe, index, sink, options).run()
        return _write_records(sink, task, random.Random(f"{universe.seed}/malformed/aspects/{task.part}"))


def _run_parts(function: Any, tasks: list[Any], workers: int, initargs: tuple[Any, ...]) -> list[Any]:
    """Run tasks in order; in worker processes when there is more than one task and worker."""
    if workers <= 1 or len(tasks) <= 1:
        _init_worker(*initargs)
        return [function(task) for task in tasks]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                             initializer=_init_worker, initargs=initargs) as pool:
        return list(pool.map(function, tasks))


# ---------------------------------------------------------------------------------------------
# Action requests
# ---------------------------------------------------------------------------------------------


def _action_request_part(task: _PartTask) -> list[GeneratedFile]:
    """Generate and write action requests [first, last): actionRequestInfo and actionRequestStatus versions."""
    with _without_gc():
        return _action_requests(task)


def _action_requests(task: _PartTask) -> list[GeneratedFile]:
    u, options = _WORKER_UNIVERSE, _WORKER_OPTIONS
    assert u is not None and options is not None
    sink = _Sink()
    span = u.end_ms - u.start_ms
    for number in range(task.first, task.last):
        rng = random.Random(f"{u.seed}/request/{number}")
        request_type = ACTION_REQUEST_TYPES[number % len(ACTION_REQUEST_TYPES)] if number < len(
            ACTION_REQUEST_TYPES) else rng.choice(ACTION_REQUEST_TYPES)
        ident = "%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                                0x8000 | rng.getrandbits(14), rng.getrandbits(48))
        urn = f"urn:li:actionRequest:{ident}"
        writer = _EntityWriter("actionRequest", urn, _FMT_MCL, sink, rng, options)
        t = u.start_ms + int(span * 0.97 * rng.random())
        creator = u.actor(rng)
        info = _request_info(u, rng, request_type, t, creator)
        writer.upsert("actionRequestInfo", _dumps(info), t, creator, _NO_RUN, "request_created")
        writer.upsert("actionRequestStatus", _dumps({"status": "PENDING", "lastModified": _stamp(t + 1, creator)}),
                      t + 1, creator, _NO_RUN, "request_status")
        later = t + 60_000 + int((u.end_ms - t) * 0.5 * rng.random())
        if rng.random() < 0.25:
            # Reassigned (or the proposal edited): a second actionRequestInfo version.
            info["assignedUsers"] = [u.actor(rng)]
            if request_type == "UPDATE_DESCRIPTION":
                info["params"]["updateDescriptionProposal"]["description"] += " (edited)"
            writer.upsert("actionRequestInfo", _dumps(info), later, creator, _NO_RUN, "request_updated")
            later += 60_000
        if rng.random() < 0.7:
            reviewer = u.actor(rng)
            status = {"status": "COMPLETED", "result": rng.choice(("ACCEPTED", "ACCEPTED", "REJECTED")),
                      "lastModified": _stamp(later, reviewer)}
            if rng.random() < 0.3:
                status["note"] = rng.choice(("Looks right", "Please use the curated term instead", "Duplicate"))
            writer.upsert("actionRequestStatus", _dumps(status), later, reviewer, _NO_RUN, "request_status")
    return _write_records(sink, task, random.Random(f"{u.seed}/malformed/action_requests/{task.part}"))


def _request_info(u: _Universe, rng: random.Random, request_type: str, t: int, creator: str) -> dict[str, Any]:
    if request_type == "CREATE_GLOSSARY_TERM":
        node = rng.choice(_TERM_NODES)
        name = rng.choice(("Churn Rate", "Net Revenue", "Active Customer", "Lifetime Value", "Shipping Address",
                           "Data Owner", "Gross Margin"))
        params = {"createGlossaryTermProposal": {"name": name, "parentNode": f"urn:li:glossaryNode:{node}",
                                                 "description": f"{name} as used by {node.lower()} reporting"}}
        info: dict[str, Any] = {"type": request_type, "assignedUsers": [], "assignedGroups": [],
                                "resourceType": "glossaryTerm", "params": params, "created": t, "createdBy": creator}
        return info
    resource_index = u.random_of(rng, "dataset") if rng.random() < 0.7 else u.random_asset(rng)
    resource = u.urn(resource_index)
    if request_type == "TAG_ASSOCIATION":
        params: dict[str, Any] = {"tagProposal": {"tag": rng.choice(u.tags)}}
    elif request_type == "TERM_ASSOCIATION":
        params = {"glossaryTermProposal": {"glossaryTerm": rng.choice(u.terms)}}
    elif request_type == "DOMAIN_ASSOCIATION":
        params = {"domainProposal": {"domains": [rng.choice(u.domains)]}}
    elif request_type == "OWNER_ASSOCIATION":
        owner_type, type_urn = rng.choices(_OWNER_TYPES, weights=_OWNER_TYPE_WEIGHTS)[0]
        params = {"ownerProposal": {"owners": [{"owner": u.actor(rng), "type": owner_type, "typeUrn": type_urn}]}}
    elif request_type == "UPDATE_DESCRIPTION":
        params = {"updateDescriptionProposal": {"description": rng.choice((
            "Orders placed through the web shop, one row per order line",
            "Customer master data; PII columns are masked outside finance",
            "Aggregated daily revenue in EUR (\u20ac), restated monthly"))}}
    else:
        urn, kind, choices = rng.choice([p for p in _STRUCTURED_PROPERTIES if p[1] != "user"])
        values = ([{"double": rng.choice(choices)}] if kind == "double"
                  else [{"string": v} for v in rng.sample(choices, 1 if kind == "string" else 2)])
        params = {"structuredPropertyProposal": {"structuredPropertyValues": [{"propertyUrn": urn, "values": values}]}}
    return {"type": request_type, "assignedUsers": [], "assignedGroups": [rng.choice(u.groups)],
            "resourceType": u.type_of(resource_index), "resource": resource, "params": params,
            "created": t, "createdBy": creator}


# ---------------------------------------------------------------------------------------------
# Usage events
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _UsageTask:
    part: int
    batch: int
    events: int
    start_ms: int
    end_ms: int
    path: str
    out_dir: str
    malformed_share: float
    gzip: bool
    seed: int


@dataclass(frozen=True)
class _UsageContext:
    actors: tuple[str, ...]
    entity_urns: tuple[str, ...]
    entity_types: tuple[str, ...]


def _ipv4(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.6:
        return f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.7:
        return f"172.{rng.randint(16, 31)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    return f"{rng.choice((34, 52, 81, 91, 185, 203))}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _ipv6(rng: random.Random) -> str:
    prefix = rng.choice(("2001:db8", "2a02:1210", "2600:1f18", "fd12:3456"))
    return prefix + ":" + ":".join(f"{rng.getrandbits(16):x}" for _ in range(6))


class _ActorProfile:
    __slots__ = ("ips", "browsers", "is_service")

    def __init__(self, seed: int, actor: str):
        rng = random.Random(f"{seed}/actor/{actor}")
        self.is_service = actor.endswith(":datahub") or "svc" in actor
        self.ips = [_ipv6(rng) if rng.random() < 0.2 else _ipv4(rng) for _ in range(rng.randint(1, 3))]
        self.browsers = [rng.choice(_USER_AGENTS) for _ in range(rng.randint(1, 2))]


def _usage_part(task: _UsageTask) -> list[GeneratedFile]:
    """Generate and write one time slice of usage events."""
    with _without_gc():
        return _usage_events(task)


def _usage_events(task: _UsageTask) -> list[GeneratedFile]:
    context = _WORKER_CONTEXT
    assert context is not None
    rng = random.Random(f"{task.seed}/usage/{task.part}")
    actors = context.actors
    profiles: dict[str, _ActorProfile] = {}
    types = list(_USAGE_WEIGHTS)
    cum: list[float] = []
    total = 0.0
    for name in types:
        total += _USAGE_WEIGHTS[name]
        cum.append(total)
    # Every type occurs in a usage file big enough to hold them all, at random places.
    forced: dict[int, str] = {}
    if task.events >= 4 * len(USAGE_EVENT_TYPES):
        forced = dict(zip(rng.sample(range(task.events), len(USAGE_EVENT_TYPES)), USAGE_EVENT_TYPES))
    times = sorted(_office_hours_time(rng, task.start_ms, task.end_ms) for _ in range(task.events))
    tokens: list[str] = []
    policies: list[str] = []
    sources: list[str] = []
    lines: list[str] = []
    counts: Counter[str] = Counter()
    for n, t in enumerate(times):
        event_type = forced.get(n) or types[bisect.bisect(cum, rng.random() * total)]
        actor = actors[int(len(actors) * rng.random() ** 2)]
        profile = profiles.get(actor)
        if profile is None:
            profile = profiles[actor] = _ActorProfile(task.seed, actor)
        if profile.is_service and event_type in _PERSON_EVENTS and len(actors) > 1:
            actor = actors[1 + int((len(actors) - 1) * rng.random() ** 2)]
            profile = profiles.get(actor)
            if profile is None:
                profile = profiles[actor] = _ActorProfile(task.seed, actor)
        doc: dict[str, Any] = {"type": event_type, "actorUrn": actor, "timestamp": t}
        source = "GRAPHQL"
        if event_type in ("EntityEvent", "UpdateAspectEvent", "DeleteEntityEvent"):
            k = int(len(context.entity_urns) * rng.random())
            doc["entityUrn"] = context.entity_urns[k]
            doc["entityType"] = context.entity_types[k]
            if event_type == "EntityEvent":
                doc["aspectName"] = rng.choice(_ENTITY_VIEW_ASPECTS)
            elif event_type == "UpdateAspectEvent":
                doc["aspectName"] = rng.choice(_UPDATE_ASPECTS)
                source = rng.choice(("GRAPHQL", "GRAPHQL", "RESTLI", "OPENAPI"))
            else:
                doc["aspectName"] = KEY_ASPECTS.get(context.entity_types[k], "status")
                source = rng.choice(("GRAPHQL", "RESTLI", "OPENAPI"))
        elif event_type in ("CreateUserEvent", "UpdateUserEvent"):
            doc["entityUrn"] = actors[int(len(actors) * rng.random())]
            doc["entityType"] = "corpuser"
            doc["aspectName"] = "corpUserInfo" if event_type == "CreateUserEvent" else rng.choice(
                ("corpUserInfo", "corpUserEditableInfo", "corpUserStatus"))
            source = "SSO_SCIM" if rng.random() < 0.6 else "GRAPHQL"
        elif event_type in ("CreateAccessTokenEvent", "RevokeAccessTokenEvent"):
            if event_type == "CreateAccessTokenEvent" or not tokens:
                tokens.append(f"urn:li:dataHubAccessToken:{rng.getrandbits(128):032x}")
            doc["entityUrn"] = tokens[-1] if event_type == "CreateAccessTokenEvent" else tokens.pop(
                int(len(tokens) * rng.random()))
            doc["entityType"] = "dataHubAccessToken"
            doc["aspectName"] = "dataHubAccessTokenInfo"
        elif event_type in ("CreatePolicyEvent", "UpdatePolicyEvent", "DeletePolicyEvent"):
            if event_type == "CreatePolicyEvent" or not policies:
                policies.append(f"urn:li:dataHubPolicy:{_uuid(rng)}")
            if event_type == "CreatePolicyEvent":
                doc["entityUrn"] = policies[-1]
            elif event_type == "DeletePolicyEvent":
                doc["entityUrn"] = policies.pop(int(len(policies) * rng.random()))
            else:
                doc["entityUrn"] = policies[int(len(policies) * rng.random())]
            doc["entityType"] = "dataHubPolicy"
            doc["aspectName"] = "dataHubPolicyInfo"
            source = rng.choice(("GRAPHQL", "OPENAPI"))
        elif event_type in ("CreateIngestionSourceEvent", "UpdateIngestionSourceEvent"):
            if event_type == "CreateIngestionSourceEvent" or not sources:
                sources.append(f"urn:li:dataHubIngestionSource:{_uuid(rng)}")
            doc["entityUrn"] = sources[-1] if event_type == "CreateIngestionSourceEvent" else sources[
                int(len(sources) * rng.random())]
            doc["entityType"] = "dataHubIngestionSource"
            doc["aspectName"] = "dataHubIngestionSourceInfo"
        elif event_type in ("LogInEvent", "FailedLogInEvent"):
            source = "GRAPHQL" if rng.random() < 0.8 else "RESTLI"
        api_client = profile.is_service or source in ("RESTLI", "OPENAPI") or source == "SSO_SCIM"
        doc["eventSource"] = source
        doc["sourceIP"] = rng.choice(profile.ips)
        doc["userAgent"] = (_API_AGENTS[5] if source == "SSO_SCIM" else rng.choice(_API_AGENTS[:5])) if api_client \
            else rng.choice(profile.browsers)
        if rng.random() < 0.92:
            doc["traceId"] = f"{rng.getrandbits(128):032x}"
        if event_type in ("LogInEvent", "FailedLogInEvent"):
            login = rng.choices(_LOGIN_SOURCES, weights=_LOGIN_WEIGHTS)[0]
            # Older DataHub frontends send the camelCase spelling.
            doc["loginSource"] = _camel(login) if rng.random() < 0.4 else login
            if event_type == "FailedLogInEvent":
                doc["loginDenialReason"] = rng.choice(_DENIAL_REASONS)
        doc["usageSource"] = "backend"
        counts[event_type] += 1
        lines.append(json.dumps(doc))
    lines, malformed = _with_malformed(lines, task.malformed_share, USAGE_MALFORMED_KINDS, rng, needs_aspect=False)
    size = _write_lines(Path(task.out_dir) / task.path, lines, task.gzip)
    return [GeneratedFile(path=task.path, kind="usage", format="usage", batch=task.batch, lines=len(lines),
                          records=len(lines) - len(malformed), malformed=tuple(malformed), usage_events=task.events,
                          first_time_ms=times[0] if times else None, last_time_ms=times[-1] if times else None,
                          event_types=dict(counts), bytes=size)]


_WORKER_CONTEXT: _UsageContext | None = None


def _init_usage_worker(context: _UsageContext) -> None:
    global _WORKER_CONTEXT
    _WORKER_CONTEXT = context


def _office_hours_time(rng: random.Random, start_ms: int, end_ms: int) -> int:
    """A time in [start_ms, end_ms), busier in office hours (peak 13:30 UTC, a little traffic at night)."""
    span = end_ms - start_ms
    for _ in range(64):
        t = start_ms + int(span * rng.random())
        hour = (t % DAY_MS) / 3_600_000
        if rng.random() * 1.12 < 0.12 + math.exp(-(((hour - 13.5) / 3.5) ** 2) / 2):
            return t
    return t


def _camel(upper: str) -> str:
    head, *rest = upper.lower().split("_")
    return head + "".join(w.title() for w in rest)


def _uuid(rng: random.Random) -> str:
    return "%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                           0x8000 | rng.getrandbits(14), rng.getrandbits(48))


def _usage_tasks(out_dir: Path, events: int, seed: int, start_ms: int, end_ms: int, batches: int, part_size: int,
                 malformed_share: float, gzip: bool) -> list[_UsageTask]:
    """Split the events into time slices: equal counts per batch, at most `part_size` per file."""
    tasks: list[_UsageTask] = []
    span = end_ms - start_ms
    part = 0
    for batch in range(batches):
        batch_events = events * (batch + 1) // batches - events * batch // batches
        b_start = start_ms + span * batch // batches
        b_end = start_ms + span * (batch + 1) // batches
        parts = max(1, math.ceil(batch_events / part_size))
        for k in range(parts):
            n = batch_events * (k + 1) // parts - batch_events * k // parts
            p_start = b_start + (b_end - b_start) * k // parts
            p_end = b_start + (b_end - b_start) * (k + 1) // parts
            path = _relative("usage", batch, batches, part, ".jsonl", gzip)
            tasks.append(_UsageTask(part, batch, n, p_start, max(p_end, p_start + 1), path, str(out_dir),
                                    malformed_share, gzip, seed))
            part += 1
    return tasks


def _run_usage(tasks: list[_UsageTask], context: _UsageContext, workers: int) -> list[GeneratedFile]:
    if workers <= 1 or len(tasks) <= 1:
        _init_usage_worker(context)
        results = [_usage_part(task) for task in tasks]
    else:
        mp = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=mp,
                                 initializer=_init_usage_worker, initargs=(context,)) as pool:
            results = list(pool.map(_usage_part, tasks))
    return [f for files in results for f in files]


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_share(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise InputError(f"{name}: {value!r} is not a share between 0 and 1")


def _check_positive(name: str, value: Any, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InputError(f"{name}: {value!r} is not an integer >= {minimum}")


def _is_generated(path: Path) -> bool:
    return path.name in ("aspects", "usage", "action_requests", MANIFEST_NAME) or path.name.startswith("batch-")


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Create `out_dir`, removing the files of an earlier run (the generator owns `aspects/`, `usage/`,
    `action_requests/`, `batch-*/` and `manifest.json`; nothing else is touched).

    A folder holding an earlier run's manifest is always replaced (same arguments give the same bytes,
    so a re-run is idempotent). Any other non-empty folder is refused unless `overwrite`.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"out_dir: {str(out_dir)!r} is a file, not a folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite and not (out_dir / MANIFEST_NAME).is_file():
            raise InputError(f"out_dir: {str(out_dir)!r} is not empty and holds no {MANIFEST_NAME} of an earlier "
                             "run (pass overwrite / --force to write into it)")
        for child in out_dir.iterdir():
            if _is_generated(child):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def _default_workers(workers: int | None) -> int:
    if workers is None:
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    _check_positive("workers", workers)
    return workers


def estimate_versions_per_entity(entities: int, *, seed: int = 0, sample: int = 200, days: int = 30) -> float:
    """Estimate the mean number of aspect records one entity produces in an instance of `entities`.

    Simulates up to `sample` random entities of each asset type (a quarter of that per reference type)
    in memory, nothing written, and weighs the per-type means by the type counts.
    """
    _check_positive("entities", entities, MIN_ENTITIES)
    _check_positive("sample", sample)
    universe = _Universe(entities, seed, DEFAULT_START_MS, DEFAULT_START_MS + days * DAY_MS)
    options = _Options(0.0, 0.0, 0.03, 0.0, 0.0)
    rng = random.Random(f"{seed}/estimate")
    total = 0.0
    for entity_type, indices in universe.by_type.items():
        size = sample if entity_type in ASSET_TYPES else max(1, sample // 4)
        picked = rng.sample(range(len(indices)), min(size, len(indices)))
        sink = _Sink()
        for k in picked:
            _Simulator(universe, indices[k], sink, options).run()
        total += len(indices) * len(sink.records) / len(picked)
    return total / entities


def generate_history(
    out_dir: Path | str,
    *,
    entities: int,
    seed: int,
    usage_events: int | None = None,
    action_requests: int | None = None,
    malformed_share: float = 0.001,
    days: int = 30,
    start_ms: int | None = None,
    batches: int = 1,
    part_size: int = DEFAULT_PART_SIZE,
    mcp_share: float = 0.0,
    file_sink_share: float = 0.0,
    duplicate_share: float = 0.004,
    out_of_order_share: float = 0.004,
    hard_delete_share: float = 0.03,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write a realistic DataHub history of `entities` entities over `days` days, plus its manifest.

    Args:
        out_dir: folder to write; created. The files of an earlier run there are replaced; a folder with
            other content is refused unless `overwrite`.
        entities: number of entities of all types (at least 11: one of each type, two users).
        seed: same seed and arguments give byte-identical files.
        usage_events: usage event documents to write (default 5 per entity; 0 for none).
        action_requests: action requests (proposals) to write (default one per 10 entities, at least 7).
        malformed_share: share of malformed lines added to each JSON-lines file (at least one per file when > 0).
        days: length of the history.
        start_ms: first instant of the history (epoch ms; default 2023-11-14T22:13:20Z).
        batches: split every kind into this many batches of equal size, in time order
            (`batch-0000k/<kind>/...`); 1 writes `<kind>/...` directly.
        part_size: about this many records per part file (before splitting into batches).
        mcp_share: share of asset entities whose history is written as MCP lines (`.mcp.jsonl`).
        file_sink_share: share of asset entities written as a DataHub file-sink JSON array (`.file-sink.json`).
        duplicate_share: chance that a record is written again (an exact duplicate line) a little later.
        out_of_order_share: chance that an older version of an aspect is written after the newer one.
        hard_delete_share: share of asset entities hard-deleted at the end of their life.
        gzip: write `.gz` files.
        workers: processes to use (default: the CPUs available).
        overwrite: write into a non-empty `out_dir` that holds no earlier run (other files are kept).

    Returns:
        The manifest, also written to `out_dir/manifest.json`.

    Raises:
        InputError: an argument out of range (the message names it and its value), or an `out_dir` with
            foreign content.
    """
    _check_positive("entities", entities, MIN_ENTITIES)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"seed: {seed!r} is not an integer")
    usage_events = entities * 5 if usage_events is None else usage_events
    action_requests = max(len(ACTION_REQUEST_TYPES), entities // 10) if action_requests is None else action_requests
    _check_positive("usage_events", usage_events, 0)
    _check_positive("action_requests", action_requests, 0)
    _check_positive("days", days)
    _check_positive("batches", batches)
    _check_positive("part_size", part_size)
    for name, value in (("malformed_share", malformed_share), ("mcp_share", mcp_share),
                        ("file_sink_share", file_sink_share), ("duplicate_share", duplicate_share),
                        ("out_of_order_share", out_of_order_share), ("hard_delete_share", hard_delete_share)):
        _check_share(name, value)
    if mcp_share + file_sink_share > 1.0:
        raise InputError(f"mcp_share + file_sink_share: {mcp_share} + {file_sink_share} is more than 1")
    if start_ms is None:
        start_ms = DEFAULT_START_MS
    _check_positive("start_ms", start_ms, 0)
    workers = _default_workers(workers)
    out = Path(out_dir)
    _prepare_out_dir(out, overwrite)
    end_ms = start_ms + days * DAY_MS
    universe = _Universe(entities, seed, start_ms, end_ms)
    options = _Options(duplicate_share, out_of_order_share, hard_delete_share, mcp_share, file_sink_share)

    per_entity = estimate_versions_per_entity(entities, seed=seed, sample=100, days=days)
    expected = entities * per_entity
    # Parts depend on sizes only (never on `workers`), so every machine writes the same files; mid-sized
    # runs still get several parts so that they use several cores.
    parts = max(math.ceil(expected / part_size), min(_MAX_SMALL_PARTS, math.ceil(expected / _MIN_PART_RECORDS)))
    per_part = max(1, math.ceil(entities / parts))
    tasks = [_PartTask(p, first, min(entities, first + per_part), str(out), batches, malformed_share, gzip, "aspects")
             for p, first in enumerate(range(0, entities, per_part))]
    files = [f for part in _run_parts(_aspect_part, tasks, workers, (universe, options)) for f in part]

    if action_requests:
        per_request_part = max(1, part_size // 3)
        request_tasks = [_PartTask(p, first, min(action_requests, first + per_request_part), str(out), batches,
                                   malformed_share, gzip, "action_requests")
                         for p, first in enumerate(range(0, action_requests, per_request_part))]
        files += [f for part in _run_parts(_action_request_part, request_tasks, workers, (universe, options))
                  for f in part]
    if usage_events:
        context = _usage_context(universe)
        files += _run_usage(_usage_tasks(out, usage_events, seed, start_ms, end_ms, batches, part_size,
                                         malformed_share, gzip), context, workers)
    parameters = {
        "entities": entities, "seed": seed, "usage_events": usage_events, "action_requests": action_requests,
        "malformed_share": malformed_share, "days": days, "start_ms": start_ms, "end_ms": end_ms,
        "batches": batches, "part_size": part_size, "mcp_share": mcp_share, "file_sink_share": file_sink_share,
        "duplicate_share": duplicate_share, "out_of_order_share": out_of_order_share,
        "hard_delete_share": hard_delete_share, "gzip": gzip,
    }
    manifest = GeneratorManifest(out, parameters, tuple(files), dict(universe.counts), tuple(universe.users))
    manifest.write()
    return manifest


def _usage_context(universe: _Universe, sample: int = 5000) -> _UsageContext:
    rng = random.Random(f"{universe.seed}/usage-entities")
    indices = sorted({universe.random_asset(rng) for _ in range(min(sample, universe.entities))})
    return _UsageContext(tuple(universe.users), tuple(universe.urn(i) for i in indices),
                         tuple(universe.type_of(i) for i in indices))


def generate_aspect_versions(
    out_dir: Path | str,
    *,
    versions: int,
    seed: int,
    batches: int = 1,
    days: int = 30,
    start_ms: int | None = None,
    malformed_share: float = 0.0,
    part_size: int = DEFAULT_PART_SIZE,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write about `versions` aspect records (no usage events, no action requests), split into time-ordered batches.

    The history runs across the batches: later batches hold new versions of entities created in earlier
    ones. Batch k is `out_dir/batch-0000k/aspects/part-*.mcl.jsonl` (or `out_dir/aspects/` for one batch).

    Args:
        out_dir: folder to write (see `generate_history`).
        versions: the approximate number of aspect records to write (at least 100).
        seed: same seed and arguments give byte-identical files.
        batches: number of equal batches.
        days, start_ms, malformed_share, part_size, gzip, workers, overwrite: as in `generate_history`.

    Returns:
        The manifest; `manifest.totals["aspect_versions"]` is the exact count.

    Raises:
        InputError: an argument out of range.
    """
    _check_positive("versions", versions, 100)
    estimate_entities = max(MIN_ENTITIES, round(versions / 20))
    per_entity = estimate_versions_per_entity(estimate_entities, seed=seed, days=days)
    entities = max(MIN_ENTITIES, round(versions / per_entity))
    return generate_history(out_dir, entities=entities, seed=seed, usage_events=0, action_requests=0,
                            malformed_share=malformed_share, days=days, start_ms=start_ms, batches=batches,
                            part_size=part_size, gzip=gzip, workers=workers, overwrite=overwrite)


def generate_usage_events(
    out_dir: Path | str,
    *,
    events: int,
    seed: int,
    start_ms: int,
    end_ms: int,
    actors: Sequence[str] | None = None,
    entity_urns: Sequence[str] | None = None,
    malformed_share: float = 0.0,
    batches: int = 1,
    part_size: int = DEFAULT_PART_SIZE,
    gzip: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
) -> GeneratorManifest:
    """Write `events` usage event documents with times in [start_ms, end_ms), plus the manifest.

    Args:
        out_dir: folder to write (see `generate_history`).
        events: number of well-formed usage events.
        seed: same seed and arguments give byte-identical files.
        start_ms, end_ms: the time window (epoch ms); events are in time order across parts.
        actors: corpuser urns acting (default: the users of a generated instance of 500 entities).
        entity_urns: urns that entity events refer to (default: assets of that same instance).
        malformed_share, batches, part_size, gzip, workers, overwrite: as in `generate_history`.

    Raises:
        InputError: an argument out of range, or an actor that is not a `urn:li:corpuser:` urn.
    """
    _check_positive("events", events, 0)
    _check_positive("start_ms", start_ms, 0)
    if not isinstance(end_ms, int) or end_ms <= start_ms:
        raise InputError(f"end_ms: {end_ms!r} is not after start_ms {start_ms!r}")
    _check_share("malformed_share", malformed_share)
    _check_positive("batches", batches)
    _check_positive("part_size", part_size)
    workers = _default_workers(workers)
    universe = _Universe(500, seed, start_ms, end_ms)
    context = _usage_context(universe)
    if actors is not None:
        actors = tuple(actors)
        bad = [a for a in actors if not str(a).startswith("urn:li:corpuser:") or len(str(a)) <= len("urn:li:corpuser:")]
        if not actors or bad:
            raise InputError(f"actors: {bad[:3] if bad else actors!r} must be a non-empty list of urn:li:corpuser:<id>")
        context = _UsageContext(actors, context.entity_urns, context.entity_types)
    if entity_urns is not None:
        urns = tuple(entity_urns)
        bad = [x for x in urns if not str(x).startswith("urn:li:") or str(x).count(":") < 3]
        if not urns or bad:
            shown = bad[:3] if bad else urns
            raise InputError(f"entity_urns: {shown!r} must be a non-empty list of urn:li:<type>:<id>")
        context = _UsageContext(context.actors, urns, tuple(x.split(":", 3)[2] for x in urns))
    out = Path(out_dir)
    _prepare_out_dir(out, overwrite)
    files = _run_usage(_usage_tasks(out, events, seed, start_ms, end_ms, batches, part_size, malformed_share, gzip),
                       context, workers)
    parameters = {"usage_events": events, "seed": seed, "start_ms": start_ms, "end_ms": end_ms,
                  "malformed_share": malformed_share, "batches": batches, "part_size": part_size, "gzip": gzip}
    manifest = GeneratorManifest(out, parameters, tuple(files), {}, context.actors)
    manifest.write()
    return manifest
