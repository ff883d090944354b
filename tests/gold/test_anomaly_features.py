"""Actor activity features on a small hand-built history, against values counted by hand."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from conf.errors import InputError
from gold.anomaly_features import FEATURES, to_actor_features

DAY = 86_400_000
HOUR = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a Thursday
HIVE = "urn:li:dataset:(urn:li:dataPlatform:hive,db.a,PROD)"
HIVE_B = "urn:li:dataset:(urn:li:dataPlatform:hive,db.b,PROD)"
KAFKA = "urn:li:dataset:(urn:li:dataPlatform:kafka,topic.c,PROD)"
GLOSSARY = "urn:li:glossaryTerm:pii"
ALICE = "urn:li:corpuser:alice"
BOB = "urn:li:corpuser:bob"

# (actor, entity_urn, entity_type, category, operation, event_time)
EVENTS = [
    # alice, day 0: two documentation edits on hive at 10:00 and 11:00
    (ALICE, HIVE, "dataset", "DOCUMENTATION", "MODIFY", T0 + 10 * HOUR),
    (ALICE, HIVE_B, "dataset", "DOCUMENTATION", "MODIFY", T0 + 11 * HOUR),
    # alice, day 3 (two idle days between): a tag and a term removal on hive at 02:00 (off hours), an owner
    # added on kafka (a new platform), a schema change, and a soft delete on kafka
    (ALICE, HIVE, "dataset", "TAG", "REMOVE", T0 + 3 * DAY + 2 * HOUR),
    (ALICE, HIVE, "dataset", "GLOSSARY_TERM", "REMOVE", T0 + 3 * DAY + 2 * HOUR),
    (ALICE, KAFKA, "dataset", "OWNER", "ADD", T0 + 3 * DAY + 9 * HOUR),
    (ALICE, HIVE_B, "dataset", "TECHNICAL_SCHEMA", "MODIFY", T0 + 3 * DAY + 12 * HOUR),
    (ALICE, KAFKA, "dataset", "LIFECYCLE", "SOFT_DELETE", T0 + 3 * DAY + 20 * HOUR),
    # bob, day 3: a glossary term created (no platform) and a domain removal on hive
    (BOB, GLOSSARY, "glossaryTerm", "LIFECYCLE", "CREATE", T0 + 3 * DAY + 8 * HOUR),
    (BOB, HIVE, "dataset", "DOMAIN", "REMOVE", T0 + 3 * DAY + 8 * HOUR),
    # no actor: left out
    (None, HIVE, "dataset", "TAG", "ADD", T0 + 3 * DAY + 8 * HOUR),
]


@pytest.fixture(scope="module")
def day_features(spark: SparkSession) -> dict[tuple[str, int], dict]:
    events_df = spark.createDataFrame(
        EVENTS, "actor STRING, entity_urn STRING, entity_type STRING, category STRING, operation STRING, event_time BIGINT"
    )
    rows = to_actor_features(events_df, "day", baseline_buckets=2).collect()
    return {(row["actor"], row["bucket_start"]): row.asDict() for row in rows}


def test_one_row_per_actor_and_active_day(day_features):
    assert sorted(day_features) == [(ALICE, T0), (ALICE, T0 + 3 * DAY), (BOB, T0 + 3 * DAY)]
    assert day_features[(ALICE, T0)]["bucket_end"] == T0 + DAY
    assert day_features[(ALICE, T0)]["granularity"] == "day"


def test_counts_of_alice_day_three(day_features):
    row = day_features[(ALICE, T0 + 3 * DAY)]
    assert row["events"] == 5
    assert row["distinct_entities"] == 3  # hive a, hive b, kafka c
    assert row["distinct_platforms"] == 2
    assert row["classification_removals"] == 2  # the tag and the term
    assert row["owner_changes"] == 1
    assert row["domain_removals"] == 0
    assert row["soft_deletes"] == 1
    assert row["hard_deletes"] == 0
    assert row["schema_changes"] == 1
    assert row["creates"] == 0
    assert row["off_hours_events"] == 3  # 02:00, 02:00 and 20:00; 09:00 and 12:00 are business hours
    assert row["off_hours_share"] == pytest.approx(3 / 5)


def test_first_times_and_history_of_alice(day_features):
    first, later = day_features[(ALICE, T0)], day_features[(ALICE, T0 + 3 * DAY)]
    # Her first day says nothing new; on day 3 the two kafka events are on a platform new to her.
    assert first["new_platform_events"] == 0 and first["new_entity_type_events"] == 0
    assert later["new_platform_events"] == 2
    assert later["new_entity_type_events"] == 0
    assert first["idle_buckets"] == 0 and later["idle_buckets"] == 2
    # Baseline: the 2 days before day 3 (days 1 and 2) had no events; day 0 is outside the window.
    assert later["baseline_events"] == 0
    assert later["baseline_ratio"] == pytest.approx(5 / (0 + 1))
    assert later["history_buckets"] == 0
    # Without a past, a bucket is its own baseline.
    assert first["baseline_events"] is None and first["baseline_ratio"] == 1.0


def test_peer_mean_and_bob(day_features):
    bob = day_features[(BOB, T0 + 3 * DAY)]
    assert bob["events"] == 2
    assert bob["creates"] == 1
    assert bob["domain_removals"] == 1
    assert bob["distinct_platforms"] == 1  # the glossary term has none
    assert bob["off_hours_events"] == 0
    assert bob["peer_mean_events"] == pytest.approx((5 + 2) / 2)
    assert bob["peer_ratio"] == pytest.approx(2 / (3.5 + 1))


def test_hour_buckets(spark: SparkSession):
    events_df = spark.createDataFrame(
        EVENTS[:2], "actor STRING, entity_urn STRING, entity_type STRING, category STRING, operation STRING, event_time BIGINT"
    )
    rows = sorted(to_actor_features(events_df, "hour", baseline_buckets=24).collect(), key=lambda r: r["bucket_start"])
    assert [r["bucket_start"] for r in rows] == [T0 + 10 * HOUR, T0 + 11 * HOUR]
    assert [r["events"] for r in rows] == [1, 1]
    assert rows[1]["baseline_events"] == pytest.approx(1 / 1)  # one hour since her first bucket, 1 event in it
    assert set(FEATURES) <= set(rows[0].asDict())


def test_bad_arguments_are_named(spark: SparkSession):
    events_df = spark.createDataFrame(
        EVENTS[:1], "actor STRING, entity_urn STRING, entity_type STRING, category STRING, operation STRING, event_time BIGINT"
    )
    with pytest.raises(InputError, match="granularity: 'week'"):
        to_actor_features(events_df, "week", baseline_buckets=2)
    with pytest.raises(InputError, match="baseline_buckets: 0"):
        to_actor_features(events_df, "day", baseline_buckets=0)
