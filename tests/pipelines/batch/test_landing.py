"""Landing into real bronze Delta tables: fixtures, re-landing, bad input, crash recovery, the CLI."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import shutil
import signal
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import TABLES, table_location
from pipelines.runtime.io import append, read_table
from pipelines.batch.landing import ALREADY_LANDED, LANDED, UNDETECTED, land_paths, mark_landing_begun
from pipelines.runtime.progress import committed_batches
from tests.conftest import FIXTURES, make_settings, register_fresh_tables
from tests.pipelines.cli.test_cli import run_cli

MCL_FIXTURE = FIXTURES / "history-small.mcl.jsonl"
MCP_FIXTURE = FIXTURES / "history-small.mcp.jsonl"
SINK_FIXTURE = FIXTURES / "history-small.file-sink.json"
DEFAULT_ACTOR = "urn:li:corpuser:datahub"
BRONZE_TABLES = [key for key in TABLES if key.startswith("bronze.")]
# Columns that name the batch or the landing time: they differ between any two landings by design.
VOLATILE = {"batch_id", "landed_at", "quarantined_at", "land_date"}


@pytest.fixture
def settings(spark: SparkSession, tmp_path: Path) -> Settings:
    """A fresh lakehouse home for one test, its tables registered in the session."""
    fresh = make_settings(tmp_path / "home")
    register_fresh_tables(spark, fresh)
    return fresh


def rows_of(spark: SparkSession, settings: Settings, key: str, *where: str) -> list[dict]:
    df = read_table(spark, settings, key)
    for condition in where:
        df = df.filter(condition)
    return [r.asDict() for r in df.collect()]


def bronze_contents(spark: SparkSession, settings: Settings) -> dict[str, list[str]]:
    """Every bronze table's rows, volatile columns left out, as sorted JSON strings (read by location)."""
    contents = {}
    for key in BRONZE_TABLES:
        df = spark.read.format("delta").load(str(table_location(settings, key)))
        kept = [c for c in df.columns if c not in VOLATILE]
        contents[key] = sorted(json.dumps(r.asDict(), sort_keys=True, default=str) for r in df.select(*kept).collect())
    return contents


def fixture_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_three_fixture_forms_land_the_same_snapshots(spark, settings):
    calls = []
    report = land_paths(spark, settings, [FIXTURES], progress=lambda *args: calls.append(args))
    by_name = {Path(f.path).name: f for f in report.files}
    assert [(f.kind, f.status, f.records_read, f.records_landed, f.records_quarantined, f.duplicates_skipped)
            for f in (by_name[p.name] for p in (MCL_FIXTURE, MCP_FIXTURE, SINK_FIXTURE))] == [
        ("mcl", LANDED, 374, 374, 0, 0),
        ("mcp", LANDED, 374, 374, 0, 0),
        ("file-sink", LANDED, 362, 362, 0, 0),
    ]
    assert report.committed and committed_batches(spark, settings) == [report.batch_id]
    assert rows_of(spark, settings, "bronze.quarantine") == []
    # Progress: before and after each file (sorted by path), then the commit step.
    assert [c[1:] for c in calls] == [(0, 4), (1, 4), (1, 4), (2, 4), (2, 4), (3, 4), (3, 4), (4, 4)]
    assert [Path(c[0]).name for c in calls[:6:2]] == sorted(p.name for p in (MCL_FIXTURE, MCP_FIXTURE, SINK_FIXTURE))

    rows = rows_of(spark, settings, "bronze.aspect_snapshots")
    forms = {kind: [r for r in rows if r["source_kind"] == kind] for kind in ("mcl", "mcp", "file-sink")}

    def snapshot_set(kind_rows, parsed=True):
        return {
            (r["entity_urn"], r["aspect_name"], r["change_type"],
             json.dumps(json.loads(r["aspect_json"]), sort_keys=True) if parsed and r["aspect_json"] else r["aspect_json"],
             r["created_time"])
            for r in kind_rows
        }

    assert len(snapshot_set(forms["mcl"])) == 374
    assert snapshot_set(forms["mcl"]) == snapshot_set(forms["mcp"])
    upserts = {s for s in snapshot_set(forms["mcl"]) if s[2] != "DELETE"}
    assert len(upserts) == 362 and snapshot_set(forms["file-sink"]) == upserts
    # Not only the parsed JSON: the aspect text itself is the same in all three forms.
    assert {s for s in snapshot_set(forms["mcl"], parsed=False) if s[2] != "DELETE"} == snapshot_set(
        forms["file-sink"], parsed=False
    )

    # Each row points at its line and carries that line's values.
    mcl_lines = fixture_lines(MCL_FIXTURE)
    for row in forms["mcl"]:
        line = mcl_lines[row["line_number"] - 1]
        assert (row["entity_urn"], row["aspect_name"], row["created_time"], row["created_actor"]) == (
            line["entityUrn"], line["aspectName"], line["created"]["time"], line["created"]["actor"])
        assert row["version"] == int(line["systemMetadata"]["version"])
        assert row["aspect_json"] == (line["aspect"]["value"] if line["changeType"] != "DELETE" else None)
    assert {(r["version"], r["created_actor"]) for r in forms["mcp"] + forms["file-sink"]} == {(None, DEFAULT_ACTOR)}
    sink_text = SINK_FIXTURE.read_text().split("\n")
    assert {sink_text[r["line_number"] - 1] for r in forms["file-sink"]} == {"{"}
    assert {r["batch_id"] for r in rows} == {report.batch_id}

    ledger = rows_of(spark, settings, "bronze.landed_files")
    assert sorted((r["source_file"], r["kind"], r["records_read"], r["records_landed"], r["records_quarantined"],
                   r["duplicates_skipped"], r["content_hash"]) for r in ledger) == sorted(
        (f.path, f.kind, f.records_read, f.records_landed, f.records_quarantined, f.duplicates_skipped, f.content_hash)
        for f in report.files
    )
    stage = report.as_stage_result()
    assert (stage.stage, stage.batch_ids, stage.rows_in, stage.rows_out) == ("land", (report.batch_id,), 1110, 1110)
    assert stage.metrics["records_quarantined"] == 0.0


