"""Property: any aspect history cut into any batches refines to the same events as one batch, and a batch
refined again (against the state it left behind) gives the same events and state rows again.

Histories keep each key's versions in order across the batches (a version older than the state is late
by design, and then incremental and one-batch processing rightly differ) and contain replays of earlier
records anywhere after them. The state is carried between batches with the pure `to_next_state`.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st
from pyspark.sql import functions as F

from conf.tables import table_spec
from silver.refining import refine_batch
from silver.state import to_empty_state, to_next_state, to_pre_batch_state
from tests.silver.bronze_rows import bronze_df, mcl, split_batches, to_bronze_rows

URNS = ("urn:li:dataset:(urn:li:dataPlatform:hive,p1,PROD)", "urn:li:dataset:(urn:li:dataPlatform:hive,p2,PROD)")
TAGS = ("urn:li:tag:A", "urn:li:tag:B", "urn:li:tag:C")
OWNERS = ("urn:li:corpuser:a", "urn:li:corpuser:b")
FIELDS = ("id", "name", "email")
TERMS = ("urn:li:glossaryTerm:Finance.Revenue", "urn:li:glossaryTerm:Finance.Cost")
DOMAINS = ("urn:li:domain:finance", "urn:li:domain:sales")
PROPERTIES = ("urn:li:structuredProperty:tier", "urn:li:structuredProperty:sla")
COMPARED = ("event_id", "entity_urn", "category", "operation", "modifier", "parameters", "actor", "event_time",
            "change_set_id", "old_value", "new_value", "source_order_key")


def _value(draw, aspect: str):
    if aspect == "globalTags":
        return {"tags": [{"tag": t} for t in draw(st.lists(st.sampled_from(TAGS), max_size=3))]}
    if aspect == "ownership":
        owners = draw(st.lists(st.tuples(st.sampled_from(OWNERS), st.sampled_from(("TECHNICAL_OWNER", "DATA_STEWARD"))), max_size=2))
        return {"owners": [{"owner": o, "type": t} for o, t in owners], "ownerTypes": {}}
    if aspect == "schemaMetadata":
        fields = draw(st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(("INT", "TEXT"))), max_size=3, unique_by=lambda f: f[0]))
        return {"fields": [{"fieldPath": p, "nativeDataType": t, "nullable": True,
                            "type": {"type": {"com.linkedin.schema.StringType": {}}}} for p, t in fields]}
    if aspect == "glossaryTerms":
        return {"terms": [{"urn": t} for t in draw(st.lists(st.sampled_from(TERMS), max_size=2))]}
    if aspect == "domains":
        return {"domains": draw(st.lists(st.sampled_from(DOMAINS), max_size=2))}
    if aspect == "structuredProperties":
        values = draw(st.lists(st.sampled_from(({"string": "a"}, {"string": "b"}, {"double": 1.0})), max_size=2))
        return {"properties": [{"propertyUrn": p, "values": values} for p in draw(st.lists(st.sampled_from(PROPERTIES), max_size=2, unique=True))]}
    if aspect == "editableSchemaMetadata":
        paths = draw(st.lists(st.sampled_from(FIELDS), max_size=2, unique=True))
        return {"editableSchemaFieldInfo": [{"fieldPath": p, "description": draw(st.sampled_from(("", "doc"))),
                                             "globalTags": {"tags": [{"tag": t} for t in draw(st.lists(st.sampled_from(TAGS), max_size=2))]}}
                                            for p in paths]}  # fmt: skip
    if aspect == "status":
        return {"removed": draw(st.booleans())}
    if aspect == "deprecation":
        return {"deprecated": draw(st.booleans()), "note": draw(st.sampled_from(("", "old"))), "actor": OWNERS[0]}
    return {"description": draw(st.sampled_from(("", "one", "two")))}


@st.composite
def histories(draw):
    keys = draw(st.lists(st.tuples(st.sampled_from(URNS), st.sampled_from(
        ("globalTags", "ownership", "schemaMetadata", "status", "deprecation", "editableDatasetProperties",
         "glossaryTerms", "domains", "structuredProperties", "editableSchemaMetadata"))),
        min_size=1, max_size=4, unique=True))
    versions = {key: draw(st.integers(1, 3)) for key in keys}
    # Interleave the keys' versions in any order that keeps each key's versions ascending.
    picks = draw(st.permutations([key for key in keys for _ in range(versions[key])]))
    seen = {key: 0 for key in keys}
    records = []
    for index, key in enumerate(picks):
        seen[key] += 1
        urn, aspect = key
        records.append(mcl(urn, aspect, _value(draw, aspect), version=seen[key], time=1700000000000 + index))
    for urn in {u for u, _ in keys}:
        records.insert(0, mcl(urn, "datasetKey", {"name": urn}, version=1, time=1690000000000))
    if draw(st.booleans()):
        records.append(mcl(URNS[0], "datasetKey", None, version=1, time=1800000000000, change_type="DELETE"))
    for _ in range(draw(st.integers(0, 2))):
        original = draw(st.integers(0, len(records) - 1))
        records.insert(draw(st.integers(original + 1, len(records))), records[original])
    cuts = draw(st.lists(st.integers(1, max(1, len(records) - 1)), max_size=3))
    return records, cuts, draw(st.integers(0, 3))


def _local(df):
    """The DataFrame's rows as a new in-memory DataFrame: each batch starts from plain data, not a long plan."""
    return df.sparkSession.createDataFrame(df.collect(), df.schema)


