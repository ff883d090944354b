"""Pseudonyms computed by the engine equal HMAC-SHA256 computed here, and replace every person urn in text."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from pyspark.sql import functions as F

from bronze.pseudonym_rules import pseudonym_of
from bronze.pseudonyms import to_pseudonym, with_pseudonymous_text

pytestmark = pytest.mark.pure

SECRET = b"s" * 32


def test_the_engine_computes_the_keyed_pseudonym_python_does(pure_spark):
    df = pure_spark.createDataFrame([("urn:li:corpuser:jdoe",), (None,), ("urn:li:corpuser:p-0123456789abcdef01234567",)], "u string")
    got = [r.p for r in df.select(to_pseudonym(F.col("u"), SECRET).alias("p")).collect()]
    expected = "urn:li:corpuser:p-" + hmac.new(SECRET, b"urn:li:corpuser:jdoe", hashlib.sha256).hexdigest()[:24]
    assert got == [expected, None, "urn:li:corpuser:p-0123456789abcdef01234567"]
    assert pseudonym_of("urn:li:corpuser:jdoe", SECRET) == expected


def test_every_person_urn_in_text_is_replaced_and_none_inside_a_longer_one(pure_spark):
    text = '{"owners":[{"owner":"urn:li:corpuser:ann"},{"owner":"urn:li:corpuser:ann2"}],"by":"urn:li:corpuser:ann"}'
    df = pure_spark.createDataFrame([(text,)], "t string")
    got = df.select(with_pseudonymous_text(F.col("t"), SECRET).alias("t")).collect()[0].t
    ann, ann2 = pseudonym_of("urn:li:corpuser:ann", SECRET), pseudonym_of("urn:li:corpuser:ann2", SECRET)
    assert got == text.replace("urn:li:corpuser:ann2", ann2).replace('urn:li:corpuser:ann"', ann + '"')
    assert got.count(ann) == 2 and got.count(ann2) == 1
