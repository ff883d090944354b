"""The in-memory index of a data file, the match condition evaluated over it, the newest matches and page reads."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlglot import exp

from conf.errors import ConfigError
from gold.search import to_match_condition
from gold.search_request import SearchRequest
from pipelines.serving.condition import to_mask
from pipelines.serving.index import build_file_index
from pipelines.serving.matches import find_matches
from pipelines.serving.rows import RowGroupCache, read_rows
from pipelines.serving.snapshots import DataFile, Snapshot

DAY = datetime.date(2026, 11, 20)
BASE = 1_795_132_800_000  # 2026-11-20T00:00:00Z
# Written out of time order, with a null timestamp and a null actor, in row groups of 3 rows.
ROWS = [
    # (timestamp, event_type, actor_urn, event_id)
    (BASE + 50, "LogInEvent", "urn:li:corpuser:alice", "e5"),
    (BASE + 10, "LogInEvent", "urn:li:corpuser:bob", "e1"),
    (None, "LogInEvent", "urn:li:corpuser:bob", "e-null"),
    (BASE + 30, "FailedLogInEvent", None, "e3"),
    (BASE + 20, "CreateUserEvent", "urn:li:corpuser:alice", "e2"),
    (BASE + 40, "LogInEvent", "urn:li:corpuser:bob", "e4"),
    (BASE + 40, "FailedLogInEvent", "urn:li:corpuser:alice", "e4b"),
]


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "event_date=2026-11-20" / "part-0.parquet"
    path.parent.mkdir()
    table = pa.table({
        "event_id": [r[3] for r in ROWS],
        "event_type": [r[1] for r in ROWS],
        "timestamp": pa.array([r[0] for r in ROWS], pa.int64()),
        "actor_urn": [r[2] for r in ROWS],
        "entity_type": [None] * len(ROWS),
        "aspect_name": [None] * len(ROWS),
        "raw_event": [f"{{\"id\": \"{r[3]}\"}}" for r in ROWS],
    })  # fmt: skip
    pq.write_table(table, path, row_group_size=3)
    index = build_file_index(str(path), {"event_date": DAY})
    return DataFile(str(path), BASE + 10, BASE + 50, index)


def test_the_index_holds_timestamps_in_order_and_the_file_row_of_each(data_file):
    index = data_file.index
    assert index.timestamps.tolist() == [BASE + 10, BASE + 20, BASE + 30, BASE + 40, BASE + 40, BASE + 50]
    assert index.rows.tolist() == [1, 4, 3, 5, 6, 0]  # the null timestamp (row 2) is left out
    assert index.row_group_starts.tolist() == [0, 3, 6]
    actors = index.columns["actor_urn"]
    assert [actors.values[c].as_py() if c >= 0 else None for c in actors.codes] == [
        "urn:li:corpuser:bob", "urn:li:corpuser:alice", None, "urn:li:corpuser:bob", "urn:li:corpuser:alice",
        "urn:li:corpuser:alice",
    ]  # fmt: skip
    assert index.columns["entity_type"].codes.tolist() == [-1] * 6
    assert index.between(BASE + 20, BASE + 40) == (1, 3)
    assert index.between(BASE + 41, BASE + 41) == (5, 5)


def _in(column: str, *values: str) -> exp.Expression:
    return exp.column(column).isin(*[exp.Literal.string(v) for v in values])


def _ts(node: type, value: int) -> exp.Expression:
    return node(this=exp.column("timestamp"), expression=exp.Literal.number(value))


def _date(node: type, day: str) -> exp.Expression:
    return node(this=exp.column("event_date"), expression=exp.cast(exp.Literal.string(day), "date"))


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (_in("actor_urn", "urn:li:corpuser:alice"), [False, True, False, False, True, True]),
        (_in("actor_urn", "urn:li:corpuser:bob", "urn:li:corpuser:nobody"), [True, False, False, True, False, False]),
        (_in("actor_urn", "urn:li:corpuser:nobody"), False),
        (_in("entity_type", "dataset"), False),  # every value null: never in a list
        (exp.and_(_in("event_type", "LogInEvent"), _ts(exp.GTE, BASE + 40)), [False, False, False, True, False, True]),
        (exp.or_(_in("event_type", "CreateUserEvent"), _ts(exp.EQ, BASE + 30)), [False, True, True, False, False, False]),
        (exp.EQ(this=exp.column("actor_urn"), expression=exp.Literal.string("urn:li:corpuser:bob")),
         [True, False, False, True, False, False]),
        (exp.NEQ(this=exp.column("actor_urn"), expression=exp.Literal.string("urn:li:corpuser:bob")),
         [False, True, False, False, True, True]),  # the null actor is not "not bob" either
        (_ts(exp.LT, BASE + 40), [True, True, True, False, False, False]),
        (_ts(exp.GTE, BASE), True),  # every row, known from the first and last timestamp
        (_ts(exp.GT, BASE + 50), False),
        (_date(exp.LTE, "2026-11-20"), True),
        (exp.and_(_date(exp.GTE, "2026-11-21"), _in("actor_urn", "urn:li:corpuser:alice")), False),
        (exp.paren(_in("event_type", "FailedLogInEvent")), [False, False, True, False, True, False]),
    ],
)
def test_the_condition_is_evaluated_over_the_index(data_file, condition, expected):
    mask = to_mask(condition, data_file.index, 0, data_file.index.size)
    if isinstance(expected, bool):
        assert mask is expected
    else:
        assert mask.tolist() == expected


def test_the_condition_is_evaluated_over_a_slice_of_positions(data_file):
    assert to_mask(_in("actor_urn", "urn:li:corpuser:alice"), data_file.index, 2, 5).tolist() == [False, False, True]


@pytest.mark.parametrize(
    ("condition", "named"),
    [
        (exp.Not(this=_in("actor_urn", "urn:li:corpuser:alice")), "cannot evaluate"),
        (_in("source_ip", "10.0.0.1"), "no index column 'source_ip'"),
        (exp.GT(this=exp.column("actor_urn"), expression=exp.Literal.string("b")), "cannot evaluate"),
        (exp.GT(this=exp.column("timestamp"), expression=exp.column("event_id")), "expects a literal"),
    ],
)
def test_what_the_index_cannot_evaluate_is_refused(data_file, condition, named):
    with pytest.raises(ConfigError, match=named):
        to_mask(condition, data_file.index, 0, data_file.index.size)


def _matches(data_file, body=None, start=BASE, end=BASE + 100, upper=None):
    request = SearchRequest.parse({"startTime": start, "endTime": end}, body).with_window(end)
    return find_matches(Snapshot(1, (data_file,)), to_match_condition(request, end), start, end, upper or end)


def test_totals_and_the_newest_matches_take_every_row_tied_with_the_oldest(data_file):
    matches = _matches(data_file)
    assert matches.total == 6
    newest = matches.newest(2)  # 50 and the first of the two at 40: both rows at 40 come
    assert [p.tolist() for _, p in newest.positions] == [[3, 4, 5]] and not newest.complete
    assert matches.newest(6).complete and [p.tolist() for _, p in matches.newest(6).positions] == [[0, 1, 2, 3, 4, 5]]
    alice = _matches(data_file, {"actorUrns": ["urn:li:corpuser:alice"]}, upper=BASE + 50)
    assert alice.total == 3  # the upper bound limits the candidates, not the total
    assert [p.tolist() for _, p in alice.newest(1).positions] == [[4]]
    assert _matches(data_file, {"actorUrns": ["urn:li:corpuser:nobody"]}).total == 0
    assert _matches(data_file, start=BASE + 41, end=BASE + 50).total == 0


def test_page_rows_are_read_by_row_group_and_cached_within_a_byte_bound(data_file):
    cache = RowGroupCache(max_bytes=1 << 20, columns=("event_id", "timestamp", "entity_urn"))
    rows = read_rows(cache, data_file.index, np.array([0, 4, 5]), ("event_id", "timestamp", "entity_urn"))
    # File rows 1 and 0 (row group 0), then 6 (row group 2); a column the file lacks reads as null.
    assert rows == [
        {"event_id": "e1", "timestamp": BASE + 10, "entity_urn": None},
        {"event_id": "e5", "timestamp": BASE + 50, "entity_urn": None},
        {"event_id": "e4b", "timestamp": BASE + 40, "entity_urn": None},
    ]
    held = cache.bytes
    assert held > 0
    assert read_rows(cache, data_file.index, np.array([5]), ("event_id",)) == [{"event_id": "e5"}]
    assert cache.bytes == held  # from the cache
    cache.forget({data_file.path})
    assert cache.bytes == 0
    none_kept = RowGroupCache(max_bytes=0, columns=("event_id",))
    assert read_rows(none_kept, data_file.index, np.array([1]), ("event_id",)) == [{"event_id": "e2"}]
    assert none_kept.bytes == 0
    with pytest.raises(ConfigError, match="max_bytes: -1"):
        RowGroupCache(max_bytes=-1, columns=("event_id",))


def _write_version(location, timestamps, mode="append"):
    from deltalake import write_deltalake

    table = pa.table({
        "event_id": [f"id-{t}" for t in timestamps],
        "event_type": ["LogInEvent"] * len(timestamps),
        "timestamp": pa.array([BASE + t for t in timestamps], pa.int64()),
        "actor_urn": ["urn:li:corpuser:alice"] * len(timestamps),
        "event_date": pa.array([DAY] * len(timestamps), pa.date32()),
    })  # fmt: skip
    write_deltalake(str(location), table, mode=mode, partition_by=["event_date"])


def test_a_new_version_indexes_only_its_new_files_and_retired_files_are_forgotten(tmp_path):
    from pipelines.serving.snapshots import TableSnapshots

    location = tmp_path / "audit"
    _write_version(location, [1, 2])
    retired: list[set[str]] = []
    snapshots = TableSnapshots(str(location), check_interval_s=0, keep_versions=1, retired=retired.append)
    first = snapshots.latest()
    _write_version(location, [3])
    second = snapshots.latest()
    assert second.version == first.version + 1 and len(second.files) == 2
    old = first.files[0]
    assert next(f for f in second.files if f.path == old.path).index is old.index  # built once
    assert sorted(int(t) - BASE for f in second.files for t in f.index.timestamps) == [1, 2, 3]
    _write_version(location, [4], mode="overwrite")
    snapshots.latest()
    assert retired == []  # the second version stays open for its scrolls
    _write_version(location, [5], mode="overwrite")
    latest = snapshots.latest()
    assert [int(t) - BASE for f in latest.files for t in f.index.timestamps] == [5]
    # Only the version before the latest stays open (keep_versions=1): the first two versions' files are gone.
    assert set().union(*retired) == {f.path for f in second.files}


def _random_day_files(tmp_path, rng, files=4, rows=60):
    """Files of one day whose times interleave (as a compacted file and later appends do), in small row groups."""
    kinds, actors = ["LogInEvent", "FailedLogInEvent", "CreateUserEvent"], ["urn:li:corpuser:a", "urn:li:corpuser:b", None]
    data_files, truth = [], []
    for number in range(files):
        path = tmp_path / "event_date=2026-11-20" / f"part-{number}.parquet"
        path.parent.mkdir(exist_ok=True)
        times = rng.integers(0, 1_000, rows) + BASE
        types = [kinds[i] for i in rng.integers(0, 3, rows)]
        owners = [actors[i] for i in rng.integers(0, 3, rows)]
        ids = [f"f{number}-{i}" for i in range(rows)]
        pq.write_table(pa.table({"event_id": ids, "event_type": types, "timestamp": pa.array(times, pa.int64()),
                                 "actor_urn": owners, "entity_type": [None] * rows, "aspect_name": [None] * rows}),
                       path, row_group_size=7)  # fmt: skip
        index = build_file_index(str(path), {"event_date": DAY})
        data_files.append(DataFile(str(path), int(times.min()), int(times.max()), index))
        truth += list(zip(times.tolist(), types, owners, ids, strict=True))
    return data_files, truth


def test_totals_and_newest_rows_over_files_that_overlap_in_time_equal_a_scan_of_every_row(tmp_path):
    rng = np.random.default_rng(5)
    data_files, truth = _random_day_files(tmp_path, rng)
    snapshot = Snapshot(1, tuple(data_files))
    bodies = [None, {"eventTypes": ["LogInEvent"]}, {"eventTypes": ["LogInEvent", "CreateUserEvent"]},
              {"actorUrns": ["urn:li:corpuser:a"]}, {"eventTypes": ["FailedLogInEvent"], "actorUrns": ["urn:li:corpuser:b"]}]
    for trial in range(60):
        body = bodies[trial % len(bodies)]
        # Every third window holds the whole day (each file wholly inside it), the others cut files.
        start, end = (BASE, BASE + 1_000) if trial % 3 == 0 else sorted(int(t) for t in BASE + rng.integers(0, 1_001, 2))
        upper = end if trial % 2 == 0 else int(rng.integers(start, end + 1))
        request = SearchRequest.parse({"startTime": start, "endTime": end}, body).with_window(end)
        matches = find_matches(snapshot, to_match_condition(request, end), start, end, upper)
        wanted = [row for row in truth if start <= row[0] < end
                  and (not body or "eventTypes" not in body or row[1] in body["eventTypes"])
                  and (not body or "actorUrns" not in body or row[2] in body["actorUrns"])]  # fmt: skip
        assert matches.total == len(wanted), (trial, start, end, body)
        below = sorted((row for row in wanted if row[0] < upper), key=lambda row: row[0], reverse=True)
        limit = int(rng.integers(1, 12))
        oldest = below[min(limit, len(below)) - 1][0] if below else None
        expected = {row[3] for row in below if row[0] >= oldest} if below else set()
        candidates = matches.newest(limit)
        got = {_event_id(index, position) for index, positions in candidates.positions for position in positions}
        assert got == expected, (trial, start, end, upper, body, limit)
        assert candidates.complete == (len(got) == len(below))


def _event_id(index, position):
    return pq.read_table(index.path, columns=["event_id"]).column(0)[int(index.rows[position])].as_py()


def test_a_whole_file_count_is_remembered_per_filter_and_one_column_counts_come_from_value_counts(tmp_path):
    rng = np.random.default_rng(9)
    data_files, truth = _random_day_files(tmp_path, rng, files=1)
    index = data_files[0].index
    request = SearchRequest.parse({"startTime": BASE, "endTime": BASE + 1_000}, {"eventTypes": ["LogInEvent"]})
    matches = find_matches(Snapshot(1, tuple(data_files)), to_match_condition(request.with_window(BASE + 1_000), BASE + 1_000),
                           BASE, BASE + 1_000, BASE + 1_000)  # fmt: skip
    assert matches.total == sum(1 for row in truth if row[1] == "LogInEvent")
    assert list(index._counts.values()) == [matches.total]
    column = index.columns["event_type"]
    assert column.value_counts.tolist() == [sum(1 for row in truth if row[1] == value) for value in column.values.to_pylist()]


def test_rows_read_from_more_files_than_footers_kept_are_right_and_footers_stay_bounded(tmp_path):
    data_files, truth = _random_day_files(tmp_path, np.random.default_rng(11), files=3, rows=20)
    cache = RowGroupCache(0, ["event_id", "timestamp"], footers=1)
    by_id = {row[3]: row[0] for row in truth}
    for _ in range(2):
        for data_file in data_files:
            index = data_file.index
            rows = read_rows(cache, index, np.arange(index.size), ["event_id", "timestamp"])
            assert [row["timestamp"] for row in rows] == [by_id[row["event_id"]] for row in rows]
            assert sorted(row["event_id"] for row in rows) == sorted(i for i in by_id if i.startswith(Path(index.path).stem.replace("part-", "f") + "-"))
            assert cache.footers == 1
