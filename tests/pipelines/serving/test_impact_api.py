"""GET /api/v1/impact: a real server on loopback over real gold.lineage_edges and change events, scoped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from gold.scopes import change_event_condition, parse_scope
from pipelines.batch.publish_lineage import publish_lineage
from pipelines.runtime.io import append
from pipelines.serving.api import create_app, serving
from pipelines.serving.impact import IMPACT_PATH, ChangeEventReader
from pipelines.serving.scoped_reads import ChangeEventScope
from pipelines.serving.tokens import create_token
from tests.gold.test_openmetadata import SILVER_COLUMNS, ece
from tests.pipelines.batch.test_publish_lineage import A, ANN, B, BOB, CHART, JOB, refined_batch
from tests.silver.bronze_rows import mcl

LINEAGE = [
    mcl(JOB, "dataJobInputOutput", {"inputDatasets": [A], "outputDatasets": [B]}, version=1, time=1_000, actor=ANN),
    mcl(CHART, "chartInfo", {"title": "orders", "inputs": [{"string": B}]}, version=1, time=1_000, actor=ANN),
]  # fmt: skip
EVENTS = [
    ece("a", 2_000, "TAG", "ADD", "urn:li:tag:PII", urn=A, actor=ANN),
    ece("job", 2_500, "OWNER", "ADD", "urn:li:corpuser:kim", urn=JOB, entity_type="dataJob", aspect="ownership", actor=BOB),
    ece("chart", 3_000, "TAG", "ADD", "urn:li:tag:PII", urn=CHART, entity_type="chart", actor=BOB),
    ece("b", 4_000, "DOCUMENTATION", "ADD", urn=B, actor=ANN),
]  # fmt: skip
WINDOW = {"since": "0", "until": "10000"}


@contextlib.contextmanager
def served_lineage(spark, lakehouse, lineage: list, events: list) -> Iterator[tuple[str, dict[str, str]]]:
    """Land and publish `lineage`, add the change `events`, and serve the home: (base URL, tokens).

    Tokens: `all` reads everything, `datasets` is scoped to datasets.
    """
    refined_batch(spark, lakehouse, "lineage", lineage, 0)
    publish_lineage(spark, lakehouse)
    append(spark.createDataFrame(events, SILVER_COLUMNS), lakehouse, "silver.entity_change_events")
    tokens = {
        "all": create_token(lakehouse, ANN, ["audit-read"])[0],
        "datasets": create_token(lakehouse, ANN, ["audit-read"], scope=parse_scope(["entity-type=dataset"]))[0],
    }
    with serving(create_app(lakehouse, spark)) as base_url:
        yield base_url, tokens


@pytest.fixture(scope="module")
def api(spark, lakehouse):
    with served_lineage(spark, lakehouse, LINEAGE, EVENTS) as (base_url, tokens):
        with httpx.Client(base_url=base_url, timeout=60) as client:
            yield client, tokens


def get(api, token: str | None, **params) -> httpx.Response:
    client, tokens = api
    headers = {"Authorization": f"Bearer {tokens[token]}"} if token else {}
    return client.get(IMPACT_PATH, params=params, headers=headers)


def test_every_change_upstream_with_its_path(api):
    body = get(api, "all", urn=B, **WINDOW).json()
    assert body["count"] == 3
    assert [(c["hop"], c["entityUrn"], c["category"], c["actor"], [n["urn"] for n in c["path"]]) for c in body["changes"]] == [
        (0, B, "DOCUMENTATION", ANN, [B]),
        (1, JOB, "OWNER", BOB, [B, JOB]),
        (2, A, "TAG", ANN, [B, JOB, A]),
    ]  # fmt: skip
    downstream = get(api, "all", urn=A, direction="downstream", depth="3", **WINDOW).json()
    assert [(c["hop"], c["entityUrn"]) for c in downstream["changes"]] == [(0, A), (1, JOB), (2, B), (3, CHART)]


def test_a_scope_shows_and_counts_only_its_entities_and_hides_the_hops_outside_it(api):
    body = get(api, "datasets", urn=B, **WINDOW).json()
    assert body["count"] == 2
    assert [(c["entityUrn"], c["path"]) for c in body["changes"]] == [
        (B, [{"urn": B, "hidden": False}]),
        (A, [{"urn": B, "hidden": False}, {"urn": None, "hidden": True}, {"urn": A, "hidden": False}]),
    ]
    assert JOB not in str(body)
    outside = get(api, "datasets", urn=CHART, **WINDOW)
    assert outside.status_code == 404  # as for an entity that does not exist


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"urn": B, "direction": "sideways"}, "direction: 'sideways'"),
        ({"urn": B, "depth": "11"}, "depth: '11'"),
        ({"urn": B, "depth": "\u00b2"}, "depth: '\u00b2' is not a whole number"),  # a digit to str.isdigit()
        ({"urn": "orders"}, "urn: 'orders'"),
        ({"urn": B, "size": "3"}, "size: unknown parameter"),
        ({"urn": B, "since": "10000", "until": "5"}, "since: '10000'"),
    ],
)
def test_a_bad_request_names_the_parameter(api, params, message):
    response = get(api, "all", **params)
    assert response.status_code == 400 and message in response.text


def test_no_token_is_refused(api):
    assert get(api, None, urn=B).status_code == 401


def test_change_events_read_once_and_kept_still_show_the_events_added_after(spark, lakehouse, api):
    # After the module's other tests: the event added lies outside their window.
    reader = ChangeEventReader(lakehouse, cached_rows=1)  # one file kept at most: older ones read again
    everything = ChangeEventScope(None)
    assert sorted(reader.window(0, 30_000, everything)["event_time"].to_pylist()) == [2_000, 2_500, 3_000, 4_000]
    append(spark.createDataFrame([ece("late", 20_000, "TAG", "ADD", "urn:li:tag:PII", urn=B, actor=BOB)], SILVER_COLUMNS),
           lakehouse, "silver.entity_change_events")  # fmt: skip
    assert sorted(reader.window(0, 30_000, everything)["event_time"].to_pylist()) == [2_000, 2_500, 3_000, 4_000, 20_000]
    assert reader.window(3_000, 20_000, everything)["event_time"].to_pylist() == [3_000, 4_000]
    datasets = ChangeEventScope(change_event_condition(parse_scope(["entity-type=dataset"]), None))
    assert sorted(reader.window(0, 30_000, datasets)["event_time"].to_pylist()) == [2_000, 4_000, 20_000]
