"""Row-group time ranges from Parquet footers: spans, the page's lower bound, counts of the rows of a range."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.serving.timespans import RowGroupRange, TimeSpan, TimeSpans, count_rows_between, read_row_group_ranges


def _spans(*ranges: tuple[int, int, int]) -> TimeSpans:
    spans = TimeSpans.from_row_groups(RowGroupRange(rows, low, high) for rows, low, high in ranges)
    assert spans is not None
    return spans


def test_overlapping_row_groups_merge_into_one_span_and_empty_ones_are_left_out():
    spans = _spans((10, 100, 199), (5, 150, 250), (7, 300, 399), (0, 0, 0), (3, 400, 400))
    assert spans.spans == (TimeSpan(100, 251, 15), TimeSpan(300, 400, 7), TimeSpan(400, 401, 3))


def test_a_row_group_that_cannot_be_placed_in_time_leaves_no_spans():
    assert TimeSpans.from_row_groups([RowGroupRange(10, 100, 199), RowGroupRange(4, None, None)]) is None


def test_page_since_is_the_start_of_the_newest_whole_spans_that_hold_a_page():
    spans = _spans((10, 0, 99), (20, 100, 199), (5, 200, 299), (4, 300, 399))
    assert spans.page_since(0, 400, 4) == 300
    assert spans.page_since(0, 400, 9) == 200  # 4 + 5
    assert spans.page_since(0, 400, 10) == 100  # 4 + 5 + 20
    assert spans.page_since(0, 350, 10) == 100  # the span holding the upper bound counts for nothing
    assert spans.page_since(0, 400, 40) is None  # not enough rows: the whole window
    assert spans.page_since(150, 400, 10) is None  # the span reaching before the window is not whole
    assert spans.page_since(0, 400, 39) is None  # the page needs the first span: since == start


def test_footers_give_each_row_group_its_rows_and_time_range(tmp_path):
    path = tmp_path / "part.parquet"
    table = pa.table({"event_id": ["a", "b", "c", "d", "e"], "timestamp": pa.array([5, 1, 9, 20, 30], pa.int64())})
    pq.write_table(table, path, row_group_size=3)
    assert read_row_group_ranges(str(path)) == (RowGroupRange(3, 1, 9), RowGroupRange(2, 20, 30))
    with_null = tmp_path / "null.parquet"
    pq.write_table(pa.table({"timestamp": pa.array([1, None], pa.int64())}), with_null)
    assert read_row_group_ranges(str(with_null)) == (RowGroupRange(2, None, None),)


def test_count_rows_between_reads_the_time_column_of_the_given_row_groups(tmp_path):
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"timestamp": pa.array([1, 2, 3, 4, None, 6], pa.int64())}), path, row_group_size=3)
    assert count_rows_between(str(path), [0, 1], 2, 6) == 3  # 2, 3, 4: start inclusive, end exclusive, no null
    assert count_rows_between(str(path), [1], 0, 100) == 2
