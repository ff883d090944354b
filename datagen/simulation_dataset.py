"""Edits of the aspects only datasets have: schema fields, dataset properties, editable descriptions."""

from __future__ import annotations

import hashlib
from typing import Any

from datagen.catalogue import COLUMNS, CROSS_RETYPE, DAY_MS, DESCRIPTION_TEMPLATES, FIELD_DESCRIPTIONS, NATIVE, RENAMES
from datagen.wire import INGEST_ACTOR, Field, dump_json, new_run_id, stamp


class DatasetEdits:
    """Simulator edits of dataset-only aspects; mixed into Simulator, which holds the state."""

    def _init_schema(self) -> None:
        rng = self.rng
        self.platform = self.parts[0]
        natives = NATIVE[self.platform]
        id_name = rng.choice(("id", "customer_id", "order_id", "account_id"))
        fields = [Field(id_name, False, "id", natives["id"][0], key=True)]
        names = {id_name}
        for name, family in rng.sample(COLUMNS, rng.randint(3, 11)):
            if name not in names:
                names.add(name)
                fields.append(Field(name, rng.random() < 0.4, family, rng.choice(natives[family])))
        if rng.random() < 0.2:
            fields.append(Field("address", True, "struct", natives["struct"][0]))
            for child in ("street", "city", "zip"):
                fields.append(Field(f"address.{child}", True, "short", natives["short"][0]))
        self.fields = fields
        self.schema_hash = hashlib.sha1(self.urn.encode()).hexdigest()

    def _field_names(self) -> set[str]:
        return {f.path for f in self.fields}

    def _schema_metadata(self, t: int) -> str:
        platform, name, _ = self.parts
        return "".join([
            '{"schemaName": ', dump_json(name), f', "platform": "urn:li:dataPlatform:{platform}"',
            f', "version": {self.schema_version}',
            f', "created": {{"time": {self.schema_created}, "actor": "{INGEST_ACTOR}"}}',
            f', "lastModified": {{"time": {t}, "actor": "{INGEST_ACTOR}"}}',
            f', "hash": "{self.schema_hash}"',
            ', "platformSchema": {"com.linkedin.schema.OtherSchema": {"rawSchema": ""}}',
            ', "fields": [', ", ".join(f.render(self.schema_created) for f in self.fields), "]}",
        ])

    def _schema_write(self, t: int, op: str, changed: bool = True) -> int:
        if changed:
            self.schema_version += 1
        self.schema_hash = "%040x" % self.rng.getrandbits(160)
        source = self.platform
        self.w.upsert("schemaMetadata", self._schema_metadata(t), t, INGEST_ACTOR, new_run_id(self.rng, source, t), op)
        return t + 1

    def _leaf_fields(self) -> list[Field]:
        return [f for f in self.fields if not f.key and f.family != "struct"]

    def op_schema_field_add(self, t: int) -> int:
        rng = self.rng
        present = self._field_names()
        options = [c for c in COLUMNS if c[0] not in present]
        name, family = rng.choice(options) if options else (f"extra_col_{len(self.fields)}", "short")
        self.fields.append(Field(name, rng.random() < 0.6, family, rng.choice(NATIVE[self.platform][family])))
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
        natives = NATIVE[self.platform]
        candidates = [f for f in self._leaf_fields() if f.family not in ("array", "map")]
        if not candidates:
            return self.op_schema_field_add(t)
        f = rng.choice(candidates)
        same = [n for n in natives[f.family] if n != f.native]
        if same and rng.random() < 0.7:
            f.native = rng.choice(same)
        else:
            family = CROSS_RETYPE.get(f.family, "short")
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
        new = RENAMES.get(f.path, f"{f.path}_v2")
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
            f.description = rng.choice(FIELD_DESCRIPTIONS).format(f=f.path)
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
        text = self.rng.choice(DESCRIPTION_TEMPLATES).format(name=name, entity=entity)
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
        return dump_json(value)

    def _props_write(self, t: int, op: str) -> int:
        run = new_run_id(self.rng, self.platform, t)
        self.w.upsert("datasetProperties", self._dataset_properties(t), t, INGEST_ACTOR, run, op)
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
        value: dict[str, Any] = {"created": stamp(self.editable_created, self.editable_creator),
                                 "lastModified": stamp(t, actor)}
        if self.editable_description is not None:
            value["description"] = self.editable_description
        return self._user_write("editableDatasetProperties", dump_json(value), t, op, actor)

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
                                         "auditStamp": stamp(t, actor)}
            infos.append(info)
        value = {"created": stamp(self.editable_fields_created, self.editable_fields_creator),
                 "lastModified": stamp(t, actor), "editableSchemaFieldInfo": infos}
        return self._user_write("editableSchemaMetadata", dump_json(value), t, op, actor)

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