def test_relanding_skips_the_same_file_and_counts_copied_records_as_duplicates(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    first_path = inputs / "a.mcl.jsonl"
    shutil.copy(MCL_FIXTURE, first_path)
    first = land_paths(spark, settings, [first_path])
    assert first.totals["records_landed"] == 374

    again = land_paths(spark, settings, [first_path])
    assert [(f.status, f.kind, f.records_read) for f in again.files] == [(ALREADY_LANDED, "mcl", 0)]
    assert not again.committed and again.as_stage_result().batch_ids == ()

    # The same records under another name, and again with two new records appended.
    copy_path = inputs / "b.mcl.jsonl"
    shutil.copy(MCL_FIXTURE, copy_path)
    new_records = [
        dict(json.loads(MCL_FIXTURE.read_text().splitlines()[0]), created={"time": t, "actor": DEFAULT_ACTOR})
        for t in (1800000000000, 1800000000001)
    ]
    grown_path = inputs / "c.mcl.jsonl"
    grown_path.write_text(MCL_FIXTURE.read_text() + "".join(json.dumps(r) + "\n" for r in new_records))
    third = land_paths(spark, settings, [copy_path, grown_path])
    assert [(f.records_read, f.records_landed, f.duplicates_skipped) for f in third.files] == [
        (374, 0, 374),
        (376, 2, 374),
    ]
    assert third.reconciliation() == (
        f"batch {third.batch_id}: 750 records read = 2 landed + 0 quarantined + 748 duplicates skipped"
    )
    # Changing a landed file lands it again: its old records are duplicates, its new ones land.
    first_path.write_text(MCL_FIXTURE.read_text() + json.dumps(dict(new_records[0], aspectName="ownership")) + "\n")
    changed = land_paths(spark, settings, [first_path])
    assert [(f.status, f.records_landed, f.duplicates_skipped) for f in changed.files] == [(LANDED, 1, 374)]
    snapshots = rows_of(spark, settings, "bronze.aspect_snapshots")
    assert len(snapshots) == 377
    assert len({r["record_hash"] for r in snapshots}) == 377

    # Two copies in ONE batch: the first (by path) lands, the other is all duplicates.
    fresh = make_settings(tmp_path / "home2")
    register_fresh_tables(spark, fresh)
    both = land_paths(spark, fresh, [inputs / "b.mcl.jsonl", inputs / "a.mcl.jsonl"])
    assert [(Path(f.path).name, f.records_landed, f.duplicates_skipped) for f in both.files] == [
        ("b.mcl.jsonl", 374, 0),
        ("a.mcl.jsonl", 1, 374),
    ]
    sources = Counter(r["source_file"] for r in rows_of(spark, fresh, "bronze.aspect_snapshots"))
    assert sources == {str(inputs / "b.mcl.jsonl"): 374, str(inputs / "a.mcl.jsonl"): 1}


def test_gzip_detection_and_a_forced_kind(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    (inputs / "nested").mkdir(parents=True)
    with gzip.open(inputs / "nested" / "history.jsonl.gz", "wt") as out:
        out.write(MCL_FIXTURE.read_text())
    with gzip.open(inputs / "sink.json.gz", "wt") as out:
        out.write(SINK_FIXTURE.read_text())
    usage_lines = [
        {"type": "LogInEvent", "actorUrn": "urn:li:corpuser:jdoe", "timestamp": 1700000000000 + i,
         "loginSource": "passwordLogin" if i % 2 else "PASSWORD_LOGIN"}
        for i in range(5)
    ]
    (inputs / "usage.jsonl").write_text("\n".join(json.dumps(u) for u in usage_lines) + "\n\n")
    (inputs / ".hidden.jsonl").write_text("not landed")
    (inputs / "_scratch").mkdir()
    (inputs / "_scratch" / "x.jsonl").write_text("not landed")

    report = land_paths(spark, settings, [inputs])
    assert [(Path(f.path).relative_to(inputs).as_posix(), f.kind, f.records_read, f.records_landed)
            for f in report.files] == [
        ("nested/history.jsonl.gz", "mcl", 374, 374),
        ("sink.json.gz", "file-sink", 362, 362),
        ("usage.jsonl", "usage", 5, 5),
    ]
    usage_rows = sorted(rows_of(spark, settings, "bronze.usage_events"), key=lambda r: r["line_number"])
    assert [r["line_number"] for r in usage_rows] == [1, 2, 3, 4, 5]
    assert [r["login_source"] for r in usage_rows] == [u["loginSource"] for u in usage_lines]
    assert [json.loads(r["raw_document"]) for r in usage_rows] == usage_lines

    # Forcing a kind: MCL lines read as MCP take lastObserved and the default actor; as usage, nothing fits.
    as_mcp = tmp_path / "forced.jsonl"
    shutil.copy(MCL_FIXTURE, as_mcp)
    forced = land_paths(spark, settings, [as_mcp], kind="mcp")
    assert [(f.kind, f.records_landed) for f in forced.files] == [("mcp", 374)]
    forced_rows = rows_of(spark, settings, "bronze.aspect_snapshots", f"batch_id = '{forced.batch_id}'")
    assert {(r["source_kind"], r["created_actor"], r["version"]) for r in forced_rows} == {("mcp", DEFAULT_ACTOR, 3),
        ("mcp", DEFAULT_ACTOR, 1), ("mcp", DEFAULT_ACTOR, 2), ("mcp", DEFAULT_ACTOR, 4)}
    as_usage = tmp_path / "forced-usage.jsonl"
    shutil.copy(MCL_FIXTURE, as_usage)
    wrong = land_paths(spark, settings, [as_usage], kind="usage")
    assert [(f.kind, f.records_quarantined, f.records_landed) for f in wrong.files] == [("usage", 374, 0)]
    reasons = {r["reason"] for r in rows_of(spark, settings, "bronze.quarantine", f"batch_id = '{wrong.batch_id}'")}
    assert reasons == {"type: missing"}
    with pytest.raises(InputError, match=r"kind: 'ndjson' is not one of mcl, mcp, file-sink, usage"):
        land_paths(spark, settings, [as_usage], kind="ndjson")
    # Converted by the engine's workers, a file forced to be a file sink that holds no JSON array is
    # refused by name, as the driver would refuse it.
    not_an_array = tmp_path / "not-an-array.json"
    not_an_array.write_text('{"entityUrn": "urn:li:corpuser:x"}\n')
    with pytest.raises(InputError, match=r"not-an-array\.json: file-sink: the text starts with '\{\"entityUrn.*', not a JSON array"):
        land_paths(spark, settings, [not_an_array], kind="file-sink")


def test_bad_records_are_quarantined_with_reasons_and_the_counts_reconcile(spark, tmp_path):
    settings = make_settings(
        tmp_path / "home", ingest=dataclasses.replace(make_settings(tmp_path / "home").ingest, max_record_bytes=4000)
    )
    register_fresh_tables(spark, settings)
    good = fixture_lines(MCL_FIXTURE)[:3]
    base = good[1]
    mcl_lines = [
        json.dumps(good[0]),
        json.dumps(base)[:70],
        json.dumps({k: v for k, v in base.items() if k != "aspectName"}),
        "",
        json.dumps(dict(base, entityUrn="foo")),
        json.dumps(dict(base, aspect={"value": "{'removed': False}"})),
        json.dumps(dict(base, created={"time": "2023-11-14T22:13:20.000Z", "actor": base["created"]["actor"]})),
        json.dumps(dict(base, aspect={"value": json.dumps({"description": "x" * 5000})})),
        json.dumps(good[0]),  # a repeat within the file
        json.dumps(good[2]),
    ]
    usage_lines = [
        json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1700000000000}),
        json.dumps({"type": "Teleport", "actorUrn": "urn:li:corpuser:a", "timestamp": 1700000000000}),
        json.dumps({"type": "LogInEvent", "actorUrn": "a", "timestamp": 1700000000000}),
        json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1.5}),
        json.dumps({"actorUrn": "urn:li:corpuser:a", "timestamp": 1700000000000}),
    ]
    sink_element = {k: v for k, v in good[0].items() if k != "created"}
    sink_element["aspect"] = {"json": json.loads(good[0]["aspect"]["value"])}
    sink_text = '[\n{\n    "entityUrn": "urn:li:corpuser:a",,\n    "aspectName": "status"\n},\n' + json.dumps(
        sink_element, indent=4
    ) + "\n]"
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.mcl.jsonl").write_text("\n".join(mcl_lines) + "\n")
    (inputs / "b.usage.jsonl").write_text("\n".join(usage_lines) + "\n")
    (inputs / "c.file-sink.json").write_text(sink_text)

    report = land_paths(spark, settings, [inputs])
    assert [(f.records_read, f.records_landed, f.records_quarantined, f.duplicates_skipped) for f in report.files] == [
        (9, 2, 6, 1),
        (5, 1, 4, 0),
        (2, 1, 1, 0),
    ]
    for f in report.files:
        assert f.records_read == f.records_landed + f.records_quarantined + f.duplicates_skipped
    quarantined = {
        (Path(r["source_file"]).name, r["line_number"]): (r["kind"], r["field"], r["reason"], r["raw_text"])
        for r in rows_of(spark, settings, "bronze.quarantine")
    }
    expected_fields = {
        ("a.mcl.jsonl", 2): ("mcl", "record"),
        ("a.mcl.jsonl", 3): ("mcl", "aspectName"),
        ("a.mcl.jsonl", 5): ("mcl", "entityUrn"),
        ("a.mcl.jsonl", 6): ("mcl", "aspect.value"),
        ("a.mcl.jsonl", 7): ("mcl", "created.time"),
        ("a.mcl.jsonl", 8): ("mcl", "record"),
        ("b.usage.jsonl", 2): ("usage", "type"),
        ("b.usage.jsonl", 3): ("usage", "actorUrn"),
        ("b.usage.jsonl", 4): ("usage", "timestamp"),
        ("b.usage.jsonl", 5): ("usage", "type"),
        ("c.file-sink.json", 2): ("file-sink", "record"),
    }
    assert {key: value[:2] for key, value in quarantined.items()} == expected_fields
    assert quarantined[("a.mcl.jsonl", 5)][2] == "entityUrn: 'foo' is not urn:li:<type>:<id>"
    assert quarantined[("a.mcl.jsonl", 7)][2] == "created.time: '2023-11-14T22:13:20.000Z' is not an integer epoch-ms"
    assert quarantined[("a.mcl.jsonl", 8)][2].startswith("record: ") and "over ingest.max_record_bytes (4000)" in (
        quarantined[("a.mcl.jsonl", 8)][2])
    assert quarantined[("b.usage.jsonl", 2)][2] == "type: 'Teleport' is not a known usage event type"
    assert quarantined[("b.usage.jsonl", 5)][2] == "type: missing"
    assert quarantined[("c.file-sink.json", 2)][2].startswith("record: malformed JSON in the file-sink array")
    # The raw text is the input line (the oversized one cut at the limit, the file-sink element as written).
    assert quarantined[("a.mcl.jsonl", 2)][3] == mcl_lines[1]
    assert quarantined[("a.mcl.jsonl", 8)][3] == mcl_lines[7][:4000]
    assert quarantined[("c.file-sink.json", 2)][3] == sink_text.split("\n},\n")[0][2:] + "\n}"
    assert {r["batch_id"] for r in rows_of(spark, settings, "bronze.quarantine")} == {report.batch_id}
    landed = sorted((Path(r["source_file"]).name, r["line_number"]) for r in rows_of(spark, settings, "bronze.aspect_snapshots"))
    assert landed == [("a.mcl.jsonl", 1), ("a.mcl.jsonl", 10), ("c.file-sink.json", 6)]
    ledger = {Path(r["source_file"]).name: r for r in rows_of(spark, settings, "bronze.landed_files")}
    assert (ledger["a.mcl.jsonl"]["records_read"], ledger["a.mcl.jsonl"]["duplicates_skipped"]) == (9, 1)


