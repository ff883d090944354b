"""Build bronze.aspect_snapshots rows for silver tests: from DataHub MCL records or by hand.

The rows carry exactly the table's declared columns, the way landing writes them: aspect JSON as
text (null on DELETE), systemMetadata.version as a number, created time/actor (MCP lines: lastObserved
and the default actor), provenance (source file, line, batch id, landed_at).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from conf.tables import table_spec

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "datahub"
MCL_FIXTURE = FIXTURES / "history-small.mcl.jsonl"
DEFAULT_ACTOR = "urn:li:corpuser:datahub"
BRONZE_KEY = "bronze.aspect_snapshots"
EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)


def bronze_schema() -> str:
    """The DDL of bronze.aspect_snapshots, as declared in the table registry."""
    return table_spec(BRONZE_KEY).columns


def mcl(
    urn: str,
    aspect_name: str,
    value: Mapping[str, Any] | None,
    *,
    version: int | None = 1,
    time: int = 1649953100653,
    actor: str = "urn:li:corpuser:jdoe",
    change_type: str = "UPSERT",
) -> dict[str, Any]:
    """A DataHub MCL record as DataHub's Python classes serialize it (aspect absent when value is None)."""
    entity_type = urn.split(":")[2]
    record: dict[str, Any] = {
        "entityType": entity_type,
        "entityUrn": urn,
        "changeType": change_type,
        "aspectName": aspect_name,
        "systemMetadata": {"lastObserved": time, "runId": "test", "lastRunId": "no-run-id-provided"},
        "created": {"time": time, "actor": actor},
    }
    if version is not None:
        record["systemMetadata"]["version"] = str(version)
    if value is not None:
        record["aspect"] = {"value": json.dumps(value), "contentType": "application/json"}
    return record


def read_mcl_fixture() -> list[dict[str, Any]]:
    """The shared MCL history, one dict per line, in file order."""
    return [json.loads(line) for line in MCL_FIXTURE.read_text().splitlines() if line.strip()]


def to_bronze_rows(
    records: Iterable[Mapping[str, Any]],
    batch_id: str,
    *,
    source_file: str = "history.mcl.jsonl",
    first_line: int = 1,
    batch_index: int = 0,
) -> list[dict[str, Any]]:
    """Turn MCL/MCP records into bronze.aspect_snapshots rows of one batch (line numbers from first_line)."""
    landed_at = EPOCH + timedelta(minutes=batch_index)
    rows = []
    for offset, record in enumerate(records):
        system = record.get("systemMetadata") or {}
        aspect = record.get("aspect")
        if aspect is None:
            aspect_json = None
        elif "value" in aspect:
            aspect_json = aspect["value"]
        else:
            aspect_json = json.dumps(aspect["json"])
        created = record.get("created") or {}
        text = json.dumps(record, sort_keys=True)
        rows.append(
            {
                "entity_urn": record["entityUrn"],
                "entity_type": record["entityType"],
                "aspect_name": record["aspectName"],
                "change_type": record["changeType"],
                "aspect_json": aspect_json,
                "version": int(system["version"]) if system.get("version") is not None else None,
                "created_time": int(created.get("time", system.get("lastObserved"))),
                "created_actor": created.get("actor", DEFAULT_ACTOR),
                "system_metadata": json.dumps(system),
                "run_id": system.get("runId"),
                "source_kind": "mcl" if created else "mcp",
                "record_hash": hashlib.sha256(text.encode()).hexdigest(),
                "source_file": source_file,
                "line_number": first_line + offset,
                "batch_id": batch_id,
                "landed_at": landed_at,
                "land_date": landed_at.date(),
            }
        )
    return rows


def bronze_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """A DataFrame with exactly bronze.aspect_snapshots' columns holding `rows`."""
    columns = table_spec(BRONZE_KEY).column_names
    return spark.createDataFrame([tuple(r[c] for c in columns) for r in rows], bronze_schema())


def split_batches(records: list[Mapping[str, Any]], cuts: list[int]) -> list[list[dict[str, Any]]]:
    """Bronze rows of consecutive batches `b0`, `b1`, ... cutting `records` (in order) at the given indexes."""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(records))), len(records)]
    return [
        to_bronze_rows(records[start:end], f"b{index:03d}", first_line=start + 1, batch_index=index)
        for index, (start, end) in enumerate(zip(bounds, bounds[1:]))
    ]


def land(spark: SparkSession, settings, rows: list[dict[str, Any]]) -> None:
    """Write one batch's rows to bronze.aspect_snapshots, then its bronze.landed_files row (the commit)."""
    from pipelines.runtime.io import append

    append(bronze_df(spark, rows), settings, BRONZE_KEY)
    first = rows[0]
    landed_df = spark.createDataFrame(
        [(first["batch_id"], first["source_file"], None, "mcl", len(rows), len(rows), 0, 0, first["landed_at"], first["land_date"])],
        "batch_id string, source_file string, content_hash string, kind string, records_read bigint, "
        "records_landed bigint, records_quarantined bigint, duplicates_skipped bigint, landed_at timestamp, land_date date",
    )
    append(landed_df, settings, "bronze.landed_files")
