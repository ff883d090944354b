"""Landing files that used to lose records or stop the batch: glob characters in names, damaged gzip,
a first record too long for detection's window, and the line checks that catch a read of the wrong lines."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import zlib
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bronze.formats import detect_kind
from conf.errors import InputError, LakehouseError
from conf.settings import Settings
from pipelines.batch.landing.discovery import HeadLines
from pipelines.batch.landing.staging import check_line_count
from pipelines.runtime.io import read_table
from pipelines.batch.landing import ALREADY_LANDED, LANDED, UNDETECTED, land_paths
from tests.conftest import FIXTURES, make_settings, register_fresh_tables

MCL_FIXTURE = FIXTURES / "history-small.mcl.jsonl"
SINK_FIXTURE = FIXTURES / "history-small.file-sink.json"


@pytest.fixture
def settings(spark: SparkSession, tmp_path: Path) -> Settings:
    """A fresh lakehouse home for one test, its tables registered in the session."""
    fresh = make_settings(tmp_path / "home")
    register_fresh_tables(spark, fresh)
    return fresh


def rows_of(spark: SparkSession, settings: Settings, key: str) -> list[dict]:
    return [r.asDict() for r in read_table(spark, settings, key).collect()]


def usage_lines(first: int, count: int, **extra) -> list[str]:
    """`count` distinct usage event lines, with timestamps first, first + 1, ..."""
    return [
        json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": n, **extra})
        for n in range(first, first + count)
    ]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def counts_by_name(report) -> dict[str, tuple]:
    return {
        Path(f.path).name: (f.status, f.records_read, f.records_landed, f.records_quarantined, f.duplicates_skipped)
        for f in report.files
    }


def test_file_names_with_glob_characters_land_their_own_lines(spark, settings, tmp_path):
    mcl = MCL_FIXTURE.read_text().splitlines()
    inputs = tmp_path / "in"
    inputs.mkdir()
    # The engine reads `export[1]...` as a pattern matching `export1...`; `only[2]...` matches no file at all.
    write_lines(inputs / "export[1].mcl.jsonl", mcl[0:3])
    write_lines(inputs / "export1.mcl.jsonl", mcl[3:5])
    write_lines(inputs / "only[2].mcl.jsonl", mcl[5:7])
    write_lines(inputs / "star*and?.jsonl", usage_lines(1, 2))
    write_lines(inputs / "brace{a,b}.jsonl", usage_lines(11, 3))
    write_lines(inputs / "back\\slash.jsonl", usage_lines(21, 1))
    (inputs / "packed[3].jsonl.gz").write_bytes(gzip.compress("\n".join(usage_lines(31, 4)).encode()))

    report = land_paths(spark, settings, [inputs])
    assert counts_by_name(report) == {
        "back\\slash.jsonl": (LANDED, 1, 1, 0, 0),
        "brace{a,b}.jsonl": (LANDED, 3, 3, 0, 0),
        "export1.mcl.jsonl": (LANDED, 2, 2, 0, 0),
        "export[1].mcl.jsonl": (LANDED, 3, 3, 0, 0),
        "only[2].mcl.jsonl": (LANDED, 2, 2, 0, 0),
        "packed[3].jsonl.gz": (LANDED, 4, 4, 0, 0),
        "star*and?.jsonl": (LANDED, 2, 2, 0, 0),
    }
    # Every row carries the values of its own file's line.
    for row in rows_of(spark, settings, "bronze.aspect_snapshots"):
        line = json.loads(Path(row["source_file"]).read_text().splitlines()[row["line_number"] - 1])
        assert (row["entity_urn"], row["created_time"]) == (line["entityUrn"], line["created"]["time"])
    usage = rows_of(spark, settings, "bronze.usage_events")
    assert sorted((Path(r["source_file"]).name, r["line_number"], r["timestamp"]) for r in usage) == [
        ("back\\slash.jsonl", 1, 21),
        ("brace{a,b}.jsonl", 1, 11), ("brace{a,b}.jsonl", 2, 12), ("brace{a,b}.jsonl", 3, 13),
        ("packed[3].jsonl.gz", 1, 31), ("packed[3].jsonl.gz", 2, 32), ("packed[3].jsonl.gz", 3, 33),
        ("packed[3].jsonl.gz", 4, 34),
        ("star*and?.jsonl", 1, 1), ("star*and?.jsonl", 2, 2),
    ]
    # Landing again skips every file: their ledger rows hold what they really landed.
    again = land_paths(spark, settings, [inputs])
    assert {f.status for f in again.files} == {ALREADY_LANDED}


def test_a_lone_carriage_return_does_not_split_a_record(spark, settings, tmp_path):
    # The engine also breaks lines at a lone CR; the file has one line there (JSON whitespace), so it is
    # numbered in Python, where only LF (and CRLF) ends a line.
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b'{"type": "LogInEvent",\r"actorUrn": "urn:li:corpuser:a", "timestamp": 1}\n'
                     + usage_lines(2, 1)[0].encode() + b"\r\n")
    report = land_paths(spark, settings, [path])
    assert counts_by_name(report) == {"cr.jsonl": (LANDED, 2, 2, 0, 0)}
    assert sorted((r["line_number"], r["timestamp"]) for r in rows_of(spark, settings, "bronze.usage_events")) == [
        (1, 1), (2, 2)]


def test_a_line_count_that_does_not_match_the_file_is_an_error_naming_both_counts(tmp_path):
    path = write_lines(tmp_path / "usage.jsonl", usage_lines(1, 2))
    check_line_count(path, 2, "lines read", 2)
    check_line_count(path, 2, "lines read", None)  # unknown (a damaged gzip): nothing to check
    with pytest.raises(LakehouseError, match=r"usage\.jsonl: 3 lines read but the file has 2 lines"):
        check_line_count(path, 3, "lines read", 2)


def test_a_truncated_gzip_lands_its_readable_lines_and_quarantines_the_rest(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    lines = usage_lines(1, 3000, userAgent="agent")  # more than detection reads
    packed = gzip.compress("".join(f"{line}\n" for line in lines).encode())
    cut = packed[: len(packed) // 2]
    (inputs / "cut.jsonl.gz").write_bytes(cut)
    readable = zlib.decompressobj(31).decompress(cut).decode()
    complete = readable.count("\n")
    # Cut inside the first lines: detection uses the lines before the damage.
    short = gzip.compress("".join(f"{line}\n" for line in usage_lines(5001, 5)).encode())
    short_cut = next(n for n in range(len(short)) if b"\n" in zlib.decompressobj(31).decompress(short[:n])) + 8
    (inputs / "short.jsonl.gz").write_bytes(short[:short_cut])
    short_complete = zlib.decompressobj(31).decompress(short[:short_cut]).count(b"\n")
    # Zero padding after the gzip data: the engine fails on it, Python's gzip reads it.
    padded_lines = usage_lines(6001, 3)
    (inputs / "padded.jsonl.gz").write_bytes(gzip.compress("\n".join(padded_lines).encode()) + b"\0" * 16)
    write_lines(inputs / "whole.jsonl", usage_lines(7001, 2))

    report = land_paths(spark, settings, [inputs])
    assert 200 < complete < 3000 and 0 < short_complete < 5
    assert counts_by_name(report) == {
        "cut.jsonl.gz": (LANDED, complete + 1, complete, 1, 0),
        "padded.jsonl.gz": (LANDED, 3, 3, 0, 0),
        "short.jsonl.gz": (LANDED, short_complete + 1, short_complete, 1, 0),
        "whole.jsonl": (LANDED, 2, 2, 0, 0),
    }
    quarantined = {Path(r["source_file"]).name: r for r in rows_of(spark, settings, "bronze.quarantine")}
    row = quarantined["cut.jsonl.gz"]
    assert row["line_number"] == complete + 1 and row["field"] == "record"
    assert row["reason"] == (
        f"record: file truncated or corrupt after line {complete} "
        "(Compressed file ended before the end-of-stream marker was reached)"
    )
    assert row["raw_text"] == readable[readable.rfind("\n") + 1 :] and lines[complete].startswith(row["raw_text"])
    assert quarantined["short.jsonl.gz"]["reason"].startswith(
        f"record: file truncated or corrupt after line {short_complete} (")
    landed = sorted(r["timestamp"] for r in rows_of(spark, settings, "bronze.usage_events")
                    if r["source_file"].endswith("cut.jsonl.gz"))
    assert landed == list(range(1, complete + 1))

    # Named explicitly, the file lands the same way (its records are duplicates by now).
    again = shutil.copy(inputs / "cut.jsonl.gz", tmp_path / "cut-copy.jsonl.gz")
    explicit = land_paths(spark, settings, [again])
    assert counts_by_name(explicit) == {"cut-copy.jsonl.gz": (LANDED, complete + 1, 0, 1, complete)}


def test_a_truncated_gzip_file_sink_lands_the_elements_before_the_damage(spark, settings, tmp_path):
    packed = gzip.compress(SINK_FIXTURE.read_bytes())
    path = tmp_path / "sink.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    report = land_paths(spark, settings, [path])
    (result,) = report.files
    assert result.kind == "file-sink" and result.status == LANDED
    assert result.records_landed > 100 and result.records_quarantined == 1
    assert result.records_read == result.records_landed + result.records_quarantined + result.duplicates_skipped
    (row,) = rows_of(spark, settings, "bronze.quarantine")
    assert re.fullmatch(r"record: file truncated or corrupt after line \d+ \(Compressed file ended .*\)", row["reason"])
    # The row is the element the damage cut: its line and the text read of it.
    assert row["raw_text"].startswith('{\n    "entityType"') and SINK_FIXTURE.read_text().splitlines()[
        row["line_number"] - 1].strip() == "{"


def test_a_gzip_of_which_nothing_can_be_read_is_reported_as_unreadable(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    write_lines(inputs / "ok.jsonl", usage_lines(1, 1))
    # A forced kind skips detection, which reports such a file otherwise; landing reports it the same way.
    report = land_paths(spark, settings, [inputs], kind="usage")
    assert [(Path(f.path).name, f.status, f.records_read) for f in report.files] == [
        ("broken.jsonl.gz", UNDETECTED, 0),
        ("ok.jsonl", LANDED, 1),
    ]
    assert "broken.jsonl.gz: cannot be read (Not a gzipped file" in report.files[0].note
    assert [Path(r["source_file"]).name for r in rows_of(spark, settings, "bronze.landed_files")] == ["ok.jsonl"]
    with pytest.raises(InputError, match=r"broken\.jsonl\.gz: cannot be read \(Not a gzipped file"):
        land_paths(spark, settings, [inputs / "broken.jsonl.gz"], kind="usage")


def test_a_first_record_longer_than_the_detection_window_is_quarantined_and_the_rest_lands(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    huge = usage_lines(1, 1, userAgent="x" * (9 << 20))[0]  # over the 8 MiB detection reads of one line
    write_lines(inputs / "huge.jsonl", [huge, *usage_lines(2, 2)])
    report = land_paths(spark, settings, [inputs])
    assert counts_by_name(report) == {"huge.jsonl": (LANDED, 3, 2, 1, 0)}
    assert report.files[0].kind == "usage"
    (row,) = rows_of(spark, settings, "bronze.quarantine")
    assert row["line_number"] == 1 and row["reason"] == (
        f"record: {len(huge)} bytes is over ingest.max_record_bytes (1048576); "
        "raw_text keeps the first 1048576 characters"
    )
    explicit = land_paths(spark, settings, [shutil.copy(inputs / "huge.jsonl", tmp_path / "named.jsonl")])
    assert counts_by_name(explicit) == {"named.jsonl": (LANDED, 3, 0, 1, 2)}


def test_a_cut_first_line_still_shows_a_file_sink_array(tmp_path):
    element = json.loads(SINK_FIXTURE.read_text())[0]
    path = tmp_path / "one-line.json"
    path.write_text(json.dumps([element, element]))  # one line, longer than the detection window below
    with open(path, encoding="utf-8") as handle:
        head = HeadLines(handle, max_chars=100)
        assert detect_kind(head) == "file-sink"
        assert head.lines_given == 1 and head.error is None