def test_undetectable_and_empty_files(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "manifest.json").write_text(json.dumps({"generator": "x", "files": []}, indent=2))
    (inputs / "empty.jsonl").write_text("\n\n")
    (inputs / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    report = land_paths(spark, settings, [inputs])
    assert [(Path(f.path).name, f.kind, f.status, f.records_read) for f in report.files] == [
        ("broken.jsonl.gz", None, UNDETECTED, 0),
        ("empty.jsonl", "empty", LANDED, 0),
        ("manifest.json", None, UNDETECTED, 0),
    ]
    assert "broken.jsonl.gz: cannot be read" in report.files[0].note
    assert "pass --kind" in report.files[2].note
    with pytest.raises(InputError, match=r"broken.jsonl.gz: cannot be read \(Not a gzipped file"):
        land_paths(spark, settings, [inputs / "broken.jsonl.gz"])
    assert [r["kind"] for r in rows_of(spark, settings, "bronze.landed_files")] == ["empty"]
    with pytest.raises(InputError, match=r"manifest.json: no line among the first 200 is an MCL, MCP or usage record"):
        land_paths(spark, settings, [inputs / "manifest.json"])
    with pytest.raises(InputError, match=r"paths: '.*nowhere' does not exist"):
        land_paths(spark, settings, [tmp_path / "nowhere"])
    with pytest.raises(InputError, match=r"batch_id: 'a b' must be"):
        land_paths(spark, settings, [inputs], batch_id="a b")
    with pytest.raises(InputError, match=rf"batch_id: '{report.batch_id}' is already committed"):
        land_paths(spark, settings, [inputs / "manifest.json"], batch_id=report.batch_id, kind="usage")


def test_rows_of_an_unfinished_batch_are_removed_before_landing(spark, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(MCL_FIXTURE, inputs / "history.mcl.jsonl")
    (inputs / "usage.jsonl").write_text(
        json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1}) + "\nnot json\n"
    )
    homes = {name: make_settings(tmp_path / name) for name in ("uninterrupted", "crashed", "donor")}
    register_fresh_tables(spark, homes["uninterrupted"])
    land_paths(spark, homes["uninterrupted"], [inputs])
    expected = bronze_contents(spark, homes["uninterrupted"])

    # What a landing killed after its data writes leaves: data rows of a batch without ledger rows, and
    # the batch's landing marker.
    register_fresh_tables(spark, homes["donor"])
    dead = land_paths(spark, homes["donor"], [inputs], batch_id="dead-batch")
    donor_rows = {key: read_table(spark, homes["donor"], key).collect() for key in ("bronze.aspect_snapshots",
                  "bronze.usage_events", "bronze.quarantine")}
    register_fresh_tables(spark, homes["crashed"])
    for key, rows in donor_rows.items():
        append(spark.createDataFrame(rows, read_table(spark, homes["crashed"], key).schema), homes["crashed"], key)
    assert read_table(spark, homes["crashed"], "bronze.aspect_snapshots").count() == 374
    assert committed_batches(spark, homes["crashed"]) == []
    marker = mark_landing_begun(homes["crashed"], dead.batch_id)

    report = land_paths(spark, homes["crashed"], [inputs])
    assert report.discarded_batches == (dead.batch_id,)
    assert [(f.records_landed, f.duplicates_skipped) for f in report.files] == [(374, 0), (1, 0)]
    assert bronze_contents(spark, homes["crashed"]) == expected
    assert committed_batches(spark, homes["crashed"]) == [report.batch_id]
    assert not marker.exists() and not list(marker.parent.iterdir())


