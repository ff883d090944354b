"""The chain's pure parts against digests written out by hand (so an outside implementation can check itself)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from conf.errors import InputError
from gold.audit_chain import (
    GENESIS_DIGEST,
    BatchDigest,
    ChainKey,
    batch_digest,
    canonical_json,
    canonical_json_lines,
    diff_rows,
    first_broken_link,
    new_link,
    next_link_position,
    signature_valid,
)

# Batch 1: two gold.audit_events-like rows given out of key order, one with non-ASCII text and a quote.
BATCH_ONE = [
    {"event_id": "e2", "actor_urn": "urn:li:corpuser:bob", "timestamp": 1700000000500, "raw_event": 'say "hi"',
     "event_date": date(2023, 11, 14), "batch_id": "b-1"},
    {"event_id": "e1", "actor_urn": "urn:li:corpuser:zoë", "timestamp": 1700000000000, "raw_event": None,
     "event_date": date(2023, 11, 14), "batch_id": "b-1"},
]  # fmt: skip
BATCH_ONE_LINES = (
    '{"actor_urn":"urn:li:corpuser:zoë","batch_id":"b-1","event_date":"2023-11-14","event_id":"e1",'
    '"raw_event":null,"timestamp":1700000000000}\n'
    '{"actor_urn":"urn:li:corpuser:bob","batch_id":"b-1","event_date":"2023-11-14","event_id":"e2",'
    '"raw_event":"say \\"hi\\"","timestamp":1700000000500}\n'
)
# Batch 2: one ChangeEvent-like row with a decimal version, a boolean, a map and a newline in a value.
BATCH_TWO = [
    {"id": "x", "current_version": Decimal("0.2"), "major_change": False, "params": {"b": "2", "a": "1"},
     "entity": "line1\nline2", "batch_id": "b-2"},
]  # fmt: skip
BATCH_TWO_LINES = (
    '{"batch_id":"b-2","current_version":"0.2","entity":"line1\\nline2","id":"x","major_change":false,'
    '"params":{"a":"1","b":"2"}}\n'
)


def test_batch_one_digest_matches_the_hand_written_canonical_lines():
    expected = hashlib.sha256(BATCH_ONE_LINES.encode("utf-8")).hexdigest()
    assert batch_digest(BATCH_ONE, "event_id") == (2, expected)


def test_batch_two_digest_matches_the_hand_written_canonical_lines():
    expected = hashlib.sha256(BATCH_TWO_LINES.encode("utf-8")).hexdigest()
    assert batch_digest(BATCH_TWO, "id") == (1, expected)


def test_arrow_lines_of_the_hand_written_batches_hash_to_the_same_digests():
    one = pa.table({
        "event_id": ["e1", "e2"], "actor_urn": ["urn:li:corpuser:zoë", "urn:li:corpuser:bob"],
        "timestamp": pa.array([1700000000000, 1700000000500], pa.int64()), "raw_event": [None, 'say "hi"'],
        "event_date": pa.array([date(2023, 11, 14)] * 2, pa.date32()), "batch_id": ["b-1", "b-1"],
    })  # fmt: skip
    two = pa.table({
        "id": ["x"], "current_version": pa.array([Decimal("0.2")], pa.decimal128(10, 1)), "major_change": [False],
        "params": pa.array([[("b", "2"), ("a", "1")]], pa.map_(pa.string(), pa.string())),
        "entity": ["line1\nline2"], "batch_id": ["b-2"],
    })  # fmt: skip
    for table, lines in ((one, BATCH_ONE_LINES), (two, BATCH_TWO_LINES)):
        assert "".join(canonical_json_lines(table).to_pylist()) == lines
        digest = BatchDigest()
        digest.add_lines(canonical_json_lines(table))
        assert (digest.row_count, digest.hexdigest()) == (table.num_rows, hashlib.sha256(lines.encode("utf-8")).hexdigest())


@pytest.mark.parametrize(
    "text",
    ['plain', 'q"uote', "back\\slash", "tab\tnew\nline", "ctl\x01\x1f", "del\x7f", "é😀\u2028", "", None],
)
def test_arrow_lines_escape_strings_as_the_row_encoder_does(text):
    table = pa.table({"b": pa.array([text, "x"], pa.string()), "a": pa.array([None, 7], pa.int64()), "f": [True, None]})
    expected = canonical_json({"b": text, "a": None, "f": True}) + "\n" + canonical_json({"b": "x", "a": 7, "f": None}) + "\n"
    assert "".join(canonical_json_lines(table).to_pylist()) == expected


def test_canonical_timestamp_is_utc_with_microseconds():
    moment = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    assert canonical_json({"t": moment}) == '{"t":"2024-01-02T03:04:05.000006Z"}'


def test_a_float_has_no_canonical_form():
    with pytest.raises(InputError, match="float"):
        canonical_json({"score": 0.5})


def test_link_digest_is_the_sha256_of_the_canonical_link_fields():
    link = new_link(0, "gold.audit_events", "b-1", 3, 2, "ab" * 32, GENESIS_DIGEST, 1700000000000, ChainKey("none"))
    text = (
        '{"batch_digest":"' + "ab" * 32 + '","batch_id":"b-1","delta_version":3,"prev_digest":"' + "0" * 64 + '",'
        '"recorded_at_ms":1700000000000,"row_count":2,"seq":0,"table_key":"gold.audit_events"}'
    )
    assert link["link_digest"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert link["signature"] is None and link["key_id"] is None


def test_hmac_signature_is_hmac_sha256_of_the_digest_text():
    key = ChainKey("hmac", b"0123456789abcdef0123")
    link = new_link(0, "t", "b", 1, 1, "cd" * 32, GENESIS_DIGEST, 1, key)
    expected = hmac.new(b"0123456789abcdef0123", link["link_digest"].encode("ascii"), hashlib.sha256).hexdigest()
    assert link["signature"] == expected
    assert link["key_id"] == "hmac-sha256:" + hashlib.sha256(b"0123456789abcdef0123").hexdigest()[:16]
    assert signature_valid(link["link_digest"], link["signature"], link["key_id"], key)
    assert not signature_valid(link["link_digest"], link["signature"], link["key_id"], ChainKey("hmac", b"another-key-bytes!"))


def test_ed25519_signature_verifies_with_the_public_key_alone():
    key = ChainKey("ed25519", bytes(range(32)))
    link = new_link(0, "t", "b", 1, 1, "cd" * 32, GENESIS_DIGEST, 1, key)
    assert link["key_id"].startswith("ed25519:") and len(link["key_id"]) == len("ed25519:") + 64
    assert signature_valid(link["link_digest"], link["signature"], link["key_id"], ChainKey("none"))
    forged = "00" * 64
    assert not signature_valid(link["link_digest"], forged, link["key_id"], ChainKey("none"))


def _chain(count: int) -> list[dict]:
    links, prev = [], GENESIS_DIGEST
    for seq in range(count):
        link = new_link(seq, "t", f"b-{seq}", seq, 1, f"{seq:064x}", prev, 1000 + seq, ChainKey("none"))
        links.append(link)
        prev = link["link_digest"]
    return links


def test_an_intact_chain_has_no_broken_link():
    assert first_broken_link(_chain(3), ChainKey("none")) is None


def test_an_edited_link_is_named():
    links = _chain(3)
    links[1] = {**links[1], "row_count": 5}
    index, reason = first_broken_link(links, ChainKey("none"))
    assert index == 1 and "edited" in reason


def test_a_removed_link_is_named():
    links = _chain(3)
    del links[1]
    index, reason = first_broken_link(links, ChainKey("none"))
    assert index == 1 and "removed or inserted" in reason


def test_unsigned_links_fail_when_signing_is_on():
    index, reason = first_broken_link(_chain(1), ChainKey("hmac", b"0123456789abcdef"))
    assert index == 0 and "signature" in reason


def test_diff_rows_names_missing_added_and_changed_keys():
    diff = diff_rows({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "9", "d": "4"})
    assert (diff.missing, diff.added, diff.changed) == (("c",), ("d",), ("b",))


@pytest.mark.parametrize(
    ("seqs", "expected_seq"),
    [([], 0), ([0, 1, 2], 3), ([2, 0, 1], 3), ([0, 2], 3), ([0, 1, 5], 6)],
)
def test_the_next_link_goes_after_the_greatest_seq_whatever_the_count_or_order(seqs, expected_seq):
    links = [{"seq": seq, "link_digest": f"{seq:064d}"} for seq in seqs]
    expected_prev = f"{max(seqs):064d}" if seqs else GENESIS_DIGEST
    assert next_link_position(links) == (expected_seq, expected_prev)
