"""Pseudonyms computed by the engine equal HMAC-SHA256 computed here, and replace every person urn in text."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

import pytest
from pyspark.sql import functions as F

from bronze.pseudonym_rules import PERSON_URN_PATTERN, is_pseudonym, pseudonym_of
from bronze.pseudonyms import (
    found_identities,
    pseudonymise_snapshots,
    pseudonymise_usage,
    to_pseudonym,
    with_pseudonymous_text,
)
from bronze.records import parse_snapshot_lines, parse_usage_lines
from tests.bronze.record_inputs import ACTOR, DEFAULT_ACTOR, LIMIT, lines_df, mcl, usage


SECRET = b"s" * 32


@pytest.mark.pure
def test_the_engine_computes_the_keyed_pseudonym_python_does(pure_spark):
    df = pure_spark.createDataFrame([("urn:li:corpuser:jdoe",), (None,), ("urn:li:corpuser:p-0123456789abcdef01234567",)], "u string")
    got = [r.p for r in df.select(to_pseudonym(F.col("u"), SECRET).alias("p")).collect()]
    expected = "urn:li:corpuser:p-" + hmac.new(SECRET, b"urn:li:corpuser:jdoe", hashlib.sha256).hexdigest()[:24]
    assert got == [expected, None, "urn:li:corpuser:p-0123456789abcdef01234567"]
    assert pseudonym_of("urn:li:corpuser:jdoe", SECRET) == expected


@pytest.mark.pure
def test_every_person_urn_in_text_is_replaced_and_none_inside_a_longer_one(pure_spark):
    text = '{"owners":[{"owner":"urn:li:corpuser:ann"},{"owner":"urn:li:corpuser:ann2"}],"by":"urn:li:corpuser:ann"}'
    df = pure_spark.createDataFrame([(text,)], "t string")
    got = df.select(with_pseudonymous_text(F.col("t"), SECRET).alias("t")).collect()[0].t
    ann, ann2 = pseudonym_of("urn:li:corpuser:ann", SECRET), pseudonym_of("urn:li:corpuser:ann2", SECRET)
    assert got == text.replace("urn:li:corpuser:ann2", ann2).replace('urn:li:corpuser:ann"', ann + '"')
    assert got.count(ann) == 2 and got.count(ann2) == 1


@pytest.mark.pure
def test_a_person_whose_urn_starts_every_pseudonym_leaves_the_other_pseudonyms_whole(pure_spark):
    # `urn:li:corpuser:p` is the start of every pseudonym, and `...:p-smith` looks like one but is not.
    kept = "urn:li:corpuser:p-0123456789abcdef01234567"
    text = json.dumps({"owners": ["urn:li:corpuser:pat", "urn:li:corpuser:p", "urn:li:corpuser:p-smith", kept], "by": "urn:li:corpuser:p"})
    df = pure_spark.createDataFrame([(text,), ("urn:li:corpuser:p",), (kept,)], "t string")
    got = [r.t for r in df.select(with_pseudonymous_text(F.col("t"), SECRET).alias("t")).collect()]
    expected = [re.sub(PERSON_URN_PATTERN, lambda m: pseudonym_of(m.group(0), SECRET), t) for t in (text, "urn:li:corpuser:p", kept)]
    assert got == expected
    owners = json.loads(got[0])["owners"]
    assert owners[3] == kept and len(set(owners)) == 4 and all(is_pseudonym(owner) for owner in owners)


def test_only_the_whole_shape_of_a_pseudonym_is_one():
    pseudonym = pseudonym_of("urn:li:corpuser:jdoe", SECRET)
    assert is_pseudonym(pseudonym) and pseudonym_of(pseudonym, SECRET) == pseudonym
    for person in ("urn:li:corpuser:p-smith", "urn:li:corpuser:p", pseudonym + "0", pseudonym + "\n", pseudonym.upper()):
        assert not is_pseudonym(person)
        assert pseudonym_of(person, SECRET) != person
    assert is_pseudonym(pseudonym_of("10.0.0.1", SECRET, "ip-"), "ip-") and not is_pseudonym(pseudonym, "ip-")
    with pytest.raises(ValueError, match="prefix: 'x-'"):
        is_pseudonym(pseudonym, "x-")


def _found(pseudonymous_df) -> set[tuple[str, str, str]]:
    """Every row's found identities, as landing records them (`found_identities`)."""
    rows = pseudonymous_df.select(F.explode(found_identities(pseudonymous_df)).alias("f")).collect()
    return {(r.f.kind, r.f.identity, r.f.owner) for r in rows}