@pytest.mark.slow
def test_generated_history_lands_with_exactly_the_manifest_malformed_lines(spark, settings, tmp_path):
    from datagen.history import generate_history

    out = tmp_path / "generated"
    manifest = generate_history(out, entities=16, seed=11, usage_events=150, action_requests=9, malformed_share=0.06,
                                mcp_share=0.3, file_sink_share=0.2, duplicate_share=0.03, gzip=True, workers=1)
    broken = Counter(f"{e.format}:{m.field}" for e in manifest.files for m in e.malformed)
    # The oracle is only as good as its variety: every kind of break, in every JSON-lines format.
    assert {"mcl:created.time", "mcl:aspect.value", "mcp:systemMetadata.lastObserved", "usage:json",
            "usage:timestamp", "usage:type", "usage:actorUrn"} <= set(broken), broken
    assert sum(e.duplicates for e in manifest.files) > 0
    report = land_paths(spark, settings, [out])
    results = {Path(f.path).relative_to(out).as_posix(): f for f in report.files}
    assert results["manifest.json"].status == UNDETECTED
    quarantined: dict[str, dict[int, str]] = {}
    for row in rows_of(spark, settings, "bronze.quarantine"):
        quarantined.setdefault(Path(row["source_file"]).relative_to(out).as_posix(), {})[row["line_number"]] = row["field"]
    for entry in manifest.files:
        result = results[entry.path]
        assert result.status == LANDED and result.kind == entry.format, entry.path
        assert result.records_read == entry.lines, entry.path
        assert result.records_landed + result.duplicates_skipped == entry.records, entry.path
        expected = {m.line: ("record" if m.field == "json" else m.field) for m in entry.malformed}
        assert quarantined.get(entry.path, {}) == expected, entry.path
    assert report.totals["duplicates_skipped"] == sum(e.duplicates for e in manifest.files)
    requests = rows_of(spark, settings, "bronze.aspect_snapshots", "entity_type = 'actionRequest'")
    assert {r["aspect_name"] for r in requests} >= {"actionRequestInfo"}
    assert len({r["entity_urn"] for r in requests}) == 9


