"""DataHub's own producers, run here to make test input: `datahub ingest` with the file sink, the SDK's patch builders.

Run as a module to rewrite the small files under tests/fixtures/datahub_producers/ (see the README there):

    python -m tests.pipelines.batch.datahub_producers tests/fixtures/datahub_producers
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path

# DataHub's CLI reports usage over the network unless told not to: nothing here may leave the machine.
os.environ.setdefault("DATAHUB_TELEMETRY_ENABLED", "false")

from datahub.emitter.serialization_helper import pre_json_transform
from datahub.ingestion.run.pipeline import Pipeline
from datahub.metadata.schema_classes import (
    GlobalTagsClass,
    GlossaryTermAssociationClass,
    GlossaryTermsClass,
    AuditStampClass,
    MetadataChangeProposalClass,
    OwnerClass,
    OwnershipClass,
    OwnershipTypeClass,
    SystemMetadataClass,
    TagAssociationClass,
)
from datahub.emitter.mcp import MetadataChangeProposalWrapper
from datahub.specific.dataset import DatasetPatchBuilder

ORDERS = "urn:li:dataset:(urn:li:dataPlatform:sqlite,main.orders,PROD)"
CUSTOMERS = "urn:li:dataset:(urn:li:dataPlatform:sqlite,main.customers,PROD)"
# The schema of the first run; the second adds `currency` to orders, drops `note`, and adds customers.
FIRST_SCHEMA = ("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL, note TEXT)",)
SECOND_SCHEMA = (
    "ALTER TABLE orders ADD COLUMN currency TEXT",
    "ALTER TABLE orders DROP COLUMN note",
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
)


def change_database(database: Path, statements: Iterable[str]) -> None:
    """Run DDL statements on a SQLite database (created when missing)."""
    with sqlite3.connect(database) as connection:
        for statement in statements:
            connection.execute(statement)


def ingest(database: Path, out: Path, run_id: str) -> list[dict]:
    """Run DataHub's ingestion pipeline (the sqlalchemy source on SQLite, the file sink) like `datahub ingest`.

    Returns:
        The file sink's JSON array, parsed.
    """
    pipeline = Pipeline.create(
        {
            "run_id": run_id,
            "source": {"type": "sqlalchemy", "config": {"connect_uri": f"sqlite:///{database}", "platform": "sqlite"}},
            "sink": {"type": "file", "config": {"filename": str(out)}},
        }
    )
    pipeline.run()
    pipeline.raise_from_status()
    return json.loads(out.read_text())


def system_metadata(last_observed: int, run_id: str) -> SystemMetadataClass:
    return SystemMetadataClass(lastObserved=last_observed, runId=run_id)


def patch_proposals(urn: str, last_observed: int) -> list[dict]:
    """PATCH proposals from the SDK's DatasetPatchBuilder: add a tag, remove a tag, add an owner, add a term."""
    builder = DatasetPatchBuilder(urn, system_metadata=system_metadata(last_observed, "patch-run"))
    builder.add_tag(TagAssociationClass("urn:li:tag:pii"))
    builder.remove_tag("urn:li:tag:legacy")
    builder.add_owner(OwnerClass("urn:li:corpuser:jdoe", OwnershipTypeClass.TECHNICAL_OWNER))
    builder.add_term(GlossaryTermAssociationClass("urn:li:glossaryTerm:Finance.Revenue"))
    return [mcp.to_obj() for mcp in builder.build()]


def upsert_proposals(urn: str, last_observed: int, *, tags: list[str], owners: list[tuple[str, str]], terms: list[str]) -> list[dict]:
    """UPSERT proposals of globalTags, ownership and glossaryTerms holding exactly the given items."""
    stamp = AuditStampClass(time=last_observed, actor="urn:li:corpuser:__datahub_system")
    aspects = [
        GlobalTagsClass(tags=[TagAssociationClass(t) for t in tags]),
        OwnershipClass(owners=[OwnerClass(o, t) for o, t in owners], lastModified=stamp),
        GlossaryTermsClass(terms=[GlossaryTermAssociationClass(t) for t in terms], auditStamp=stamp),
    ]
    proposals = [
        MetadataChangeProposalWrapper(
            entityUrn=urn, aspect=aspect, systemMetadata=system_metadata(last_observed, "upsert-run")
        ).to_obj()
        for aspect in aspects
    ]
    for proposal in proposals:
        # The SDK's class writes an empty ownerTypes, which DataHub's default Ownership (what a patch
        # starts from) does not have: the same aspect without it.
        value = json.loads(proposal["aspect"]["value"])
        if value.get("ownerTypes") == {}:
            del value["ownerTypes"]
            proposal["aspect"]["value"] = json.dumps(value)
    return proposals


def snapshot_lines(sink_elements: list[dict]) -> list[str]:
    """The MCEs of a file sink's output as JSON lines: each in the Avro form, then in the REST form."""
    mces = [e for e in sink_elements if "proposedSnapshot" in e]
    return [json.dumps(m) for m in mces] + [json.dumps(pre_json_transform(m)) for m in mces]


def write_fixtures(folder: Path) -> None:
    """Write the small real-producer files the tests and docs refer to."""
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "shop.db"
    database.unlink(missing_ok=True)
    change_database(database, FIRST_SCHEMA)
    first = ingest(database, folder / "sqlite-run1.file-sink.json", "sqlite-run1")
    (folder / "snapshots.mce.jsonl").write_text("\n".join(snapshot_lines(first)) + "\n")
    (folder / "patches.mcp.jsonl").write_text(
        "\n".join(json.dumps(p) for p in patch_proposals(ORDERS, 1795900000000)) + "\n"
    )
    database.unlink()


if __name__ == "__main__":
    write_fixtures(Path(sys.argv[1]))