def test_staged_snapshots_keep_every_person_urn_they_replaced_once_each(spark):
    owners = '{"owners":[{"owner":"urn:li:corpuser:ann"},{"owner":"urn:li:corpuser:ann2"}]}'
    good = mcl(aspectName="ownership", aspect={"value": owners, "contentType": "application/json"})
    broken = '{"entityUrn": "urn:li:corpuser:bob", "changeType": 7'
    staged_df = parse_snapshot_lines(
        lines_df(spark, [json.dumps(good), broken]), "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT
    )
    pseudonymous_df = pseudonymise_snapshots(staged_df, SECRET)
    rows = pseudonymous_df.orderBy("line_number").collect()
    people = {"urn:li:corpuser:ann", "urn:li:corpuser:ann2", ACTOR, "urn:li:corpuser:bob"}
    assert _found(pseudonymous_df) == {("person", urn, urn) for urn in people}
    # Staged as the urns alone, each once per row.
    assert [sorted(r.found_identities) for r in rows] == [sorted(people - {"urn:li:corpuser:bob"}), ["urn:li:corpuser:bob"]]
    # No identity is left in the stored columns, the landed row's hash is the pseudonymous fields' and the
    # quarantined one has none.
    stored = json.dumps([{k: v for k, v in r.asDict().items() if k != "found_identities"} for r in rows])
    assert not re.search(r"urn:li:corpuser:(?!p-)", stored)
    original = staged_df.orderBy("line_number").collect()
    assert rows[0].record_hash not in (None, original[0].record_hash) and rows[1].record_hash is None


def test_staged_snapshots_of_a_person_every_pseudonym_starts_with_keep_each_pseudonym_whole(spark):
    # The entity is `urn:li:corpuser:p`; its aspect names `...:pat` and `...:p-smith` too.
    owners = '{"owners":[{"owner":"urn:li:corpuser:pat"},{"owner":"urn:li:corpuser:p-smith"},{"owner":"urn:li:corpuser:p"}]}'
    record = mcl(entityUrn="urn:li:corpuser:p", entityType="corpuser", aspectName="ownership", aspect={"value": owners, "contentType": "application/json"})
    staged_df = parse_snapshot_lines(lines_df(spark, [json.dumps(record)]), "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT)
    row = pseudonymise_snapshots(staged_df, SECRET).collect()[0]
    pseudonymous = lambda text: re.sub(PERSON_URN_PATTERN, lambda m: pseudonym_of(m.group(0), SECRET), text)  # noqa: E731
    original = staged_df.collect()[0]
    assert (row.entity_urn, row.aspect_json) == (pseudonymous(original.entity_urn), pseudonymous(original.aspect_json))
    assert sorted(row.found_identities) == sorted({"urn:li:corpuser:p", "urn:li:corpuser:pat", "urn:li:corpuser:p-smith", ACTOR})


def test_staged_usage_keeps_its_address_and_agent_owned_by_the_actor_also_when_quarantined(spark):
    good = usage(sourceIP="10.0.0.1", userAgent="Mozilla/5.0")
    # A timestamp that is not a number quarantines the record: its fields are read from its text.
    bad = usage(actorUrn="urn:li:corpuser:bob", timestamp="soon", sourceIP="10.0.0.2")
    staged_df = parse_usage_lines(lines_df(spark, [json.dumps(good), json.dumps(bad)]), max_record_bytes=LIMIT)
    pseudonymous_df = pseudonymise_usage(staged_df, SECRET)
    rows = pseudonymous_df.orderBy("line_number").collect()
    assert rows[0].reason is None and rows[1].reason is not None
    assert _found(pseudonymous_df) == {
        ("person", ACTOR, ACTOR), ("ip", "10.0.0.1", ACTOR), ("user-agent", "Mozilla/5.0", ACTOR),
        ("person", "urn:li:corpuser:bob", "urn:li:corpuser:bob"), ("ip", "10.0.0.2", "urn:li:corpuser:bob"),
    }  # fmt: skip
    assert (rows[0].source_ip, rows[0].user_agent) == (pseudonym_of("10.0.0.1", SECRET, "ip-"), pseudonym_of("Mozilla/5.0", SECRET, "ua-"))
