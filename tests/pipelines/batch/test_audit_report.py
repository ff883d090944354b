"""Regulator reports from real tables: contents against hand-counted rows, CSV quoting, HTML escaping, the endpoint."""

from __future__ import annotations

import csv
import io
import json
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest

from conf.errors import InputError
from pipelines.batch.audit_chain import read_chain
from pipelines.audit_trail.report_format import REPORT_COLUMNS, ReportQuery
from pipelines.batch.audit_report import write_report
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.serving.api import create_app, serving
from pipelines.serving.tokens import create_token
from tests.pipelines.audit_inputs import change_event, land_refined_batch

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
HOUR = 3_600_000
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
OTHER = "urn:li:dataset:(urn:li:dataPlatform:hive,db.users,PROD)"
ALICE, BOB = "urn:li:corpuser:alice", "urn:li:corpuser:bob"
TRICKY = 'a, "quoted"\nsecond line'
MARKUP = '<script>alert("x")</script>&'


def _event(change_set, category, operation, actor, time_ms, entity, batch, old=None, new=None):
    row = change_event(change_set, category, operation, actor, time_ms, entity, "globalTags", batch)
    row.update(old_value=old, new_value=new)
    return row


@pytest.fixture(scope="module")
def history(spark, lakehouse):
    """Four change events over two batches; the fourth is in a batch refined but never published."""
    land_refined_batch(spark, lakehouse, "r-1", changes=[
        _event("cs-1", "TAG", "ADD", ALICE, T0, DATASET, "r-1", new=TRICKY),
        _event("cs-2", "DOCUMENTATION", "MODIFY", BOB, T0 + HOUR, DATASET, "r-1", old="v1", new=MARKUP),
    ])  # fmt: skip
    land_refined_batch(spark, lakehouse, "r-2", changes=[
        _event("cs-3", "OWNER", "REMOVE", ALICE, T0 + 2 * HOUR, OTHER, "r-2", old="x" * 250),
    ])  # fmt: skip
    publish_audit(spark, lakehouse)
    publish_openmetadata(spark, lakehouse)
    # Refined after the publish: not chained yet, so no report shows it.
    land_refined_batch(spark, lakehouse, "r-3", changes=[_event("cs-4", "TAG", "ADD", BOB, T0 + 90_000, DATASET, "r-3")])
    return lakehouse


def _csv(path):
    lines = path.read_bytes().decode("utf-8").split("\r\n")
    header = [line for line in lines if line.startswith("# ")]
    body = "\r\n".join(lines[len(header):])
    return header, list(csv.DictReader(io.StringIO(body, newline="")))


def test_the_csv_report_holds_the_hand_counted_rows_and_quotes_values(spark, history, tmp_path):
    out = write_report(spark, history, ReportQuery(T0, T0 + 3 * HOUR, format="csv"), tmp_path / "r.csv")
    header, rows = _csv(out)
    head = read_chain(spark, history)[-1]["link_digest"]
    assert f"# chain_head_digest: {head}" in header
    assert "# window_from_utc: 2023-11-14T22:13:20.000Z" in header
    assert "# window_to_utc_exclusive: 2023-11-15T01:13:20.000Z" in header
    assert [(r["actor"], r["category"], r["operation"]) for r in rows] == [
        (ALICE, "TAG", "ADD"), (BOB, "DOCUMENTATION", "MODIFY"), (ALICE, "OWNER", "REMOVE"),
    ]  # fmt: skip
    assert rows[0]["time_utc"] == "2023-11-14T22:13:20.000Z" and rows[0]["entity"] == DATASET
    assert rows[0]["new_value_summary"] == TRICKY  # commas, quotes and a newline survive the round trip
    assert rows[2]["old_value_summary"] == "x" * 200 + "… (250 chars)"
    assert '"a, ""quoted""\nsecond line"' in out.read_bytes().decode("utf-8")
    assert list(rows[0]) == list(REPORT_COLUMNS)


