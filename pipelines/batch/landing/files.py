"""Reading input files in Python, beside the engine: the bytes at the bounds of the engine's read partitions,
hashes of files the engine cannot hash, numbered copies of files the engine cannot number, and file-sink
arrays streamed into lines.

Every reader here takes a `.gz` file as its decompressed text, and a damaged gzip as the text before the
damage (with the reason it stopped).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import hashlib
import io
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from bronze.formats import iter_json_array
from conf.errors import InputError
from conf.locations import Location
from pipelines.runtime.storage import storage_for

READ_CHUNK = 1 << 20
# What reading a damaged file raises: truncated gzip (EOFError), bad header or CRC (OSError), bad deflate data.
READ_ERRORS = (OSError, EOFError, zlib.error)


def is_gzip(path: Location) -> bool:
    """Whether the file is read as gzip (by its name, as the engine decides)."""
    return path.name.endswith(".gz")


def open_raw(path: Location) -> BinaryIO:
    """Open a file's stored bytes: a local file, or an object read in ranges as they are asked for."""
    return open(path, "rb") if isinstance(path, Path) else storage_for(path).open_read(path)


def open_binary(path: Location) -> BinaryIO:
    """Open a file's bytes, decompressed when it is gzip."""
    if not is_gzip(path):
        return open_raw(path)
    return gzip.open(path, "rb") if isinstance(path, Path) else gzip.GzipFile(fileobj=open_raw(path), mode="rb")


def open_text(path: Location) -> TextIO:
    """Open a file's text (decompressed when gzip), bytes that are not UTF-8 read as U+FFFD."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace")


@contextlib.contextmanager
def open_output_text(out: Location) -> Iterator[TextIO]:
    """Write a text file (UTF-8) at `out`, a local path (its folder created) or an object."""
    with storage_for(out).open_write(out) as raw, io.TextIOWrapper(raw, encoding="utf-8") as target:
        yield target


def error_text(exc: BaseException) -> str:
    """The message of a read error, or its type when it has none."""
    return str(exc) or type(exc).__name__


def sha256_of(path: Location, block_size: int = 16 << 20) -> str:
    """The hex SHA-256 of a file's stored bytes (of a file the engine does not hash), read block by block."""
    digest = hashlib.sha256()
    with open_raw(path) as handle:
        while chunk := handle.read(block_size):
            digest.update(chunk)
    return digest.hexdigest()


def read_at(path: Location, size: int) -> Callable[[int, int], bytes]:
    """Return `read(offset, length)`, which reads only the bytes asked for of a file of `size` bytes.

    `read` gives up to `length` bytes from `offset`, fewer at the end of the file: one ranged request on
    object storage, whatever the file's size.
    """
    storage = storage_for(path)

    def read(offset: int, length: int) -> bytes:
        length = min(length, size - offset)
        return storage.read_range(path, offset, length) if length > 0 else b""

    return read


def prefetched(read: Callable[[int, int], bytes], ranges: Sequence[tuple[int, int]], threads: int) -> Callable[[int, int], bytes]:
    """Make the reads `ranges` of `read` now, `threads` at a time; return a `read` that answers from them.

    A request at the offset of a range read ahead, no longer than it, is a slice of it; any other is passed
    to `read`. On object storage each read is a request whose latency, made one after another, adds up.
    """
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        fetched = list(zip(ranges, pool.map(lambda r: read(*r), ranges), strict=True))
    by_offset: dict[int, tuple[int, bytes]] = {}
    for (offset, length), data in fetched:
        if length > by_offset.get(offset, (-1, b""))[0]:
            by_offset[offset] = (length, data)

    def read_ahead(offset: int, length: int) -> bytes:
        size, data = by_offset.get(offset, (-1, b""))
        return data[:length] if length <= size else read(offset, length)

    return read_ahead


@dataclass(frozen=True)
class NumberedCopy:
    """A numbered copy of an input file (`<line>\t<record>` lines) and how reading the input ended.

    Attributes:
        lines: lines written to the copy.
        lines_read: input lines read to their end (file-sink: the input's lines, not its elements).
        error: why the input could not be read to its end (a truncated or corrupt gzip); None when it was.
        cut_text: with an error, the text read of the record reading stopped in.
        cut_line: the line that record starts on, when not the line after `lines_read` (a file-sink element).
    """

    lines: int
    lines_read: int
    error: str | None = None
    cut_text: str = ""
    cut_line: int | None = None


