"""Input files for the explorer tests: a known entity history, an actor's usage events, hostile values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conf.values import DAY_MS, HOUR_MS

# 2024-03-01T00:00:00Z: after the shared fixture's history (which ends 2024-01-16), so these days hold
# only the events below.
DAY0 = 1_709_251_200_000
ALICE = "urn:li:corpuser:explorer.alice"
BOB = "urn:li:corpuser:explorer.bob"
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:hive,explorer.orders,PROD)"
ORDERS_TAGS_V1_AT = DAY0 + 9 * HOUR_MS
ORDERS_TAGS_V2_AT = DAY0 + DAY_MS + 9 * HOUR_MS
ORDERS_DOC_AT = DAY0 + DAY_MS + 10 * HOUR_MS

# Every payload sets window.__xss (or opens an alert) if the page ever runs it.
XSS_ACTOR = "urn:li:corpuser:<script>window.__xss='actor'</script>"
XSS_URN = 'urn:li:dataset:(urn:li:dataPlatform:hive,<img src=x onerror="window.__xss=\'urn\'">,PROD)'
XSS_TAG = "urn:li:tag:<img src=x onerror=alert('tag')>"
XSS_DESCRIPTION = "javascript:window.__xss='description'//<script>window.__xss='doc'</script>"
XSS_AT = DAY0 + 2 * DAY_MS + 12 * HOUR_MS

# Alice's usage events, by hand: 7 in all, on the three days (3 + 2 + 2).
ALICE_EVENTS = [
    ("LogInEvent", DAY0 + 8 * HOUR_MS, {}),
    ("EntityEvent", DAY0 + 8 * HOUR_MS + 60_000, {"entityUrn": ORDERS, "entityType": "dataset", "aspectName": "datasetProperties"}),
    ("UpdateAspectEvent", DAY0 + 8 * HOUR_MS + 120_000, {"entityUrn": ORDERS, "entityType": "dataset", "aspectName": "ownership"}),
    ("LogInEvent", DAY0 + DAY_MS + 8 * HOUR_MS, {}),
    ("CreateAccessTokenEvent", DAY0 + DAY_MS + 8 * HOUR_MS + 60_000, {}),
    ("LogInEvent", DAY0 + 2 * DAY_MS + 8 * HOUR_MS, {}),
    ("EntityEvent", DAY0 + 2 * DAY_MS + 8 * HOUR_MS + 60_000, {"entityUrn": ORDERS, "entityType": "dataset", "aspectName": "schemaMetadata"}),
]  # fmt: skip
# Bob logs in twice on the first day: the two top actors of the three days are alice (7) and bob.
BOB_EVENTS = [("LogInEvent", DAY0 + 7 * HOUR_MS, {}), ("FailedLogInEvent", DAY0 + 7 * HOUR_MS + 1000, {})]


def _mcl(urn: str, entity_type: str, aspect: str, value: dict[str, Any], at: int, actor: str, version: int,
         previous: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    record = {
        "entityType": entity_type,
        "entityUrn": urn,
        "changeType": "UPSERT",
        "aspectName": aspect,
        "aspect": {"value": json.dumps(value), "contentType": "application/json"},
        "systemMetadata": {"lastObserved": at, "runId": "explorer-test", "lastRunId": "no-run-id-provided", "version": str(version)},
        "created": {"time": at, "actor": actor},
    }
    if previous is not None:
        record["previousAspectValue"] = {"value": json.dumps(previous), "contentType": "application/json"}
        record["previousSystemMetadata"] = {"lastObserved": at, "runId": "explorer-test", "version": str(version - 1)}
    return record


def write_inputs(folder: Path) -> None:
    """Write the change history (MCL) and the usage events into `folder`."""
    tags_v1 = {"tags": [{"tag": "urn:li:tag:Alpha"}]}
    tags_v2 = {"tags": [{"tag": "urn:li:tag:Alpha"}, {"tag": "urn:li:tag:Beta"}]}
    records = [
        _mcl(ORDERS, "dataset", "globalTags", tags_v1, ORDERS_TAGS_V1_AT, BOB, 1),
        _mcl(ORDERS, "dataset", "globalTags", tags_v2, ORDERS_TAGS_V2_AT, BOB, 2, tags_v1),
        _mcl(ORDERS, "dataset", "editableDatasetProperties", {"description": "Orders, one row per order"}, ORDERS_DOC_AT, BOB, 1),
        _mcl(XSS_URN, "dataset", "globalTags", {"tags": [{"tag": XSS_TAG}]}, XSS_AT, XSS_ACTOR, 1),
        _mcl(XSS_URN, "dataset", "editableDatasetProperties", {"description": XSS_DESCRIPTION}, XSS_AT + 1000, XSS_ACTOR, 1),
    ]  # fmt: skip
    (folder / "explorer.mcl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    usage = [
        {"type": kind, "actorUrn": actor, "timestamp": at, **fields}
        for actor, events in ((ALICE, ALICE_EVENTS), (BOB, BOB_EVENTS))
        for kind, at, fields in events
    ]
    usage.append({"type": "LogInEvent", "actorUrn": XSS_ACTOR, "timestamp": XSS_AT + 2000, "loginSource": "<b>bold</b>"})
    (folder / "explorer-usage.jsonl").write_text("".join(json.dumps(r) + "\n" for r in usage))