def test_filters_and_window_select_the_hand_counted_rows(spark, history, tmp_path):
    by_alice = write_report(spark, history, ReportQuery(T0, T0 + 3 * HOUR, actor=ALICE), tmp_path / "a.csv")
    assert [r["operation"] for r in _csv(by_alice)[1]] == ["ADD", "REMOVE"]
    of_other = write_report(spark, history, ReportQuery(T0, T0 + 3 * HOUR, entity=OTHER), tmp_path / "o.csv")
    assert [r["entity"] for r in _csv(of_other)[1]] == [OTHER]
    # [T0 + 1h, T0 + 2h): the window's end is exclusive.
    window = write_report(spark, history, ReportQuery(T0 + HOUR, T0 + 2 * HOUR), tmp_path / "w.csv")
    header, rows = _csv(window)
    assert [r["actor"] for r in rows] == [BOB] and f"# actor_filter: (all)" in header


def test_the_html_report_escapes_every_value(spark, history, tmp_path):
    out = write_report(spark, history, ReportQuery(T0, T0 + 3 * HOUR, format="html"), tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in text
    assert text.count("<tr><td>") == 3


def test_the_parquet_report_carries_the_header_and_rows(spark, history, tmp_path):
    out = write_report(spark, history, ReportQuery(T0, T0 + 3 * HOUR, format="parquet"), tmp_path / "r.parquet")
    table = pq.read_table(out)
    assert table.column("operation").to_pylist() == ["ADD", "MODIFY", "REMOVE"]
    header = json.loads(table.schema.metadata[b"lakehouse.report"])
    assert header["chain_head_digest"] == read_chain(spark, history)[-1]["link_digest"]


def test_a_bad_query_names_the_field():
    with pytest.raises(InputError, match="format"):
        ReportQuery(T0, T0 + 1, format="xlsx")
    with pytest.raises(InputError, match="from"):
        ReportQuery(T0, T0)


def test_the_report_downloads_over_http_with_a_token(spark, history):
    token, _ = create_token(history, "urn:li:corpuser:auditor", ["audit-read"])
    with serving(create_app(history, spark)) as base:
        url = f"{base}/openapi/v1/audit/report?from={T0}&to={T0 + 3 * HOUR}&actor={ALICE.replace(':', '%3A')}&format=csv"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=60)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            assert answer.headers["Content-Type"].startswith("text/csv")
            assert "attachment" in answer.headers["Content-Disposition"]
            text = answer.read().decode("utf-8")
        body = "\r\n".join(line for line in text.split("\r\n") if not line.startswith("# "))
        assert [r["operation"] for r in csv.DictReader(io.StringIO(body, newline=""))] == ["ADD", "REMOVE"]
        bad = urllib.request.Request(f"{base}/openapi/v1/audit/report?from={T0}&to={T0}&format=csv",
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as rejected:
            urllib.request.urlopen(bad, timeout=60)
        assert rejected.value.code == 400 and "from" in json.loads(rejected.value.read())["error"]


def test_the_report_command_writes_csv_to_stdout_and_needs_out_for_parquet(history):
    from tests.pipelines.cli.test_cli import run_cli

    printed = run_cli("report", "--from", "2023-11-14T22:13:20Z", "--to", str(T0 + 3 * HOUR), "--actor", BOB, home=history.home)
    # The child's output is read as text (line ends normalized): Bob's row holds no line break.
    body = "\n".join(line for line in printed.stdout.split("\n") if not line.startswith("# "))
    assert [(r["actor"], r["operation"]) for r in csv.DictReader(io.StringIO(body, newline=""))] == [(BOB, "MODIFY")]
    refused = run_cli("report", "--from", str(T0), "--to", str(T0 + HOUR), "--format", "parquet", home=history.home, check=False)
    assert refused.returncode == 1 and "--out: required for --format parquet" in refused.stderr
