"""Reads of an input file's bytes made ahead: the partition bounds of an object are fetched side by side."""

from __future__ import annotations

import random
import zlib

from bronze.lines import ReadPartition, bound_reads, order_partitions
from pipelines.batch.landing.files import prefetched, read_at


def _partitions(lines: list[bytes], sizes: list[int], numbers: list[int]) -> list[ReadPartition]:
    parts, first = [], 0
    for size, number in zip(sizes, numbers, strict=True):
        held = lines[first : first + size]
        parts.append(ReadPartition(number, size, sum(len(line) + 1 for line in held), zlib.crc32(held[0]), len(held[0]),
                                   zlib.crc32(held[-1]), len(held[-1])))  # fmt: skip
        first += size
    return parts


def test_partitions_numbered_in_file_order_are_ordered_from_the_reads_made_ahead_alone(tmp_path):
    rng = random.Random(5)
    lines = [("x" * rng.randrange(1, 60)).encode() + str(n).encode() for n in range(400)]
    path = tmp_path / "input.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    size = path.stat().st_size
    calls: list[tuple[int, int]] = []
    stored = read_at(path, size)

    def counted(offset: int, length: int) -> bytes:
        calls.append((offset, length))
        return stored(offset, length)

    in_order = _partitions(lines, [90, 110, 100, 100], [0, 1, 2, 3])
    ahead = prefetched(counted, bound_reads(in_order), threads=4)
    made_ahead = len(calls)
    assert order_partitions(in_order, ahead, size) == [0, 1, 2, 3]
    assert made_ahead == 8 and len(calls) == made_ahead  # every read answered from those made ahead

    # Numbered out of file order: the reads that were not guessed are made when asked, the order is right.
    shuffled = _partitions(lines, [90, 110, 100, 100], [3, 0, 2, 1])
    calls.clear()
    ahead = prefetched(counted, bound_reads(shuffled), threads=4)
    assert order_partitions(shuffled, ahead, size) == order_partitions(shuffled, stored, size) == [3, 0, 2, 1]
    assert len(calls) > 8
