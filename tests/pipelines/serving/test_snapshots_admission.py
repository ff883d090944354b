"""File pruning by time range, and the admission bounds, on their own."""

from __future__ import annotations

import asyncio

import pytest

from conf.errors import ConfigError
from pipelines.serving.admission import Admission, OverloadedError
from pipelines.serving.snapshots import DataFile, Snapshot


@pytest.mark.parametrize(
    ("low", "high", "start", "end", "overlaps"),
    [
        (100, 200, 200, 300, True),  # the window starts at the file's last event
        (100, 200, 201, 300, False),  # ... or just after it
        (100, 200, 0, 100, False),  # the window ends (exclusive) at the file's first event
        (100, 200, 0, 101, True),
        (None, 200, 0, 50, True),  # no statistics: the file may hold anything
        (100, None, 500, 600, True),
    ],
)
def test_a_file_is_read_only_when_its_time_range_meets_the_window(low, high, start, end, overlaps):
    assert DataFile("/t/f.parquet", low, high).overlaps(start, end) is overlaps


def test_a_snapshot_lists_the_files_of_a_window(tmp_path):
    files = (DataFile(str(tmp_path / "a"), 0, 99), DataFile(str(tmp_path / "b"), 100, 199), DataFile(str(tmp_path / "c"), 200, 299))
    snapshot = Snapshot(version=3, files=files)
    assert [f.path for f in snapshot.files_between(150, 250)] == [str(tmp_path / "b"), str(tmp_path / "c")]
    assert snapshot.files_between(300, 400) == []
    assert not snapshot.files_exist()
    for f in files:
        (tmp_path / f.path).touch()
    assert snapshot.files_exist()


def test_admission_turns_away_what_is_beyond_slots_and_queue():
    admission = Admission(slots=1, queue_depth=1, wait_timeout_s=0.2)
    with admission.admit(), admission.admit():
        assert admission.admitted == 2
        with pytest.raises(OverloadedError, match="1 queries running and 1 waiting") as raised:
            with admission.admit():
                pass
        assert raised.value.retry_after_s == 1
    assert admission.admitted == 0
    with admission.admit():  # room again once the others left
        assert admission.admitted == 1


def test_a_request_waiting_longer_than_the_timeout_for_a_slot_gets_overloaded():
    admission = Admission(slots=1, queue_depth=5, wait_timeout_s=0.1)

    async def scenario() -> None:
        async with admission.slot():
            with pytest.raises(OverloadedError, match="no query slot freed up within 0.1 s"):
                async with admission.slot():
                    pass
        async with admission.slot():  # the slot is free again
            pass

    asyncio.run(scenario())


def test_a_request_waiting_for_a_slot_gets_it_when_one_frees_up():
    admission = Admission(slots=1, queue_depth=5, wait_timeout_s=2.0)
    order = []

    async def query(name: str, seconds: float) -> None:
        async with admission.slot():
            order.append(f"{name} start")
            await asyncio.sleep(seconds)
            order.append(f"{name} end")

    async def scenario() -> None:
        await asyncio.gather(query("first", 0.1), query("second", 0))

    asyncio.run(scenario())
    assert order == ["first start", "first end", "second start", "second end"]


@pytest.mark.parametrize(("slots", "queue", "timeout", "named"), [(0, 1, 1.0, "slots"), (1, -1, 1.0, "queue_depth"), (1, 1, 0, "wait_timeout_s")])
def test_admission_bounds_are_checked(slots, queue, timeout, named):
    with pytest.raises(ConfigError, match=named):
        Admission(slots, queue, timeout)
