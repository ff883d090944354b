"""The catalogue of one generated instance: entity types, vocabularies, and the universe of urns."""

from __future__ import annotations

import math
import random
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

from conf.values import DAY_MS

DEFAULT_START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
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
DEPARTMENTS = ("Data Engineering", "Analytics", "Finance", "Marketing", "Sales Ops", "Security", "Platform")
TITLES = ("Data Engineer", "Senior Data Engineer", "Analytics Engineer", "Data Analyst", "Data Steward",
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
TERM_NODES = ("Customer", "Finance", "Classification", "Sales", "Marketing", "Product")
TAG_COLORS = ("#FF6B6B", "#4ECDC4", "#FFD93D", "#1A535C", "#6A4C93", "#8AC926", "#1982C4", "#FF924C")

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

OWNER_TYPES = (
    ("TECHNICAL_OWNER", "urn:li:ownershipType:__system__technical_owner"),
    ("BUSINESS_OWNER", "urn:li:ownershipType:__system__business_owner"),
    ("DATA_STEWARD", "urn:li:ownershipType:__system__data_steward"),
    ("NONE", "urn:li:ownershipType:__system__none"),
    ("CUSTOM", "urn:li:ownershipType:sla_owner"),
)
OWNER_TYPE_WEIGHTS = (0.45, 0.25, 0.2, 0.04, 0.06)

# (property urn, value kind, choices); values are DataHub's union `{"string": ...}` / `{"double": ...}`.
STRUCTURED_PROPERTIES = (
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
COLUMNS = (
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
RENAMES = {"email": "email_address", "phone": "phone_number", "amount": "amount_usd", "status": "order_status",
            "notes": "internal_notes", "country": "country_code", "price": "unit_price", "score": "risk_score"}
TYPE_CLASS = {
    "id": "NumberType", "int": "NumberType", "decimal": "NumberType", "float": "NumberType",
    "short": "StringType", "long": "StringType", "code": "StringType", "text": "StringType",
    "bytes": "BytesType", "ts": "TimeType", "date": "DateType", "bool": "BooleanType",
    "array": "ArrayType", "map": "MapType", "struct": "RecordType",
}
NATIVE = {
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
CROSS_RETYPE = {"int": "decimal", "id": "short", "date": "ts", "ts": "short", "float": "decimal", "decimal": "float",
                 "short": "long", "code": "short", "bool": "short", "long": "text", "text": "long"}

DESCRIPTION_TEMPLATES = (
    "Raw {name} table",
    "{name}: one row per {entity}, loaded nightly from the source system",
    "Curated {entity} facts used by finance and growth reporting",
    "Daily snapshot of {entity} records; see the runbook before backfilling",
    "{entity} data for the EMEA region (incl. Z\u00fcrich and M\u00fcnchen)",
    "Deprecated copy of {name}; prefer the curated mart",
)
FIELD_DESCRIPTIONS = ("{f}: as delivered by the source", "{f} in UTC", "{f} (nullable for legacy rows)",
                       "Primary {f} used for joins", "{f}: masked for non-admin roles",
                       "{f} \u2013 business definition pending")
DEPRECATION_NOTES = ("Replaced; migrate before Q1", "Replaced; migrate before Q2", "Replaced; migrate before Q3",
                      "Replaced; migrate before Q4", "Superseded by the curated mart", "Source system retired")


def _crc(seed: int, index: int, salt: str) -> int:
    return zlib.crc32(f"{seed}:{index}:{salt}".encode())


def pick(options: Sequence[Any], seed: int, index: int, salt: str) -> Any:
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


class Universe:
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
            _FIXED_TERMS, self.counts["glossaryTerm"], lambda k: f"{rng.choice(TERM_NODES)}.Term{k}")]
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
            return f"urn:li:{t}:({pick(_CHART_TOOLS, s, index, 'tool')},{pick(stems, s, index, t)}_{index})"
        if t == "dataFlow":
            cluster = "prod" if _crc(s, index, "env") % 10 else "dev"
            orchestrator, flow = pick(_ORCHESTRATORS, s, index, "o"), pick(_FLOW_STEMS, s, index, "f")
            return f"urn:li:dataFlow:({orchestrator},{flow}_{index},{cluster})"
        flows = self.by_type["dataFlow"]
        flow = self.urn(flows[_crc(s, index, "flow") % len(flows)])
        return f"urn:li:dataJob:({flow},{pick(_JOB_STEMS, s, index, 'j')}_{index})"

    def dataset_parts(self, index: int) -> tuple[str, str, str]:
        """Return (platform, qualified name, environment) of the dataset at `index`."""
        s = self.seed
        platform = pick(_PLATFORMS, s, index, "platform")
        dbs, schemas = _PLATFORM_NAMES[platform]
        database, schema = pick(dbs, s, index, "db"), pick(schemas, s, index, "schema")
        name = f"{database}.{schema}.{pick(_TABLE_STEMS, s, index, 't')}_{index}"
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