@pytest.mark.slow
def test_the_cli_lands_lists_quarantine_and_recovers_from_a_kill(spark, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for fixture in (MCL_FIXTURE, MCP_FIXTURE, SINK_FIXTURE):
        shutil.copy(fixture, inputs / fixture.name)
    (inputs / "usage.jsonl").write_text(
        json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1700000000000}) + "\n"
        + json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": "yesterday"}) + "\n"
    )
    home = tmp_path / "home"
    first = run_cli("land", str(inputs), "--no-progress", home=home, env={"COLUMNS": "200"})
    assert "1112 records read = 1111 landed + 1 quarantined + 0 duplicates skipped" in first.stdout
    for name, kind in (("history-small.mcl.jsonl", "mcl"), ("history-small.file-sink.json", "file-sink"),
                       ("usage.jsonl", "usage")):
        assert any(name in line and f" {kind} " in line for line in first.stdout.splitlines()), (name, first.stdout)

    again = json.loads(run_cli("land", str(inputs), "--json", home=home).stdout)
    assert not again["committed"] and [f["status"] for f in again["files"]] == ["already landed"] * 4

    listed = run_cli("quarantine", "--json", home=home)
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(Path(r["source_file"]).name, r["line_number"], r["kind"], r["field"], r["reason"]) for r in records] == [
        ("usage.jsonl", 2, "usage", "timestamp", "timestamp: 'yesterday' is not an integer epoch-ms")
    ]
    table = run_cli("quarantine", "--batch", records[0]["batch_id"], "--limit", "5", home=home, env={"COLUMNS": "250"})
    assert "timestamp: 'yesterday' is not an integer epoch-ms" in table.stdout
    assert run_cli("quarantine", "--batch", "no-such-batch", "--json", home=home).stdout == ""

    bad_kind = run_cli("land", str(inputs), "--kind", "ndjson", home=home, check=False)
    assert bad_kind.returncode == 1 and "--kind: 'ndjson' is not one of" in bad_kind.stderr
    assert "Traceback" not in bad_kind.stderr

    # Killed after the data writes, before the ledger: the next landing removes the rows and lands again.
    crashed_home = tmp_path / "crashed"
    killed = run_cli("land", str(inputs), "--no-progress", home=crashed_home,
                     env={"LAKEHOUSE_CRASH_AT": "land.after_data"}, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_cli("land", str(inputs), "--no-progress", "--json", home=crashed_home)
    report = json.loads(resumed.stdout)
    assert len(report["discarded_batches"]) == 1 and report["totals"]["records_landed"] == 1111
    assert bronze_contents(spark, make_settings(crashed_home)) == bronze_contents(spark, make_settings(home))


def test_the_engine_hashes_files_as_hashlib_does(spark, tmp_path):
    from pipelines.batch.landing import read_at, sha256_of
    from pipelines.batch.landing.engine_files import content_hashes

    text = b"first\r\n\n{\"a\": \"caf\xc3\xa9\"}\nlast without break"
    files = {
        tmp_path / "lines.txt": text,
        tmp_path / "lines.txt.gz": gzip.compress(text),
        tmp_path / "empty.jsonl": b"",
        tmp_path / "with space.jsonl": b"\xff not utf-8\n",
        # The same name in another folder: read apart from the first.
        tmp_path / "again" / "lines.txt": text + b"\n",
        tmp_path / "large.jsonl": b"".join(b'{"n": %d}\n' % n for n in range(1_500_000)),
    }
    for path, data in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    hashes = content_hashes(spark, [(path, len(data)) for path, data in files.items()])
    assert hashes == {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    assert sha256_of(tmp_path / "lines.txt", block_size=7) == hashlib.sha256(text).hexdigest()
    reader = read_at(tmp_path / "lines.txt", len(text))
    assert (reader(8, 8), reader(0, 5), reader(len(text) - 5, 99), reader(len(text), 9)) == (
        b'{"a": "c', b"first", b"break", b""
    )


def test_split_reads_and_undecodable_files_get_exact_line_numbers(spark, settings, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    # Big enough for the embedded engine to read each file as several partitions.
    for copy in range(4):
        lines = [json.dumps({"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": copy * 10**6 + n,
                             "userAgent": "a" * (n % 300)}) for n in range(1, 12001)]
        (inputs / f"usage-{copy}.jsonl").write_text("\n".join(lines) + "\n")
    # Bytes that are not UTF-8, and Windows line breaks: read through the numbering fallback.
    (inputs / "latin1.jsonl").write_bytes(
        b'{"type": "LogInEvent", "actorUrn": "urn:li:corpuser:b", "timestamp": 1, "userAgent": "caf\xe9"}\r\n'
        b'\r\n'
        b'{"type": "LogInEvent", "actorUrn": "urn:li:corpuser:b", "timestamp": 3}\r\n'
    )
    report = land_paths(spark, settings, [inputs])
    assert [(f.records_read, f.records_landed) for f in report.files] == [(2, 2)] + [(12000, 12000)] * 4
    rows = rows_of(spark, settings, "bronze.usage_events")
    for row in rows:
        if "usage-" in row["source_file"]:
            assert row["timestamp"] % 10**6 == row["line_number"], row
    latin = sorted((r["line_number"], r["user_agent"]) for r in rows if r["source_file"].endswith("latin1.jsonl"))
    assert latin == [(1, "caf\ufffd"), (3, None)]


def test_small_files_of_a_kind_are_staged_together_with_each_files_own_lines(spark, settings, tmp_path):
    good = fixture_lines(MCL_FIXTURE)[:4]
    inputs = tmp_path / "small"
    inputs.mkdir()
    login = {"type": "LogInEvent", "actorUrn": "urn:li:corpuser:a", "timestamp": 1700000000000}
    files = {
        "a.mcl.jsonl": [json.dumps(good[0]), "not json", json.dumps(good[1])],
        "b.mcl.jsonl": ["", json.dumps(good[2]), json.dumps(dict(good[3], entityUrn="foo"))],
        # The same record as a.mcl.jsonl's first line: a duplicate within the batch.
        "c.mcl.jsonl": ["\ufeff" + json.dumps(good[0]), json.dumps(good[3])],
        "d.usage.jsonl": [json.dumps(login), json.dumps(dict(login, type="Teleport"))],
        "e.usage.jsonl": [json.dumps(dict(login, timestamp=1700000000001))],
    }
    for name, lines in files.items():
        (inputs / name).write_text("\n".join(lines) + "\n")
    with gzip.open(inputs / "f.mcl.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(dict(good[1], entityUrn="urn:li:corpuser:gz")) + "\n")

    from concurrent.futures import ThreadPoolExecutor

    from pipelines.batch.landing.discovery import list_input_files, plan_files
    from pipelines.batch.landing.staging import stage_text_reads

    with ThreadPoolExecutor(max_workers=1) as hasher:
        plans = plan_files(spark, settings, list_input_files([inputs]), None, hasher)
        stage_text_reads(spark, settings, plans, tmp_path / "scratch")
    folders = {plan.path.name: plan.staged for plan in plans}
    assert folders["a.mcl.jsonl"] == folders["b.mcl.jsonl"] == folders["c.mcl.jsonl"] == folders["f.mcl.jsonl.gz"]
    assert folders["d.usage.jsonl"] == folders["e.usage.jsonl"] not in (None, folders["a.mcl.jsonl"])
    assert {p.path.name: (p.records_read, p.records_quarantined) for p in plans if p.staged} == {
        "a.mcl.jsonl": (3, 1), "b.mcl.jsonl": (2, 1), "c.mcl.jsonl": (2, 0), "d.usage.jsonl": (2, 1),
        "e.usage.jsonl": (1, 0), "f.mcl.jsonl.gz": (1, 0),
    }  # fmt: skip

    report = land_paths(spark, settings, [inputs])
    assert {Path(f.path).name: (f.records_read, f.records_landed, f.records_quarantined, f.duplicates_skipped)
            for f in report.files} == {
        "a.mcl.jsonl": (3, 2, 1, 0), "b.mcl.jsonl": (2, 1, 1, 0), "c.mcl.jsonl": (2, 1, 0, 1),
        "d.usage.jsonl": (2, 1, 1, 0), "e.usage.jsonl": (1, 1, 0, 0), "f.mcl.jsonl.gz": (1, 1, 0, 0),
    }  # fmt: skip
    landed = sorted(
        (Path(r["source_file"]).name, r["line_number"])
        for key in ("bronze.aspect_snapshots", "bronze.usage_events")
        for r in rows_of(spark, settings, key)
    )
    assert landed == [
        ("a.mcl.jsonl", 1), ("a.mcl.jsonl", 3), ("b.mcl.jsonl", 2), ("c.mcl.jsonl", 2), ("d.usage.jsonl", 1),
        ("e.usage.jsonl", 1), ("f.mcl.jsonl.gz", 1),
    ]  # fmt: skip
    quarantined = sorted((Path(r["source_file"]).name, r["line_number"], r["field"])
                         for r in rows_of(spark, settings, "bronze.quarantine"))  # fmt: skip
    assert quarantined == [("a.mcl.jsonl", 2, "record"), ("b.mcl.jsonl", 3, "entityUrn"), ("d.usage.jsonl", 2, "type")]
