"""One entity's simulated life: creation by ingestion, then edits by people and ingestion runs."""

from __future__ import annotations

import bisect
import random
from typing import Any

from datagen.catalogue import (
    ASSET_TYPES,
    DEPARTMENTS,
    KEY_ASPECTS,
    OWNER_TYPES,
    REFERENCE_TYPES,
    TAG_COLORS,
    TITLES,
    Universe,
    pick,
)
from datagen.simulation_assets import AssetEdits
from datagen.simulation_dataset import DatasetEdits
from datagen.wire import (
    FMT_FILE_SINK,
    FMT_MCL,
    FMT_MCP,
    INGEST_ACTOR,
    NO_RUN,
    EntityWriter,
    Options,
    Sink,
    dump_json,
    new_run_id,
    stamp,
)

_OP_TABLES: dict[str, tuple[list[str], list[float]]] = {}


class Simulator(DatasetEdits, AssetEdits):
    """Plays one entity's life: creation by ingestion, then edits by people and ingestion runs.

    The edits of dataset-only aspects come from `DatasetEdits`, those of the aspects every asset has from
    `AssetEdits`; this class holds the state they edit and picks the edits.
    """

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

    def __init__(self, u: Universe, index: int, sink: Sink, options: Options):
        self.u = u
        self.index = index
        self.rng = random.Random(f"{u.seed}/entity/{index}")
        rng = self.rng
        self.entity_type = u.type_of(index)
        self.urn = u.urn(index)
        self.parts = u.dataset_parts(index) if self.entity_type == "dataset" else ("", "", "")
        fmt = FMT_MCL
        if self.entity_type in ASSET_TYPES:
            draw = rng.random()
            if draw < options.mcp_share:
                fmt = FMT_MCP
            elif draw < options.mcp_share + options.file_sink_share:
                fmt = FMT_FILE_SINK
        self.w = EntityWriter(self.entity_type, self.urn, fmt, sink, rng, options)
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
        if (self.entity_type in ASSET_TYPES and self.w.fmt != FMT_FILE_SINK
                and rng.random() < self.options.hard_delete_share and t + 120_000 < u.end_ms):
            when = t + 60_000 + int((u.end_ms - t - 120_000) * rng.random())
            self.w.hard_delete(when, u.actor(rng))

    def _user_write(self, aspect: str, value: str, t: int, op: str, actor: str | None = None) -> int:
        self.w.upsert(aspect, value, t, actor or self.u.actor(self.rng), NO_RUN, op)
        return t + 1

    # -- creation ------------------------------------------------------------------------------

    def create(self, t: int) -> int:
        """Write the first versions an ingestion run (or the UI, for tags and domains) writes."""
        rng, u, et = self.rng, self.u, self.entity_type
        source = self._ingest_source()
        run = new_run_id(rng, source, t) if source else NO_RUN
        actor = INGEST_ACTOR if source else u.actor(rng)
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
                       ("subTypes", dump_json({"typeNames": [rng.choice(("Table", "Table", "View"))]}))]
        elif et in ("chart", "dashboard", "dataFlow", "dataJob", "glossaryTerm", "corpuser", "corpGroup", "tag",
                    "domain"):
            self.info_rev = 1
            writes.append(self._info(t + 1, actor))
            if et == "dataJob":
                writes.append(("dataJobInputOutput", self._job_io()))
            if et == "corpuser":
                self.groups = [u.groups[int(len(u.groups) * rng.random())]]
                writes.append(("groupMembership", dump_json({"groups": self.groups})))
        if et != "domain":
            writes.append(("status", '{"removed": false}'))
        if et not in ("corpuser", "tag"):
            self.owners = [[self._owner_urn(), *OWNER_TYPES[0]]]
            writes.append(("ownership", self._ownership(t + len(writes), actor)))
        for k, (aspect, value) in enumerate(writes):
            w.upsert(aspect, value, t + k, actor, run, "create")
        return t + len(writes)

    def _key_value(self) -> str:
        et, urn = self.entity_type, self.urn
        if et == "dataset":
            platform, name, env = self.parts
            return dump_json({"platform": f"urn:li:dataPlatform:{platform}", "name": name, "origin": env})
        inner = urn.split(":", 3)[3]
        if et in ("chart", "dashboard"):
            tool, ident = inner[1:-1].split(",", 1)
            return dump_json({"dashboardTool": tool, ("chartId" if et == "chart" else "dashboardId"): ident})
        if et == "dataFlow":
            orchestrator, flow_id, cluster = inner[1:-1].split(",")
            return dump_json({"orchestrator": orchestrator, "flowId": flow_id, "cluster": cluster})
        if et == "dataJob":
            flow, job_id = inner[1:-1].rsplit(",", 1)
            return dump_json({"flow": flow, "jobId": job_id})
        return dump_json({{"corpuser": "username", "corpGroup": "name", "tag": "name", "domain": "id",
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
            modified = {"created": stamp(created_at, created_by), "lastModified": stamp(t, actor)}
            if et == "chart":
                value = {"customProperties": {}, "title": title, "description": f"{title} tile{suffix}",
                         "lastModified": modified}
                return "chartInfo", dump_json(value)
            if not hasattr(self, "dashboard_charts"):
                self.dashboard_charts = sorted({u.urn(u.random_of(rng, "chart")) for _ in range(rng.randint(1, 6))})
            value = {"customProperties": {}, "title": title, "description": f"{title} dashboard{suffix}",
                     "charts": self.dashboard_charts, "datasets": [], "dashboards": [], "lastModified": modified}
            return "dashboardInfo", dump_json(value)
        if et == "dataFlow":
            name = inner[1:-1].split(",")[1]
            return "dataFlowInfo", dump_json({"customProperties": {"schedule": "0 2 * * *"}, "name": name,
                                           "description": f"Pipeline {name}{suffix}"})
        if et == "dataJob":
            name = inner[1:-1].rsplit(",", 1)[1]
            return "dataJobInfo", dump_json({"customProperties": {}, "name": name, "description": f"Task {name}{suffix}",
                                          "type": {"string": "COMMAND"}})
        if et == "glossaryTerm":
            return "glossaryTermInfo", dump_json({"customProperties": {}, "name": inner.rsplit(".", 1)[-1],
                                               "definition": f"Business definition of {inner}{suffix}",
                                               "termSource": "INTERNAL"})
        if et == "corpuser":
            handle = inner.split("@")[0]
            first, _, last = handle.partition(".")
            if not last:
                first, last = handle[:1], handle[1:]
            full = f"{first.title()} {last.title()}" if handle != "datahub" else "DataHub"
            return "corpUserInfo", dump_json({
                "customProperties": {}, "active": rev % 5 != 0, "displayName": full,
                "email": inner if "@" in inner else f"{inner}@acme.com",
                "title": pick(TITLES, u.seed, self.index + rev, "title"),
                "departmentName": pick(DEPARTMENTS, u.seed, self.index, "dept"), "firstName": first.title(),
                "lastName": last.title(), "fullName": full})
        if et == "corpGroup":
            members = sorted({u.users[1 + int((len(u.users) - 1) * rng.random())] for _ in range(3)})
            return "corpGroupInfo", dump_json({"displayName": inner.replace("-", " ").title(),
                                            "email": f"{inner}@acme.com", "admins": members[:1], "members": members,
                                            "groups": [], "description": f"The {inner} team{suffix}"})
        if et == "tag":
            return "tagProperties", dump_json({"name": inner, "description": f"Assets tagged {inner}{suffix}",
                                            "colorHex": pick(TAG_COLORS, u.seed, self.index + rev, "color")})
        return "domainProperties", dump_json({"name": inner.replace("-", " ").title(),
                                           "description": f"Everything owned by {inner}{suffix}",
                                           "created": stamp(created_at, created_by)})

    def _job_io(self) -> str:
        u, rng = self.u, self.rng
        inputs = sorted({u.urn(u.random_of(rng, "dataset")) for _ in range(rng.randint(1, 3))})
        outputs = [u.urn(u.random_of(rng, "dataset"))]
        return dump_json({"inputDatasets": inputs, "outputDatasets": outputs, "inputDatajobs": []})

    def _owner_urn(self) -> str:
        u, rng = self.u, self.rng
        if rng.random() < 0.2:
            return u.groups[int(len(u.groups) * rng.random())]
        return u.actor(rng)

    def _ownership(self, t: int, actor: str) -> str:
        owners = [{"owner": o, "type": ty, "typeUrn": tu} for o, ty, tu in self.owners]
        return dump_json({"owners": owners, "ownerTypes": {}, "lastModified": stamp(t, actor)})
