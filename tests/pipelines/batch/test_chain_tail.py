"""A cut tail of the audit chain: caught by the tables' Delta histories and by a checkpoint kept outside the home."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conf.errors import InputError
from conf.settings_sections import AuditChainSettings
from conf.tables import table_location
from pipelines.audit_trail.arrow_chain import ArrowChainLinker
from pipelines.batch.audit_chain import create_key, read_chain
from pipelines.batch.chain_verification import verify_chain
from pipelines.audit_trail.chain_checkpoint import read_checkpoint
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.serving.access_log import ACCESS_TABLE, AccessLogWriter
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event

NOW = int(time.time() * 1000)
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
ALICE = "urn:li:corpuser:alice"


def _access_record(access_id: str) -> dict:
    return {"access_id": access_id, "accessed_at_ms": NOW, "access_date": datetime.now(timezone.utc).date(),
            "principal": "token:t1", "method": "GET", "endpoint": "/api/v1/timeline", "status": 200, "outcome": "ok"}  # fmt: skip


def _settings(home: Path, checkpoint: Path):
    settings = make_settings(home)
    return dataclasses.replace(settings, audit_chain=AuditChainSettings(signing="ed25519", checkpoint=str(checkpoint)))


@pytest.fixture(scope="module")
def audited_home(spark, tmp_path_factory) -> Path:
    """A home signing with ed25519 and writing its checkpoint outside: a published batch, then three access log flushes."""
    root = tmp_path_factory.mktemp("tail")
    settings = _settings(root / "home", root / "outside" / "head.json")
    create_key(settings, "ed25519")
    register_fresh_tables(spark, settings)
    land_refined_batch(
        spark, settings, "b-1", usage=[usage_event("LogInEvent", ALICE, NOW - 1000, "b-1", login_source="SSO_LOGIN")],
        changes=[change_event("cs-1", "TAG", "ADD", ALICE, NOW - 500, DATASET, "globalTags", "b-1")],
    )  # fmt: skip
    publish_audit(spark, settings)
    publish_openmetadata(spark, settings)
    linker = ArrowChainLinker(settings)
    writer = AccessLogWriter(settings, link=lambda batch_id, rows, version: linker.link(ACCESS_TABLE, batch_id, rows, version))
    for flush in range(3):
        writer.add(_access_record(f"a-{flush}"))
        writer.flush()
    return root


@pytest.fixture
def home(spark, audited_home, tmp_path):
    """A copy of the audited home and of its checkpoint, tables registered: each test attacks its own."""
    shutil.copytree(audited_home, tmp_path / "copy")
    settings = _settings(tmp_path / "copy" / "home", tmp_path / "copy" / "outside" / "head.json")
    register_fresh_tables(spark, settings)
    return settings


def _cut_the_tail(settings) -> None:
    """The review's attack, with delta-rs: the newest access log batch deleted, then its link (the chain's last)."""
    access = DeltaTable(str(table_location(settings, ACCESS_TABLE)))
    newest = max(access.to_pyarrow_table(columns=["batch_id"]).column("batch_id").to_pylist())
    access.delete(f"batch_id = '{newest}'")
    chain = DeltaTable(str(table_location(settings, "ops.audit_chain")))
    chain.alter.set_table_properties({"delta.appendOnly": "false"})
    last = max(chain.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())
    chain.delete(f"seq = {last}")


def test_every_link_rewrites_the_checkpoint_with_the_signed_head(spark, home):
    chain = read_chain(spark, home)
    checkpoint = read_checkpoint(home.audit_chain.checkpoint)
    # The access log's last flush wrote the newest head: the whole link, signed with the home's key.
    assert checkpoint.head == {k: chain[-1][k] for k in checkpoint.head}
    assert checkpoint.head["table_key"] == ACCESS_TABLE and checkpoint.head["key_id"].startswith("ed25519:")
    result = verify_chain(spark, home, checkpoint=checkpoint)
    assert result.ok, result.problems
    assert result.links == len(chain) == 6


def test_a_publish_writes_the_checkpoint_of_the_links_it_appended(spark, home):
    Path(home.audit_chain.checkpoint).unlink()
    land_refined_batch(spark, home, "b-2", usage=[usage_event("LogInEvent", ALICE, NOW - 10, "b-2", login_source="SSO_LOGIN")])
    publish_audit(spark, home)
    head = read_checkpoint(home.audit_chain.checkpoint).head
    assert (head["seq"], head["table_key"], head["batch_id"]) == (6, "gold.audit_events", "b-2")


def test_a_cut_tail_is_named_by_the_chains_history(spark, home):
    _cut_the_tail(home)
    result = verify_chain(spark, home)
    assert not result.ok
    by_table = {problem.table_key: problem for problem in result.problems}
    chain_finding = result.broken
    assert chain_finding.table_key == "ops.audit_chain" and "Delta history" in chain_finding.reason
    assert [c.split(" (")[0].split(" ", 1)[1] for c in chain_finding.commits_after] == ["SET TBLPROPERTIES", "DELETE"]
    assert '"delta.appendOnly": "false"' in chain_finding.commits_after[0]
    # The access log's DELETE is no prune (a prune deletes whole batches by `batch_id IN (...)`).
    assert "DELETE (predicate batch_id = 'access-" in by_table[ACCESS_TABLE].commits_after[0]
    assert "not a prune of whole batches" in by_table[ACCESS_TABLE].commits_after[0]


def test_a_cut_tail_is_named_against_the_checkpoint(spark, home, tmp_path):
    auditor_copy = tmp_path / "auditor-head.json"
    shutil.copy(home.audit_chain.checkpoint, auditor_copy)
    _cut_the_tail(home)
    result = verify_chain(spark, home, checkpoint=read_checkpoint(auditor_copy))
    assert (result.broken.seq, result.broken.table_key) == (5, "ops.audit_chain")
    assert "the chain ends at link 4 but the checkpoint" in result.broken.reason
    assert "names link 5 (ops.access_log" in result.broken.reason and "links 5..5 were removed" in result.broken.reason


def test_a_tail_cut_from_the_delta_logs_leaves_no_history_but_not_the_checkpoint(spark, home):
    # A writer who removes the newest commit files of both logs rewinds the tables: their histories
    # hold nothing unusual, and only the head kept outside the home names what is gone.
    for key in ("ops.audit_chain", ACCESS_TABLE):
        log = table_location(home, key) / "_delta_log"
        max(log.glob("*.json")).unlink()
    assert verify_chain(spark, home).ok
    result = verify_chain(spark, home, checkpoint=read_checkpoint(home.audit_chain.checkpoint))
    assert not result.ok and "links 5..5 were removed" in result.broken.reason


def test_a_rewritten_chain_is_named_against_the_checkpoint(spark, home):
    checkpoint = read_checkpoint(home.audit_chain.checkpoint)
    forged = dict(checkpoint.head, link_digest="f" * 64)
    from pipelines.audit_trail.chain_checkpoint import checkpoint_problem
    from pipelines.audit_trail.chain_keys import chain_key

    problem = checkpoint_problem(read_chain(spark, home)[:5] + [forged], checkpoint, chain_key(home))
    assert problem is not None and "the chain was rewritten up to that link" in problem


def test_an_altered_or_foreign_checkpoint_is_refused_naming_it(home, tmp_path):
    document = json.loads(Path(home.audit_chain.checkpoint).read_text())
    document["head"]["seq"] = 2
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(document))
    with pytest.raises(InputError, match="--against: .*altered.json.*the checkpoint was altered"):
        read_checkpoint(altered)
    (tmp_path / "other.json").write_text('{"seq": 1}')
    with pytest.raises(InputError, match="is not a chain checkpoint"):
        read_checkpoint(tmp_path / "other.json")
    with pytest.raises(InputError, match="--against: .*missing.json' does not exist"):
        read_checkpoint(tmp_path / "missing.json")


def test_maintenance_and_a_prune_past_retention_are_not_findings(spark, home):
    from pipelines.batch.access_retention import prune_access_log
    from pipelines.runtime.maintenance import maintenance_for

    maintenance = maintenance_for(home, spark)
    for key in ("ops.audit_chain", ACCESS_TABLE, "gold.audit_events"):
        maintenance.optimize(key)
        maintenance.vacuum(key, retention_hours=0)
    # 401 days from now every access batch is past retention: the prune deletes them all, as it may.
    later = NOW + 401 * 86_400_000
    assert len(prune_access_log(spark, home, later)) == 3
    result = verify_chain(spark, home, now_ms=later, checkpoint=read_checkpoint(home.audit_chain.checkpoint))
    assert result.ok, result.problems
    # Judged today, the same prune removed batches inside their retention.
    assert "linked inside access_log.retention_days" in verify_chain(spark, home).problems[-1].commits_after[0]


def test_the_verify_command_names_a_cut_tail_against_a_checkpoint(spark, home, tmp_path):
    from tests.pipelines.cli.test_cli import run_cli

    auditor_copy = tmp_path / "auditor-head.json"
    shutil.copy(home.audit_chain.checkpoint, auditor_copy)
    settings_args = ("--set", "mlflow.enabled=false", "--set", "audit_chain.signing=ed25519")
    clean = run_cli(*settings_args, "verify", "--against", str(auditor_copy), home=home.home)
    assert "checkpoint " + str(auditor_copy) + ": link 5 matches" in clean.stdout and "OK: 6 links" in clean.stdout
    _cut_the_tail(home)
    cut = run_cli(*settings_args, "verify", "--against", str(auditor_copy), home=home.home, check=False)
    assert cut.returncode == 1, cut.stderr
    assert "BROKEN at link 5: table ops.audit_chain: the chain ends at link 4 but the checkpoint" in cut.stderr
    assert "BROKEN: table ops.audit_chain: its Delta history holds 2 commit(s)" in cut.stderr
    assert "Traceback" not in cut.stderr
    missing = run_cli(*settings_args, "verify", "--against", str(tmp_path / "nowhere.json"), home=home.home, check=False)
    assert missing.returncode == 1 and "--against: " in missing.stderr and "does not exist" in missing.stderr


def test_a_checkpoint_setting_that_is_not_absolute_is_refused_naming_it(tmp_path):
    from conf.errors import ConfigError
    from conf.settings import load_settings

    with pytest.raises(ConfigError, match="audit_chain.checkpoint: 'head.json' must be an absolute path or an object-storage URL"):
        load_settings("local", home=tmp_path, env={}, overrides=["audit_chain.checkpoint=head.json"])
    settings = load_settings("local", home=tmp_path, env={}, overrides=["audit_chain.checkpoint=s3://auditors/prod/head.json"])
    assert settings.audit_chain.checkpoint == "s3://auditors/prod/head.json"


def test_the_checkpoint_can_be_kept_on_object_storage(tmp_path, monkeypatch):
    import pyarrow as pa

    from pipelines.bench.silver_remote import s3_server
    from pipelines.serving.access_log import arrow_schema

    with s3_server(tmp_path, bucket="auditors-checkpoint") as endpoint:
        for name, value in endpoint.options.items():
            monkeypatch.setenv(name, value)  # a bucket outside the home is reached with the standard variables
        url = "s3://auditors-checkpoint/prod/head.json"
        settings = dataclasses.replace(make_settings(tmp_path / "home"), audit_chain=AuditChainSettings(checkpoint=url))
        rows = pa.Table.from_pylist([_access_record("a-s3")], schema=arrow_schema())
        link = ArrowChainLinker(settings).link(ACCESS_TABLE, "access-s3", rows, 1)
        checkpoint = read_checkpoint(url)
    assert checkpoint.source == url and checkpoint.head == {k: link[k] for k in checkpoint.head}
