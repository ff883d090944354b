"""Input lines and their line numbers (bronze.lines): a text read's partitions put back in file order."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from bronze.lines import (
    LINE_COLUMNS,
    OFFSET_COLUMNS,
    ReadPartition,
    bound_reads,
    line_offsets,
    order_partitions,
    to_lines,
    to_numbered_lines,
    to_partition_summary,
    with_line_numbers,
)
from bronze.records import parse_snapshot_lines, parse_usage_lines
from tests.bronze.record_inputs import DEFAULT_ACTOR, LIMIT, lines_df, mcl, mcp, usage

pytestmark = pytest.mark.pure


def test_a_byte_order_mark_before_the_first_record_is_not_part_of_it(pure_spark, tmp_path: Path):
    path = tmp_path / "bom.mcl.jsonl"
    path.write_text("\ufeff" + json.dumps(mcl()) + "\n" + json.dumps(mcl(aspectName="globalTags", aspect={"value": "{}"})) + "\n", encoding="utf-8")
    read_df = to_lines(pure_spark.read.option("lineSep", "\n").text(str(path)), 0, str(path))
    numbered_df = to_numbered_lines(lines_df(pure_spark, ["1\t\ufeff" + json.dumps(mcl())]).select("value"), 0, str(path))
    for staged_df in (read_df, numbered_df):
        staged = parse_snapshot_lines(staged_df, "mcl", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT).collect()
        assert [r.reason for r in staged] == [None] * len(staged) and staged[0].aspect_name == "status"


def test_line_numbers_of_a_text_read_follow_the_file(pure_spark, tmp_path: Path):
    lines = [json.dumps(usage(timestamp=1700000000000 + i, userAgent="a" * (i % 300))) for i in range(12000)]
    lines[10] = ""
    lines[7000] = "   "
    lines[20] += "\r"  # a CRLF line break
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read_df = to_lines(pure_spark.read.option("lineSep", "\n").text(str(path)), 3, str(path))
    assert read_df.columns == list(LINE_COLUMNS)
    # Staged once, as landing does: a second read of the text may split it differently.
    parse_usage_lines(read_df, max_record_bytes=LIMIT).write.parquet(str(tmp_path / "staged"))
    staged_df = pure_spark.read.parquet(str(tmp_path / "staged"))
    summary = to_partition_summary(staged_df).collect()
    assert {r.file_index for r in summary} == {3}
    assert (sum(r.rows for r in summary), sum(r.records_read for r in summary)) == (len(lines), len(lines) - 2)
    parts = [ReadPartition(*(r[k] for k in PARTITION_FIELDS)) for r in summary]
    stored = path.read_bytes()
    order = order_partitions(parts, byte_reader(stored), len(stored))
    rows = {p.partition: p.rows for p in parts}
    offsets_df = pure_spark.createDataFrame(line_offsets({3: [(p, rows[p]) for p in order]}), OFFSET_COLUMNS)
    numbered_df = with_line_numbers(staged_df, offsets_df)
    got = {r.line_number: (r.blank, r.timestamp) for r in numbered_df.select("line_number", "blank", "timestamp").collect()}
    expected = {n: (not text.strip(), json.loads(text)["timestamp"] if text.strip() else None) for n, text in enumerate(lines, 1)}
    assert got == expected


PARTITION_FIELDS = ("partition", "rows", "bytes", "first_crc", "first_bytes", "last_crc", "last_bytes")


def byte_reader(stored: bytes):
    """read_at over in-memory bytes, counting the bytes read."""

    def read_at(offset: int, length: int) -> bytes:
        read_at.read += min(length, max(len(stored) - offset, 0))
        return stored[offset : offset + length]

    read_at.read = 0
    return read_at


def part(partition: int, lines: list[bytes], first: int, rows: int) -> ReadPartition:
    """The summary of a partition holding lines first..first+rows-1 (1-based) of `lines`."""
    held = lines[first - 1 : first - 1 + rows]
    return ReadPartition(
        partition, rows, sum(len(line) + 1 for line in held), zlib.crc32(held[0]), len(held[0]),
        zlib.crc32(held[-1]), len(held[-1]),
    )  # fmt: skip


def test_order_partitions_puts_partitions_in_file_order_from_the_bytes_at_their_bounds_or_gives_up():
    lines = [f"line {n}".encode() for n in range(1, 11)]
    stored = b"\n".join(lines) + b"\n"
    size = len(stored)
    # The engine numbered the second half of the file as partition 0.
    assert order_partitions([part(0, lines, 6, 5), part(1, lines, 1, 5)], byte_reader(stored), size) == [1, 0]
    shuffled = [part(7, lines, 4, 2), part(2, lines, 1, 3), part(5, lines, 6, 5)]
    reader = byte_reader(stored)
    assert order_partitions(shuffled, reader, size) == [2, 7, 5]
    assert reader.read < 3 * size, "only the bytes at the partitions' bounds are read"
    # Same first line, told apart by the last one.
    tied = [b"x", b"a", b"x", b"b", b"c"]
    tied_stored = b"\n".join(tied)  # no line feed after the last line
    assert order_partitions([part(0, tied, 3, 3), part(1, tied, 1, 2)], byte_reader(tied_stored), len(tied_stored)) == [1, 0]
    same = [b"x", b"y", b"x", b"y"]
    same_stored = b"\n".join(same) + b"\n"
    assert order_partitions([part(0, same, 1, 2), part(1, same, 3, 2)], byte_reader(same_stored), len(same_stored)) is None
    # Partitions that do not tile the file: a line missing, a line too many, a foreign line, a CRLF break.
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 4)], byte_reader(stored), size) is None
    shorter = b"\n".join(lines[:9]) + b"\n"
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 5)], byte_reader(shorter), len(shorter)) is None
    other = ReadPartition(1, 5, 30, zlib.crc32(b"other"), 5, 0, 0)
    assert order_partitions([part(0, lines, 1, 5), other], byte_reader(stored), size) is None
    crlf = stored.replace(b"line 6\n", b"line 6\r\n")
    assert order_partitions([part(0, lines, 1, 5), part(1, lines, 6, 5)], byte_reader(crlf), len(crlf)) is None


def test_line_offsets_count_the_lines_before_each_partition():
    offsets = line_offsets({0: [(1, 5), (0, 3), (3, 2)], 2: [(0, 4)]})
    assert sorted(offsets) == [(0, 0, 5), (0, 1, 0), (0, 3, 8), (2, 0, 0)]


def test_line_numbers_are_found_among_many_files_and_partitions(pure_spark):
    # 7 files of 3 partitions each, in file order 2, 0, 1; partition 3 of file 0 has no offset (no number).
    sizes = {(f, p): 10 + 7 * f + p for f in (0, 2, 3, 5, 8, 9, 13) for p in range(3)}
    ordered = {f: [(p, sizes[(f, p)]) for p in (2, 0, 1)] for f in {f for f, _ in sizes}}
    rows, expected = [], {}
    for (f, p), size in sizes.items():
        before = sum(sizes[(f, q)] for q in (2, 0, 1)[: (2, 0, 1).index(p)])
        for within in (0, size - 1):
            mid = (p << 33) + within
            rows.append((f, mid, None))
            expected[(f, mid)] = before + within + 1
    rows.append((5, 7, 1234))  # converted input keeps its own number
    expected[(5, 7)] = 1234
    rows.append((0, (3 << 33) + 4, None))
    expected[(0, (3 << 33) + 4)] = None
    staged_df = pure_spark.createDataFrame(rows, "file_index int, mid bigint, line_number bigint")
    offsets_df = pure_spark.createDataFrame(line_offsets(ordered), OFFSET_COLUMNS)
    numbered = with_line_numbers(staged_df, offsets_df).collect()
    assert len(numbered) == len(rows)
    assert {(r.file_index, r.mid): r.line_number for r in numbered} == expected


def test_numbered_lines_keep_the_reader_line_numbers(pure_spark):
    text_df = pure_spark.createDataFrame([("17\t" + json.dumps(mcp()),), ("40\t[1]",)], "value string")
    staged_df = parse_snapshot_lines(
        to_numbered_lines(text_df, 1, "sink.json"), "file-sink", default_actor=DEFAULT_ACTOR, max_record_bytes=LIMIT
    )
    rows = {r.line_number: r for r in with_line_numbers(staged_df, None).collect()}
    assert set(rows) == {17, 40}
    assert rows[17].reason is None and rows[17].source_file == "sink.json" and rows[17].file_index == 1
    assert rows[40].reason == "record: '[1]' is not a JSON object" and rows[40].raw_text == "[1]"


def test_bound_reads_are_the_reads_of_partitions_numbered_in_file_order():
    lines = [b"ab", b"cdef", b"g", b"hij"]  # 3, 5, 2 and 4 bytes with their line feeds: 14 in all
    parts = [part(4, lines, 3, 2), part(1, lines, 1, 2)]
    # Heads at each start as long as the longest first line ("ab") + 1; tails at each partition's last line.
    assert bound_reads(parts) == [(0, 3), (3, 5), (8, 3), (10, 4)]
    assert bound_reads([]) == []
