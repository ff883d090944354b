"""Input records for the bronze tests: good DataHub MCL / MCP records and usage documents, and line rows."""

from __future__ import annotations

ACTOR = "urn:li:corpuser:jdoe"
DEFAULT_ACTOR = "urn:li:corpuser:datahub"
URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
LIMIT = 1000


def mcl(**overrides) -> dict:
    """A good MCL record; overrides replace top-level keys (None removes one)."""
    record = {
        "entityType": "dataset",
        "entityUrn": URN,
        "changeType": "UPSERT",
        "aspectName": "status",
        "aspect": {"value": '{"removed": false}', "contentType": "application/json"},
        "systemMetadata": {"lastObserved": 1700000000500, "runId": "run-1", "version": "3"},
        "created": {"time": 1700000000000, "actor": ACTOR},
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not None}


def mcp(**overrides) -> dict:
    return mcl(**{"created": None, **overrides})


def usage(**overrides) -> dict:
    document = {"type": "LogInEvent", "actorUrn": ACTOR, "timestamp": 1700000000000, "loginSource": "passwordLogin"}
    document.update(overrides)
    return {k: v for k, v in document.items() if v is not None}


def lines_df(spark, lines: list[str], file_index: int = 0, source_file: str = "in.jsonl"):
    """Line rows numbered 1.. (as a reader that numbers lines gives them)."""
    rows = [(file_index, source_file, None, None, None, number, text) for number, text in enumerate(lines, 1)]
    return spark.createDataFrame(
        rows,
        "file_index int, source_file string, mid bigint, line_crc bigint, line_bytes bigint, line_number bigint, "
        "value string",
    )
