"""The audit chain on real Delta tables: a clean chain verifies, and each kind of tampering is caught and named."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from conf.settings_sections import AuditChainSettings
from conf.tables import table_location, table_name
from conf.errors import ConfigError, InputError
from pipelines.batch.audit_chain import chain_key, create_key, link_batches, read_chain
from pipelines.batch.chain_verification import verify_chain
from pipelines.batch.publish_audit import publish_audit
from pipelines.batch.publish_openmetadata import publish_openmetadata
from pipelines.runtime.io import append, read_table
from tests.conftest import make_settings, register_fresh_tables
from tests.pipelines.audit_inputs import change_event, land_refined_batch, usage_event

DAY = 86_400_000
NOW = int(time.time() * 1000)
DATASET = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"
ALICE, BOB, ADMIN = "urn:li:corpuser:alice", "urn:li:corpuser:bob", "urn:li:corpuser:admin"


def _publish_two_batches(spark, settings) -> None:
    land_refined_batch(
        spark, settings, "b-1",
        usage=[usage_event("LogInEvent", ALICE, NOW - 2 * DAY, "b-1", login_source="passwordLogin"),
               usage_event("EntityEvent", BOB, NOW - DAY, "b-1", entity_urn=DATASET, entity_type="dataset")],
        changes=[change_event("cs-1", "TAG", "ADD", ALICE, NOW - DAY + 10, DATASET, "globalTags", "b-1")],
    )  # fmt: skip
    publish_audit(spark, settings)
    publish_openmetadata(spark, settings)
    land_refined_batch(
        spark, settings, "b-2",
        usage=[usage_event("LogInEvent", BOB, NOW - 1000, "b-2", login_source="SSO_LOGIN")],
        changes=[change_event("cs-2", "LIFECYCLE", "HARD_DELETE", ADMIN, NOW - 500, DATASET, "datasetKey", "b-2")],
    )  # fmt: skip
    publish_audit(spark, settings)
    publish_openmetadata(spark, settings)


@pytest.fixture(scope="module")
def published_home(spark, tmp_path_factory) -> Path:
    """A home with two batches published (audit events, silver events, ChangeEvents), chained."""
    settings = make_settings(tmp_path_factory.mktemp("chained"))
    register_fresh_tables(spark, settings)
    _publish_two_batches(spark, settings)
    return settings.home


@pytest.fixture
def home_copy(spark, published_home, tmp_path):
    """A copy of the published home, its tables registered: each test tampers with its own copy."""
    home = tmp_path / "home"
    shutil.copytree(published_home, home)
    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    return settings


def test_a_clean_chain_verifies(spark, home_copy):
    chain = read_chain(spark, home_copy)
    # b-1 and b-2 in each of the three tables: six links, seq 0..5.
    assert [link["seq"] for link in chain] == list(range(6))
    assert sorted((link["table_key"], link["batch_id"], link["row_count"]) for link in chain) == [
        ("gold.audit_events", "b-1", 3), ("gold.audit_events", "b-2", 2),
        ("gold.openmetadata_change_events", "b-1", 1), ("gold.openmetadata_change_events", "b-2", 1),
        ("silver.entity_change_events", "b-1", 1), ("silver.entity_change_events", "b-2", 1),
    ]  # fmt: skip
    result = verify_chain(spark, home_copy)
    assert result.ok, result.broken
    assert result.head_digest == chain[-1]["link_digest"]
    assert result.batches_checked == 6 and result.rows_checked == 9


def test_publishing_again_adds_no_link(spark, home_copy):
    before = len(read_chain(spark, home_copy))
    publish_audit(spark, home_copy)
    publish_openmetadata(spark, home_copy)
    assert link_batches(spark, home_copy, ["gold.audit_events"], ["b-1", "b-2"]) == 0
    assert len(read_chain(spark, home_copy)) == before


def test_linking_an_unchained_table_is_refused_naming_it(spark, home_copy):
    before = len(read_chain(spark, home_copy))
    with pytest.raises(InputError, match="table_keys: \\['silver.aspect_state'\\] not chained"):
        link_batches(spark, home_copy, ["gold.audit_events", "silver.aspect_state"], ["b-1"])
    assert len(read_chain(spark, home_copy)) == before


def test_an_update_of_an_actor_is_named(spark, home_copy):
    audit = table_name(home_copy, "gold.audit_events")
    spark.sql(f"UPDATE {audit} SET actor_urn = 'urn:li:corpuser:mallory' "
              f"WHERE actor_urn = '{ALICE}' AND event_type = 'LogInEvent'").collect()
    broken = verify_chain(spark, home_copy).broken
    assert (broken.table_key, broken.batch_id) == ("gold.audit_events", "b-1")
    assert (broken.missing, broken.added, broken.changed) == (0, 0, 1)
    assert any(commit.endswith("UPDATE") for commit in broken.commits_after)


def test_a_delete_is_named(spark, home_copy):
    audit = table_name(home_copy, "gold.audit_events")
    spark.sql(f"DELETE FROM {audit} WHERE actor_urn = '{BOB}' AND event_type = 'LogInEvent'").collect()
    broken = verify_chain(spark, home_copy).broken
    assert (broken.table_key, broken.batch_id) == ("gold.audit_events", "b-2")
    assert (broken.missing, broken.added, broken.changed) == (1, 0, 0)
    assert len(broken.examples) == 1


def test_an_inserted_forged_row_is_named(spark, home_copy):
    forged = read_table(spark, home_copy, "gold.audit_events").filter("batch_id = 'b-2'").limit(1)
    forged = forged.withColumn("event_id", forged.event_id.substr(1, 10)).withColumn("actor_urn", forged.actor_urn.substr(1, 0))
    append(forged, home_copy, "gold.audit_events")
    broken = verify_chain(spark, home_copy).broken
    assert (broken.table_key, broken.batch_id) == ("gold.audit_events", "b-2")
    assert (broken.missing, broken.added, broken.changed) == (0, 1, 0)


def test_a_row_in_a_batch_the_chain_never_linked_is_named(spark, home_copy):
    row = read_table(spark, home_copy, "gold.audit_events").filter("batch_id = 'b-2'").limit(1)
    append(row.withColumn("batch_id", row.batch_id.substr(1, 0)), home_copy, "gold.audit_events")
    broken = verify_chain(spark, home_copy).broken
    assert broken.batch_id == "" and "never linked" in broken.reason and broken.added == 1


def test_a_restore_to_an_older_version_is_named(spark, home_copy):
    chain = read_chain(spark, home_copy)
    first_version = next(l["delta_version"] for l in chain if l["table_key"] == "gold.audit_events")
    DeltaTable(str(table_location(home_copy, "gold.audit_events"))).restore(first_version)
    broken = verify_chain(spark, home_copy).broken
    assert (broken.table_key, broken.batch_id) == ("gold.audit_events", "b-2")
    assert broken.missing == 2
    assert any(commit.endswith("RESTORE") for commit in broken.commits_after)


def test_a_parquet_file_overwritten_on_disk_is_named(spark, home_copy):
    location = table_location(home_copy, "gold.openmetadata_change_events")
    data_file = next(f for f in DeltaTable(str(location)).file_uris() if f.endswith(".parquet"))
    path = Path(data_file.removeprefix("file://"))
    table = pq.read_table(path)
    users = table.column("user_name").to_pylist()
    table = table.set_column(table.schema.get_field_index("user_name"), "user_name",
                             __import__("pyarrow").array(["admin-forged"] * len(users)))  # fmt: skip
    pq.write_table(table, path)
    broken = verify_chain(spark, home_copy).broken
    assert broken.table_key == "gold.openmetadata_change_events"
    assert "data file was replaced" in broken.reason and path.name in broken.reason


def _forge_same_size(path: Path, old_actor: str, new_actor: str) -> bool:
    """Rewrite a Parquet file with one actor renamed, padded to its old byte length; False if it lacks the actor."""
    original = path.read_bytes()
    table = pq.read_table(path)
    actors = table.column("actor_urn").to_pylist()
    if old_actor not in actors:
        return False
    renamed = pa.array([new_actor if actor == old_actor else actor for actor in actors], type=pa.string())
    forged_table = table.set_column(table.schema.get_field_index("actor_urn"), "actor_urn", renamed)
    sink = pa.BufferOutputStream()
    pq.write_table(forged_table, sink, compression="zstd", compression_level=19, store_schema=False)
    forged = sink.getvalue().to_pybytes()
    assert len(forged) <= len(original), f"forged file is {len(forged)} bytes, the original {len(original)}"
    # Readers find the footer from the file's end and pages by absolute offset, so bytes between the
    # last page and the footer are never read: padding there keeps the file readable at the old size.
    footer_length = int.from_bytes(forged[-8:-4], "little") + 8
    padding = b"\0" * (len(original) - len(forged))
    path.write_bytes(forged[:-footer_length] + padding + forged[-footer_length:])
    return True


def test_a_parquet_file_rewritten_with_its_old_size_is_named(spark, home_copy):
    location = table_location(home_copy, "gold.audit_events")
    files = [Path(f.removeprefix("file://")) for f in DeltaTable(str(location)).file_uris()]
    # Same length, same rows: only one actor's text differs (bob -> rob), as a careful forger would do.
    sizes = {path: path.stat().st_size for path in files}
    forged = [path for path in files if _forge_same_size(path, BOB, "urn:li:corpuser:rob")]
    assert forged, "no data file holds bob's events"
    assert all(path.stat().st_size == sizes[path] for path in files)
    assert "urn:li:corpuser:rob" in pq.read_table(forged[0]).column("actor_urn").to_pylist()
    broken = verify_chain(spark, home_copy).broken
    assert broken.table_key == "gold.audit_events" and broken.batch_id in ("b-1", "b-2")
    assert "files were altered" in broken.reason and broken.commits_after == ()


def test_an_edited_chain_row_is_named(spark, home_copy):
    chain_table = table_name(home_copy, "ops.audit_chain")
    # The chain is append-only: the engine refuses the edit until the property is taken off.
    with pytest.raises(Exception, match="append-only"):
        spark.sql(f"UPDATE {chain_table} SET row_count = 99 WHERE seq = 2").collect()
    spark.sql(f"ALTER TABLE {chain_table} SET TBLPROPERTIES ('delta.appendOnly' = 'false')").collect()
    spark.sql(f"UPDATE {chain_table} SET row_count = 99 WHERE seq = 2").collect()
    broken = verify_chain(spark, home_copy).broken
    assert broken.seq == 2 and "edited" in broken.reason


def test_append_only_tables_refuse_a_delete(spark, home_copy):
    for key in ("silver.entity_change_events", "gold.openmetadata_change_events", "ops.audit_chain"):
        with pytest.raises(Exception, match="append-only"):
            spark.sql(f"DELETE FROM {table_name(home_copy, key)}").collect()


def test_signed_links_verify_and_a_wrong_key_is_named(spark, tmp_path):
    settings = make_settings(tmp_path / "signed")
    settings = dataclasses.replace(settings, audit_chain=AuditChainSettings(signing="ed25519"))
    key_id = create_key(settings, "ed25519")
    register_fresh_tables(spark, settings)
    _publish_two_batches(spark, settings)
    chain = read_chain(spark, settings)
    assert {link["key_id"] for link in chain} == {key_id}
    assert verify_chain(spark, settings).ok
    other = dataclasses.replace(settings, audit_chain=AuditChainSettings(signing="hmac", key_file="auth/other.key"))
    create_key(other, "hmac")
    # An Ed25519 signature is checked with the stored public key, whatever key is configured now.
    assert verify_chain(spark, other).ok
    # Re-signing an edited link needs the private key: a link signed with another key does not verify.
    chain_table = table_name(settings, "ops.audit_chain")
    spark.sql(f"ALTER TABLE {chain_table} SET TBLPROPERTIES ('delta.appendOnly' = 'false')").collect()
    spark.sql(f"UPDATE {chain_table} SET key_id = 'ed25519:{'00' * 32}' WHERE seq = 0").collect()
    broken = verify_chain(spark, settings).broken
    assert broken.seq == 0 and "signature" in broken.reason


def test_the_verify_command_exits_0_on_a_clean_chain_and_1_naming_a_broken_link(spark, home_copy):
    from tests.pipelines.cli.test_cli import run_cli

    clean = run_cli("--set", "mlflow.enabled=false", "verify", home=home_copy.home)
    head = read_chain(spark, home_copy)[-1]["link_digest"]
    assert clean.returncode == 0 and "OK: 6 links, 6 batches, 9 rows verified" in clean.stdout and head in clean.stdout
    audit = table_name(home_copy, "gold.audit_events")
    spark.sql(f"DELETE FROM {audit} WHERE actor_urn = '{BOB}' AND event_type = 'LogInEvent'").collect()
    broken = run_cli("--set", "mlflow.enabled=false", "verify", home=home_copy.home, check=False)
    assert broken.returncode == 1
    assert "table gold.audit_events, batch 'b-2'" in broken.stderr and "rows missing 1, added 0, changed 0" in broken.stderr
    assert "v" in broken.stderr and "DELETE" in broken.stderr
    bad = run_cli("verify", "--from", "yesterday", home=home_copy.home, check=False)
    assert bad.returncode == 1 and "--from: 'yesterday' is not a date" in bad.stderr


def test_a_row_a_later_batch_legitimately_takes_over_is_relinked(spark, home_copy):
    stored = read_table(spark, home_copy, "gold.audit_events").filter("batch_id = 'b-1' AND event_type = 'LogInEvent'").first()
    # The same login again (same event id) with a smaller record hash: the MERGE prefers it and moves it to b-3.
    duplicate = next(
        row for agent in (f"agent-{i}" for i in range(200))
        if (row := usage_event("LogInEvent", ALICE, NOW - 2 * DAY, "b-3", login_source="passwordLogin",
                               user_agent=agent))["record_hash"] < stored.source_id
    )  # fmt: skip
    land_refined_batch(spark, home_copy, "b-3", usage=[duplicate])
    publish_audit(spark, home_copy)
    moved = read_table(spark, home_copy, "gold.audit_events").filter(f"event_id = '{stored.event_id}'").first()
    assert moved.batch_id == "b-3"
    newest = read_chain(spark, home_copy)[-2:]
    assert sorted((link["batch_id"], link["row_count"]) for link in newest) == [("b-1", 2), ("b-3", 1)]
    assert verify_chain(spark, home_copy).ok


def test_verify_window_selects_batches_by_link_date(spark, home_copy):
    from datetime import date, timedelta

    today = date.today()
    assert verify_chain(spark, home_copy, today - timedelta(days=1), today + timedelta(days=1)).batches_checked == 6
    assert verify_chain(spark, home_copy, today + timedelta(days=1)).batches_checked == 0
    with pytest.raises(InputError, match="--from"):
        verify_chain(spark, home_copy, today, today - timedelta(days=1))


def test_signing_settings_name_the_key_and_value(tmp_path):
    from conf.settings import load_settings

    with pytest.raises(ConfigError, match="audit_chain.signing: 'rsa' is not one of none, hmac, ed25519"):
        load_settings("local", home=tmp_path, env={}, overrides=["audit_chain.signing=rsa"])
    settings = load_settings("local", home=tmp_path, env={}, overrides=["audit_chain.signing=hmac"])
    with pytest.raises(ConfigError, match="audit_chain.key_file: .*cannot be read"):
        chain_key(settings)
    with pytest.raises(InputError, match="--kind: 'rsa'"):
        create_key(settings, "rsa")
    create_key(settings, "hmac")
    assert chain_key(settings).kind == "hmac"
    with pytest.raises(InputError, match="refusing to replace"):
        create_key(settings, "hmac")


def _rechain_with_byte_stream_digests(spark, settings) -> None:
    """Rewrite the chain as a home built before row hashes holds it: byte-stream batch digests."""
    from gold.audit_chain import GENESIS_DIGEST, new_link
    from pipelines.batch.audit_chain import CHAIN_TABLE, byte_stream_digests

    links = read_chain(spark, settings)
    shutil.rmtree(table_location(settings, CHAIN_TABLE))
    register_fresh_tables(spark, settings)
    head, rewritten = GENESIS_DIGEST, []
    for link in links:
        count, digest = byte_stream_digests(spark, settings, link["table_key"], [link["batch_id"]])[link["batch_id"]]
        assert len(digest) == 64 and count == link["row_count"]
        rewritten.append(new_link(link["seq"], link["table_key"], link["batch_id"], link["delta_version"], count, digest,
                                  head, link["recorded_at_ms"], chain_key(settings)))  # fmt: skip
        head = rewritten[-1]["link_digest"]
    columns = [field.name for field in spark.table(table_name(settings, CHAIN_TABLE)).schema.fields]
    append(spark.createDataFrame([tuple(l[c] for c in columns) for l in rewritten],
                                 spark.table(table_name(settings, CHAIN_TABLE)).schema), settings, CHAIN_TABLE)  # fmt: skip


def test_new_links_hold_row_hash_digests_computed_by_the_engine(spark, home_copy):
    assert all(link["batch_digest"].startswith("rows-sha256:") for link in read_chain(spark, home_copy))


def test_a_chain_of_byte_stream_digests_from_an_older_home_still_verifies_and_catches_an_edit(spark, home_copy):
    _rechain_with_byte_stream_digests(spark, home_copy)
    result = verify_chain(spark, home_copy)
    assert result.ok, result.broken
    assert result.batches_checked == 6 and result.rows_checked == 9
    audit = table_name(home_copy, "gold.audit_events")
    spark.sql(f"UPDATE {audit} SET actor_urn = 'urn:li:corpuser:mallory' WHERE actor_urn = '{BOB}' AND batch_id = 'b-2'").collect()
    broken = verify_chain(spark, home_copy).broken
    assert (broken.table_key, broken.batch_id, broken.changed) == ("gold.audit_events", "b-2", 1)


def _refine_without_publishing(spark, settings, batch_id: str) -> None:
    land_refined_batch(
        spark, settings, batch_id,
        usage=[usage_event("LogInEvent", ALICE, NOW - 100, batch_id, login_source="SSO_LOGIN")],
        changes=[change_event(f"cs-{batch_id}", "TAG", "REMOVE", ALICE, NOW - 50, DATASET, "globalTags", batch_id)],
    )  # fmt: skip


def test_rows_refined_and_not_yet_linked_are_pending_naming_the_stage_then_verify_once_published(spark, home_copy):
    _refine_without_publishing(spark, home_copy, "b-3")
    result = verify_chain(spark, home_copy)
    assert result.ok, result.problems
    assert [(p.table_key, p.batch_id, p.rows, p.stage) for p in result.pending] == [
        ("silver.entity_change_events", "b-3", 1, "publish_openmetadata")
    ]
    publish_audit(spark, home_copy)
    publish_openmetadata(spark, home_copy)
    published = verify_chain(spark, home_copy)
    assert published.ok and published.pending == () and published.batches_checked == 9


def test_a_forged_batch_is_broken_beside_a_pending_one(spark, home_copy):
    _refine_without_publishing(spark, home_copy, "b-3")
    row = read_table(spark, home_copy, "gold.audit_events").filter("batch_id = 'b-2'").limit(1)
    append(row.withColumn("batch_id", F.lit("b-forged")), home_copy, "gold.audit_events")
    result = verify_chain(spark, home_copy)
    assert (result.broken.table_key, result.broken.batch_id, result.broken.added) == ("gold.audit_events", "b-forged", 1)
    assert "forged" in result.broken.reason
    assert [p.batch_id for p in result.pending] == ["b-3"]


def test_the_verify_command_exits_3_for_a_publish_that_stopped_and_1_for_a_forged_row(spark, tmp_path):
    from tests.pipelines.cli.test_cli import run_cli

    home = tmp_path / "home"
    fixture = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "datahub" / "history-small.mcl.jsonl"
    quiet = ("--set", "mlflow.enabled=false")
    run_cli(*quiet, "land", str(fixture), home=home)
    run_cli(*quiet, "refine", home=home)
    # Killed after its MERGE, before it links: the audit rows are in the table and no link names them.
    killed = run_cli(*quiet, "publish-audit", home=home, env={"LAKEHOUSE_CRASH_AT": "publish_audit.merged"}, check=False)
    assert killed.returncode == -9
    pending = run_cli(*quiet, "verify", home=home, check=False)
    assert pending.returncode == 3, pending.stderr
    assert "PENDING: table gold.audit_events, batch " in pending.stderr and "publish_audit links them" in pending.stderr
    assert "PENDING: table silver.entity_change_events" in pending.stderr and "publish_openmetadata links them" in pending.stderr
    assert "BROKEN" not in pending.stderr and "forged" not in pending.stderr and "OK: 0 links" in pending.stdout
    settings = make_settings(home)
    register_fresh_tables(spark, settings)
    row = read_table(spark, settings, "gold.audit_events").limit(1)
    append(row.withColumn("batch_id", F.lit("b-forged")), settings, "gold.audit_events")
    forged = run_cli(*quiet, "verify", home=home, check=False)
    assert forged.returncode == 1, forged.stderr
    assert "BROKEN at no link: table gold.audit_events, batch 'b-forged': rows of a batch the chain never linked" in forged.stderr
    assert "PENDING: table gold.audit_events" in forged.stderr and "Traceback" not in forged.stderr