def number_lines(path: Location, out: Location) -> NumberedCopy:
    """Write a JSON-lines file as `<line>\t<line text>` lines (the engine-independent way to number lines).

    A file that cannot be read to its end (a truncated or corrupt gzip) gives the lines before the damage.
    """
    with open_output_text(out) as target:
        return write_numbered_lines(path, target)


def write_numbered_lines(path: Location, target: TextIO) -> NumberedCopy:
    """Write a JSON-lines file's lines to `target` as `<line>\\t<line text>` lines.

    Args:
        path: the input file (plain or gzip).
        target: the numbered copy, open for writing text.

    Returns:
        How many lines were written and, for a file that could not be read to its end, why.
    """
    number = 0
    pending: list[bytes] = []  # the start of a line no block has ended yet
    error = None
    with open_binary(path) as source:
        while True:
            try:
                # One read of the source at a time: when one fails, the text of those before is kept.
                block = source.read1(4 * READ_CHUNK)
            except READ_ERRORS as exc:
                error = error_text(exc)
                break
            if not block:
                break
            cut = block.rfind(b"\n")
            if cut == -1:
                pending.append(block)
                continue
            text = b"".join([*pending, block[:cut]])
            pending = [block[cut + 1 :]]
            # Blocks end at a line break, so no UTF-8 sequence is cut in two.
            lines = text.decode("utf-8", "replace").split("\n")
            target.write(
                "".join(f"{number + i}\t{line.removesuffix(chr(13))}\n" for i, line in enumerate(lines, 1))
            )
            number += len(lines)
        tail = b"".join(pending).decode("utf-8", "replace")
        if error is not None:
            return NumberedCopy(lines=number, lines_read=number, error=error, cut_text=tail)
        if tail:
            target.write(f"{number + 1}\t{tail.removesuffix(chr(13))}\n")
            number += 1
    return NumberedCopy(lines=number, lines_read=number)


def convert_file_sink(path: Location, out: Location, max_record_bytes: int) -> tuple[NumberedCopy, list[tuple[int, str, str]]]:
    """Stream a file-sink JSON array into `<line>\\t<record>` lines.

    Returns:
        The copy written (a file that cannot be read to its end gives the elements before the damage),
        and the elements that failed as (line, raw text, reason).

    Raises:
        InputError: naming the file, when its text is not a JSON array.
    """
    rejected = []
    written = 0
    chunks = _CountedChunks(path)
    last_rejected = False
    try:
        with open_output_text(out) as target:
            for item in iter_json_array(chunks, max_element_chars=max_record_bytes):
                # Only a reader's reason ("record: ...") can mean the damage cut the element.
                last_rejected = item.reason is not None and item.reason.startswith("record:")
                if item.reason is None:
                    target.write(f"{item.line}\t{item.text}\n")
                    written += 1
                else:
                    rejected.append((item.line, item.text[:max_record_bytes], item.reason))
    except InputError as exc:
        # The array reader stops where the text stops: when reading failed there, the file is damaged
        # (cut between two elements).
        if chunks.error is None:
            raise InputError(f"{path}: {exc}") from None
        last_rejected = False
    if chunks.error is not None and last_rejected:
        # Reading stopped inside the last element: it is the record the damage cut, not a malformed one.
        line, text, _ = rejected.pop()
        return NumberedCopy(written, chunks.lines, chunks.error, cut_text=text, cut_line=line), rejected
    return NumberedCopy(lines=written, lines_read=chunks.lines, error=chunks.error), rejected


class _CountedChunks:
    """A file's text (decompressed) in chunks, counting the lines they end: how far reading got when it fails.

    Iteration stops where the file cannot be read further (a truncated or corrupt gzip); `error` then says
    why, and every chunk before was given.
    """

    def __init__(self, path: Location):
        self._path = path
        self.lines = 0
        self.error: str | None = None

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            with open_binary(self._path) as handle:
                # One read of the source at a time: when one fails, the text of those before is kept.
                while block := handle.read1(READ_CHUNK):
                    chunk = decoder.decode(block)
                    self.lines += chunk.count("\n")
                    yield chunk
        except READ_ERRORS as exc:
            self.error = error_text(exc)
            return
        if rest := decoder.decode(b"", final=True):
            yield rest  # the replacement of a UTF-8 sequence the file ends inside
