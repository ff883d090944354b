"""Edits of the aspects every asset has: tags, terms, domains, owners, structured properties, status."""

from __future__ import annotations

from typing import Any

from datagen.catalogue import DAY_MS, DEPRECATION_NOTES, OWNER_TYPES, OWNER_TYPE_WEIGHTS, STRUCTURED_PROPERTIES
from datagen.wire import INGEST_ACTOR, NO_RUN, dump_json, new_run_id, stamp

# Aspects an ingestion run writes, and so may observe again unchanged.
_REOBSERVED = frozenset({"schemaMetadata", "datasetProperties", "subTypes", "chartInfo", "dashboardInfo",
                         "dataFlowInfo", "dataJobInfo", "dataJobInputOutput", "glossaryTermInfo"})


class AssetEdits:
    """Simulator edits of the aspects every asset has; mixed into Simulator, which holds the state."""

    def _tags_write(self, t: int, op: str) -> int:
        return self._user_write("globalTags", dump_json({"tags": [{"tag": x} for x in self.tags]}), t, op)

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
        value = {"terms": [{"urn": x, "actor": a} for x, a in self.terms], "auditStamp": stamp(t, actor)}
        return self._user_write("glossaryTerms", dump_json(value), t, op, actor)

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
        return self._user_write("domains", dump_json({"domains": self.domains}), t, op)

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
        return self.rng.choices(OWNER_TYPES, weights=OWNER_TYPE_WEIGHTS)[0]

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
        props = [{"propertyUrn": p, "values": values, "created": stamp(created, creator),
                  "lastModified": stamp(modified, modifier)}
                 for p, values, created, creator, modified, modifier in self.properties]
        return self._user_write("structuredProperties", dump_json({"properties": props}), t, op, actor)

    def op_structured_property_add(self, t: int) -> int:
        present = {p[0] for p in self.properties}
        options = [p for p in STRUCTURED_PROPERTIES if p[0] not in present]
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
        _, kind, choices = next(p for p in STRUCTURED_PROPERTIES if p[0] == prop[0])
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
        return self._user_write("deprecation", dump_json(self.deprecated), t, op, actor)

    def op_deprecation_toggle(self, t: int) -> int:
        rng = self.rng
        actor = self.u.actor(rng)
        if self.deprecated and self.deprecated["deprecated"]:
            self.deprecated = {"deprecated": False, "note": "", "actor": actor}
            return self._deprecation_write(t, "undeprecate", actor)
        self.deprecated = {"deprecated": True, "decommissionTime": t + rng.randint(30, 120) * DAY_MS,
                           "note": rng.choice(DEPRECATION_NOTES), "actor": actor}
        return self._deprecation_write(t, "deprecate", actor)

    def op_deprecation_note(self, t: int) -> int:
        if not (self.deprecated and self.deprecated["deprecated"]):
            return self.op_deprecation_toggle(t)
        actor = self.u.actor(self.rng)
        self.deprecated = dict(self.deprecated, note=self.rng.choice(DEPRECATION_NOTES), actor=actor)
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
            run, actor = new_run_id(self.rng, source, t), INGEST_ACTOR
        else:
            run, actor = NO_RUN, self.u.actor(self.rng)
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
        self.w.reobserve(self.rng.choice(written), t, INGEST_ACTOR, new_run_id(self.rng, source, t))
        return t + 1

    def op_membership_change(self, t: int) -> int:
        u, rng = self.u, self.rng
        group = u.groups[int(len(u.groups) * rng.random())]
        if group in self.groups and len(self.groups) > 1:
            self.groups.remove(group)
        elif group not in self.groups:
            self.groups.append(group)
        w = self.w
        w.upsert("groupMembership", dump_json({"groups": self.groups}), t, INGEST_ACTOR, new_run_id(rng, "okta", t),
                 "membership_change")
        return t + 1