def _comparable(rows) -> list[str]:
    return sorted(json.dumps({c: r[c] for c in COMPARED}, sort_keys=True) for r in rows)


def _refine(batch_df, state_df, batch_id, landed_df):
    """Events and new state rows of one batch against `state_df` (after reverting rows this batch wrote).

    `landed_df` holds the bronze rows of every batch so far: a reverted row's JSON is looked up there.
    """
    pre_state_df = to_pre_batch_state(state_df, batch_id, landed_df)
    refined = refine_batch(batch_df, pre_state_df, "OWNER", stage=lambda df, _step: _local(df))
    events = [r.asDict(recursive=True) for r in refined.events_df.collect()]
    state_rows_df = refined.state_rows_df.withColumn("updated_at", F.lit(None).cast("timestamp"))
    return events, _local(state_rows_df.select(*table_spec("silver.aspect_state").column_names))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=histories())
def test_batches_refine_to_the_events_of_one_batch_and_a_rerun_adds_nothing(spark, case):
    records, cuts, rerun_pick = case
    whole_df = bronze_df(spark, to_bronze_rows(records, "all"))
    one_batch = refine_batch(whole_df, to_empty_state(whole_df), "OWNER", stage=lambda df, _step: _local(df)).events_df.collect()

    state_df = spark.createDataFrame([], table_spec("silver.aspect_state").columns)
    batches = split_batches(records, cuts)
    incremental = []
    landed_rows = []
    for index, rows in enumerate(batches):
        batch_id = rows[0]["batch_id"]
        batch_df = bronze_df(spark, rows)
        landed_rows += rows
        landed_df = bronze_df(spark, landed_rows)
        events, state_rows_df = _refine(batch_df, state_df, batch_id, landed_df)
        incremental += events
        state_df = _local(to_next_state(state_df, state_rows_df))
        if index == rerun_pick % len(batches):
            again_events, again_rows_df = _refine(batch_df, state_df, batch_id, landed_df)
            assert _comparable(again_events) == _comparable(events)
            assert sorted(map(str, again_rows_df.collect())) == sorted(map(str, state_rows_df.collect()))
    assert _comparable(incremental) == _comparable([r.asDict(recursive=True) for r in one_batch])
    assert len({e["event_id"] for e in incremental}) == len(incremental)
