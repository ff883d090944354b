"""Serving indexes kept as memory-mapped Arrow files: the same index as one built in memory, built once per file."""

from __future__ import annotations

import datetime
import fcntl
import multiprocessing
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.serving.index import build_file_index
from pipelines.serving.index_store import IndexStore, write_index
from pipelines.serving.row_files import ROWS_PER_BATCH, RowFile, write_row_file
from pipelines.serving.rows import RowGroupCache, read_rows

DAY = datetime.date(2026, 11, 20)


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "event_date=2026-11-20" / "part-0.parquet"
    path.parent.mkdir()
    rng = np.random.default_rng(3)
    rows = 500
    pq.write_table(pa.table({
        "event_id": [f"e{i}" for i in range(rows)],
        "event_type": [["LogInEvent", "CreateUserEvent", None][i] for i in rng.integers(0, 3, rows)],
        "timestamp": pa.array([None if i % 97 == 0 else int(t) for i, t in enumerate(rng.integers(0, 10_000, rows))], pa.int64()),
        "actor_urn": [f"urn:li:corpuser:u{i}" for i in rng.integers(0, 40, rows)],
        "entity_urn": [f"urn:li:dataset:d{i}" for i in rng.integers(0, 300, rows)],
    }), path, row_group_size=64)  # fmt: skip
    return str(path)


def test_a_mapped_index_equals_the_index_built_in_memory(tmp_path, data_file):
    built = build_file_index(data_file, {"event_date": DAY})
    mapped = IndexStore(tmp_path / "store").index_of(data_file, {"event_date": DAY})
    assert mapped.path == built.path and mapped.constants == {"event_date": DAY}
    np.testing.assert_array_equal(mapped.timestamps, built.timestamps)
    np.testing.assert_array_equal(mapped.rows, built.rows)
    np.testing.assert_array_equal(mapped.row_group_starts, built.row_group_starts)
    assert mapped.column_names == built.column_names
    for name, column in built.columns.items():
        np.testing.assert_array_equal(mapped.columns[name].codes, column.codes)
        assert mapped.columns[name].values.to_pylist() == column.values.to_pylist()
    assert not mapped.timestamps.flags.writeable  # a view of the mapped file, not a copy


def _index_in_child(store_dir, path, results):
    index = IndexStore(store_dir).index_of(path)
    results.put((int(index.timestamps.sum()), len(index.columns["actor_urn"].values)))


def test_processes_sharing_a_store_wait_for_the_one_building_an_index_and_map_what_it_wrote(tmp_path, data_file):
    store = IndexStore(tmp_path / "store")
    positions, _, values = store._files(data_file)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    children = [context.Process(target=_index_in_child, args=(store.directory, data_file, results)) for _ in range(2)]
    with open(positions.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a process building the index holds it
        for child in children:
            child.start()
        time.sleep(2.0)
        assert not values.exists() and all(child.is_alive() for child in children)  # they wait, not build
        write_index(build_file_index(data_file), positions, values)
        written = values.stat().st_ino
    for child in children:
        child.join(60)
    built = build_file_index(data_file)
    assert [results.get(timeout=5) for _ in children] == [(int(built.timestamps.sum()), len(built.columns["actor_urn"].values))] * 2
    assert values.stat().st_ino == written  # mapped, not built again


def test_a_retired_file_index_is_removed_and_built_again_when_asked_for(tmp_path, data_file):
    store = IndexStore(tmp_path / "store")
    store.index_of(data_file)
    store.forget({data_file})
    assert not list((tmp_path / "store").glob("*.arrow"))
    assert store.index_of(data_file).size == build_file_index(data_file).size


@pytest.mark.parametrize("row_group_size", [64, 100, 1000])
def test_a_row_file_holds_the_rows_the_parquet_file_holds_whatever_its_row_groups(tmp_path, data_file, row_group_size):
    source = pq.read_table(data_file)
    path = tmp_path / "regrouped.parquet"
    pq.write_table(source, path, row_group_size=row_group_size)
    write_row_file(str(path), ["event_id", "timestamp", "actor_urn"], tmp_path / "rows.arrow")
    row_file = RowFile(tmp_path / "rows.arrow")
    batch = ROWS_PER_BATCH
    wanted = np.array([499, 0, batch - 1, batch, batch + 1, 2 * batch - 1, 2 * batch, 300, 301, 64, 63])
    expected = [{"event_id": source.column("event_id")[i].as_py(), "timestamp": source.column("timestamp")[i].as_py(),
                 "actor_urn": source.column("actor_urn")[i].as_py(), "domain": None} for i in sorted(wanted)]  # fmt: skip
    assert row_file.read(wanted, ["event_id", "timestamp", "actor_urn", "domain"]) == expected
    reader = pa.ipc.open_file(pa.memory_map(str(tmp_path / "rows.arrow")))
    whole, rest = divmod(500, batch)
    assert [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)] == [batch] * whole + [rest] * bool(rest)


def test_a_store_with_row_columns_reads_page_rows_from_row_files_equal_to_the_parquet_rows(tmp_path, data_file):
    columns = ("event_id", "timestamp", "entity_urn", "event_type")
    index = IndexStore(tmp_path / "store", row_columns=columns).index_of(data_file)
    assert index.row_file is not None
    parquet_index = build_file_index(data_file)
    positions = np.array([0, 3, 17, 200, 201, index.size - 1])
    from_rows = read_rows(RowGroupCache(0, columns), index, positions, columns)
    from_parquet = read_rows(RowGroupCache(0, columns), parquet_index, positions, columns)

    def by_id(rows):
        return sorted(rows, key=lambda r: r["event_id"])

    assert by_id(from_rows) == by_id(from_parquet) and len(from_rows) == len(positions)


def test_a_folder_built_without_row_files_gains_them_and_forget_removes_them(tmp_path, data_file):
    IndexStore(tmp_path / "store").index_of(data_file)
    assert not list((tmp_path / "store").glob("*.rows.arrow"))
    store = IndexStore(tmp_path / "store", row_columns=("event_id",))
    assert store.index_of(data_file).row_file is not None
    assert len(list((tmp_path / "store").glob("*.rows.arrow"))) == 1
    store.forget({data_file})
    assert not list((tmp_path / "store").glob("*.arrow"))
