"""A window's rows staged from their Arrow columns land exactly as their MCL lines land through landing's own path."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from conf.settings import load_settings
from pipelines.batch.backfill.reader import COLUMNS
from pipelines.batch.backfill.source import prepare_window, window_plans
from pipelines.batch.landing.batch import land_plans
from pipelines.runtime.io import read_table
from tests.conftest import register_fresh_tables

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.t{},PROD)"
ACTOR = "urn:li:corpuser:a"
RUN = '{"runId": "r1", "lastObserved": 1700000000000, "version": "3"}'
# (urn, aspect, metadata, systemmetadata, createdby), each an edge of landing's checks.
ROWS = [
    (URN, "globalTags", '{"tags": [{"tag": "urn:li:tag:a"}]}', RUN, ACTOR),
    (URN, "ownership", '{"owners": [{"owner": "urn:li:corpuser:b", "type": "DATAOWNER"}]}', None, ACTOR),
    (URN, "status", '{"removed": true}', '{"runId": "r2"}', ACTOR),
    (URN, "deprecation", '{"deprecated": false, "decommissionTime": -12, "note": "q\\"\\\\\\u0000\\t\\u00e9"}', RUN, ACTOR),
    (URN, "status", '{\n  "removed": false\n}', RUN, ACTOR),  # line breaks between tokens
    (URN, "status", '{"removed": false, "note": "see: Infra"}', RUN, ACTOR),  # NaN/Infinity-like text in a string
    (URN, "datasetProperties", '{"description": "\U0001f600 caf\u00e9", "customProperties": {"k": "v"}}', RUN, ACTOR),
    (URN, "status", '{"removed": tru', RUN, ACTOR),  # not JSON
    (URN, "globalTags", '{"tags": "urn:li:tag:a"}', RUN, ACTOR),  # a checked list that is text
    (URN, "status", '{"removed": 1, "removed": true}', RUN, ACTOR),  # the engine reads the first of a repeated key
    (URN, "ownership", '{"owners": [], "x": {"owners": "nested text"}}', RUN, ACTOR),
    (URN, "deprecation", '{"deprecated": true, "decommissionTime": 1.5}', RUN, ACTOR),
    (URN, "status", '{"removed": NaN}', RUN, ACTOR),
    (URN, "status", '[{"removed": true}]', RUN, ACTOR),  # not an object
    (URN, "status", '{"removed": true}} ', RUN, ACTOR),  # text after the object
    (URN, "status", "", RUN, ACTOR),
    (URN, "status", '{"removed": false}', '{"runId": 5, "version": "4"}', ACTOR),  # a runId that is a number
    (URN, "status", '{"removed": false}', '{"runId": "a", "version": "x1"}', ACTOR),  # a version that is not a number
    (URN, "status", '{"removed": false}', '{"runId": "a", "version": "007"}', ACTOR),
    (URN, "status", '{"removed": false}', '{"runId": "a", "runId": "b"}', ACTOR),
    (URN, "status", '{"removed": false}', "not json", ACTOR),
    ("not-an-urn{}", "status", '{"removed": false}', RUN, ACTOR),
    (URN, "status", '{"removed": false}', RUN, "someone"),
    (URN, "schemaMetadata", '{"fields": [{"fieldPath": "a", "description": "' + "x" * 3000 + '"}]}', RUN, ACTOR),  # over the limit
    (URN, "schemaMetadata", '{"fields": [{"fieldPath": "a", "description": "' + "x" * 900 + '"}]}', RUN, ACTOR),  # near it
]
# The rows certain to land as they are (positions in ROWS); the others take landing's path.
STAGED_DIRECTLY = (0, 1, 2, 3, 4, 5, 6, 18, 19)
MAX_RECORD_BYTES = 3000


def window_of(rows) -> pa.Table:
    """The rows as the reader gives them, createdon a second apart, every version 0."""
    columns = {name: [] for name in COLUMNS}
    for index, (urn, aspect, metadata, system_metadata, actor) in enumerate(rows):
        for name, value in zip(("urn", "aspect", "metadata", "systemmetadata", "createdby"),
                               (urn.format(index), aspect, metadata, system_metadata, actor)):  # fmt: skip
            columns[name].append(value)
        columns["version"].append(0)
        columns["createdon_us"].append(1_700_000_000_000_000 + index * 1_000_000)
    types = {"version": pa.int64(), "createdon_us": pa.int64()}
    return pa.table({name: pa.array(values, types.get(name, pa.large_string())) for name, values in columns.items()})


def landed(spark, home, window, all_as_mcl):
    """Land the window as one batch in a new home; return what was prepared, the totals and the bronze rows."""
    settings = load_settings("local", home=home, env={},
                             overrides=["mlflow.enabled=false", f"ingest.max_record_bytes={MAX_RECORD_BYTES}"])  # fmt: skip
    register_fresh_tables(spark, settings)
    prepared = prepare_window(window, settings.ingest.backfill, settings.ingest.max_record_bytes, all_as_mcl)
    report = land_plans(spark, settings, lambda scratch, _hasher: window_plans(spark, settings, prepared, scratch))
    tables = {}
    for key, volatile in (("bronze.aspect_snapshots", {"batch_id", "landed_at", "land_date"}),
                          ("bronze.quarantine", {"batch_id", "quarantined_at", "land_date"})):  # fmt: skip
        df = read_table(spark, settings, key)
        kept = [c for c in df.columns if c not in volatile]
        tables[key] = sorted(json.dumps(r.asDict(), sort_keys=True) for r in df.select(*kept).collect())
    return prepared, report.totals, tables


@pytest.fixture(scope="module")
def through_mcl(spark, tmp_path_factory):
    """The window landed as MCL lines alone (landing's own path)."""
    return landed(spark, tmp_path_factory.mktemp("as-mcl"), window_of(ROWS), all_as_mcl=True)


def test_rows_staged_from_columns_land_as_their_mcl_lines_do(spark, through_mcl, tmp_path):
    prepared, totals, tables = landed(spark, tmp_path, window_of(ROWS), all_as_mcl=False)
    assert (prepared.staged_rows, prepared.mcl_rows) == (len(STAGED_DIRECTLY), len(ROWS) - len(STAGED_DIRECTLY))
    _, expected_totals, expected = through_mcl
    assert expected_totals["records_landed"] > len(STAGED_DIRECTLY) and expected_totals["records_quarantined"] > 5
    assert totals == expected_totals
    for key in expected:
        assert tables[key] == expected[key], f"{key} differs"


def test_a_window_of_clean_rows_is_staged_without_mcl_lines(spark, tmp_path):
    clean = [ROWS[i] for i in STAGED_DIRECTLY]
    prepared, totals, tables = landed(spark, tmp_path / "direct", window_of(clean), all_as_mcl=False)
    assert (prepared.staged_rows, prepared.mcl_rows, prepared.mcl_copy) == (len(clean), 0, b"")
    assert totals["records_landed"] == len(clean)
    # The same rows landed as MCL lines, but on the lines and at the times they have in the smaller window.
    _, _, expected = landed(spark, tmp_path / "as-mcl", window_of(clean), all_as_mcl=True)
    assert tables["bronze.aspect_snapshots"] == expected["bronze.aspect_snapshots"]
