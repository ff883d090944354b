"""A home's life: several batches of realistic size, one at a time, end where one run over all of them ends.

The input is the project's own generated history (about 28k records a batch: aspect versions with
domains, soft and hard deletes, duplicates and late versions, usage events, action requests) plus PATCH
proposals written by DataHub's SDK. Three batches cross every way refine writes the state: the first is
appended, later large ones are MERGEd (deletion vectors in silver.aspect_state from then on), and a
watcher's micro-batches are logged and folded. After every run `lakehouse verify` passes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conf.settings import Settings
from conf.tables import table_location, table_name
from datagen.history import generate_history
from pipelines.batch.chain_verification import verify_chain
from pipelines.bench.table_hashes import IDENTITY_COLUMNS, identity_hashes
from pipelines.orchestration.jobs import run_job
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.orchestration.watchers import in_process_watcher
from tests.pipelines.batch.datahub_producers import patch_proposals

pytestmark = pytest.mark.slow

BATCHES = 3
# Files per watcher micro-batch: the three batches' 42 files make 5 micro-batches of about 17k records.
MICRO_BATCH_FILES = 10


@pytest.fixture(scope="module")
def life_inputs(tmp_path_factory) -> list[Path]:
    """Three batch folders of generated history, each with PATCH proposals on some of its MCP-written datasets.

    The patches go to datasets whose history is MCP lines, as DataHub's SDK writes proposals: unversioned,
    ordered by time (docs/change-events.md: land one serialization of a history per key).
    """
    out = tmp_path_factory.mktemp("life-inputs")
    generate_history(out, entities=4000, seed=53, batches=BATCHES, mcp_share=0.1, file_sink_share=0.05, workers=2)
    folders = sorted(out.glob("batch-*"))
    for index, folder in enumerate(folders):
        # Each patch comes right after its dataset's newest record of the batch: no version of the next batch
        # is older than it (the generator cuts each file's records in time order), so none arrives late.
        newest = _newest_times(folder, 25)
        proposals = [p for urn, time in newest.items() for p in patch_proposals(urn, time + 1)]
        (folder / "aspects" / f"patches-{index}.mcp.jsonl").write_text("\n".join(json.dumps(p) for p in proposals) + "\n")
    return folders


def _newest_times(folder: Path, count: int) -> dict[str, int]:
    """The first `count` datasets of the folder's MCP files, each with the newest `lastObserved` of its records."""
    newest: dict[str, int] = {}
    for path in sorted(folder.glob("aspects/*.mcp.jsonl")):
        for record in map(_json_or_none, path.read_text().splitlines()):
            urn = record.get("entityUrn") if record else None
            metadata = record.get("systemMetadata") if record else None
            observed = metadata.get("lastObserved") if isinstance(metadata, dict) else None
            if not (isinstance(urn, str) and urn.startswith("urn:li:dataset:") and isinstance(observed, int)):
                continue  # the generator's bad records aside
            if urn in newest or len(newest) < count:
                newest[urn] = max(observed, newest.get(urn, observed))
    return newest


def _json_or_none(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None  # the generator's malformed lines
    return record if isinstance(record, dict) else None


def identities(spark, home: Path) -> dict[str, dict]:
    """Each compared table's row count and the hash of its sorted identity rows (`pipelines.bench.table_hashes`)."""
    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    return identity_hashes(spark, settings)


def run_life(spark, home: Path, batches: list[list[Path]]) -> Settings:
    """Run each batch's files as one pipeline run on `home` (in this session), verifying after each run."""
    settings = make_settings(home)
    settings = dataclasses.replace(settings, mlflow=dataclasses.replace(settings.mlflow, enabled=False))
    register_fresh_tables(spark, settings)
    for paths in batches:
        run_job(settings, paths=paths, spark=spark)
        verified = verify_chain(spark, settings)
        assert verified.ok, f"verify failed after {paths}: {verified.broken}"
    return settings


@pytest.fixture(scope="module")
def one_run_home(spark, life_inputs, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("one-run")
    run_life(spark, home, [life_inputs])
    return home


@pytest.fixture(scope="module")
def batch_by_batch_home(spark, life_inputs, tmp_path_factory) -> Path:
    """The batches run one run each, as `lakehouse run --path BATCH` does; verify passes after every run."""
    home = tmp_path_factory.mktemp("batch-by-batch")
    run_life(spark, home, [[folder] for folder in life_inputs])
    return home


def test_batches_run_one_at_a_time_end_with_the_tables_of_one_run(spark, one_run_home, batch_by_batch_home):
    home = batch_by_batch_home
    expected = identities(spark, one_run_home)
    actual = identities(spark, home)
    assert expected["silver.entity_change_events"]["rows"] > 30_000, "the life's input derived too few events"
    for key in IDENTITY_COLUMNS:
        assert actual[key] == expected[key], f"{key} differs between batch-by-batch runs and one run"


def test_the_life_crossed_the_merge_path_with_patches_deletes_and_domains(spark, batch_by_batch_home):
    home = batch_by_batch_home
    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    state_log = "".join(p.read_text() for p in sorted((Path(str(table_location(settings, "silver.aspect_state"))) / "_delta_log").glob("*.json")))
    assert '"operation":"MERGE"' in state_log and '"deletionVector":{' in state_log
    patched = spark.table(table_name(settings, "silver.patched_aspects")).count()
    categories = {r.category for r in spark.table(table_name(settings, "silver.entity_change_events")).select("category").distinct().collect()}
    domains = spark.table(table_name(settings, "gold.audit_events")).filter("domain IS NOT NULL").count()
    deleted = spark.table(table_name(settings, "silver.aspect_state")).filter("entity_deleted").count()
    assert patched > 0 and {"DOMAIN", "LIFECYCLE", "TAG", "OWNER"} <= categories and domains > 0 and deleted > 0


def test_a_watcher_taking_the_same_input_in_micro_batches_across_folds_ends_with_the_same_tables(
    spark, life_inputs, one_run_home, tmp_path
):
    # A small log: the micro-batches are logged, and the log is folded several times on the way.
    settings, watcher, session = in_process_watcher(spark, tmp_path / "watched", refine={"state_log_max_rows": 9_000})
    files = sorted(p for folder in life_inputs for p in folder.rglob("*") if p.is_file())
    micro_batches = [files[i : i + MICRO_BATCH_FILES] for i in range(0, len(files), MICRO_BATCH_FILES)]
    for micro_batch in micro_batches:
        watcher._micro_batch(session, micro_batch, openmetadata_now=False)
        verified = verify_chain(spark, settings)
        assert verified.ok, f"verify failed after {micro_batch}: {verified.broken}"
    watcher._micro_batch(session, [], openmetadata_now=True)  # the ChangeEvents still waiting
    state_log = [
        json.loads(line)
        for p in sorted((Path(str(table_location(settings, "silver.aspect_state"))) / "_delta_log").glob("*.json"))
        for line in p.read_text().splitlines()
    ]
    merges = [a for a in state_log if a.get("commitInfo", {}).get("operation") == "MERGE"]
    assert len(merges) >= 2, "the watcher's micro-batches folded the log fewer than twice"
    expected = identities(spark, one_run_home)
    actual = identities(spark, settings.home)
    for key in IDENTITY_COLUMNS:
        assert actual[key] == expected[key], f"{key} differs between micro-batches and one run"
