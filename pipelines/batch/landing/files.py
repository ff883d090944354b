"""Reading input files in Python, beside the engine: hashes and line counts, the CRC of a line, numbered
copies of files the engine cannot number, and file-sink arrays streamed into lines.

Every reader here takes a `.gz` file as its decompressed text, and a damaged gzip as the text before the
damage (with the reason it stopped).
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import gzip
import hashlib
import io
import zlib
from collections.abc import Iterator
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


@dataclass(frozen=True)
class FileDigest:
    """What one read of a file's bytes gives: its SHA-256 and where its lines are.

    Attributes:
        sha256: hex SHA-256 of the bytes.
        block_size: the size of the blocks `newlines` counts in.
        newlines: line breaks in each block of `block_size` bytes (empty for gzip: its blocks are compressed).
        lines: the file's lines as `count_lines` counts them (None for gzip: see `count_lines`).
    """

    sha256: str
    block_size: int
    newlines: tuple[int, ...]
    lines: int | None = None


def file_digest(path: Location, block_size: int = 16 << 20) -> FileDigest:
    """Hash a file's bytes and count its line breaks per block, in one read.

    Args:
        path: the file.
        block_size: bytes per block (the unit `LineScanner` seeks by).
    """
    digest = hashlib.sha256()
    counts = []
    plain = not is_gzip(path)
    last = b""
    with open_raw(path) as handle:
        while chunk := handle.read(block_size):
            digest.update(chunk)
            if plain:
                counts.append(chunk.count(b"\n"))
                last = chunk[-1:]
    if not plain:
        return FileDigest(digest.hexdigest(), block_size, ())
    return FileDigest(digest.hexdigest(), block_size, tuple(counts), sum(counts) + (last not in (b"", b"\n")))


def count_lines(path: Location) -> int | None:
    """Count a file's lines (decompressed): its line breaks, plus a last line without one.

    Returns:
        The count, or None when the file cannot be read to its end (a truncated or corrupt gzip).
    """
    breaks = 0
    last = b""
    try:
        with open_binary(path) as handle:
            while block := handle.read1(4 * READ_CHUNK):
                breaks += block.count(b"\n")
                last = block[-1:]
    except READ_ERRORS:
        return None
    return breaks + (last not in (b"", b"\n"))


class LineScanner:
    """Reads a file forward and gives the CRC-32 of the lines asked for, as the engine splits lines.

    With a FileDigest of a plain file it seeks to the block holding a far line instead of reading up to it.
    """

    def __init__(self, path: Location, digest: FileDigest | None = None):
        self._handle = open_binary(path)
        self._buf = b""
        self._line = 1  # the line number of self._buf[0]
        self._eof = False
        self._block_size = digest.block_size if digest else 0
        # Lines that start before each block: a line break at the end of block b-1 starts a line in b.
        self._breaks_before = []
        seen = 0
        for count in digest.newlines if digest else ():
            self._breaks_before.append(seen)
            seen += count

    def __enter__(self) -> LineScanner:
        return self

    def __exit__(self, *exc_info) -> None:
        self._handle.close()

    def crc_at(self, number: int) -> int | None:
        """The CRC-32 of line `number` (without its line break), None past the end; never go back."""
        if number < self._line:
            raise InputError(f"number: line {number} is behind the scanner (at line {self._line})")
        self._seek_towards(number)
        self._skip(number - self._line)
        end = self._buf.find(b"\n")
        while end == -1 and not self._eof:
            self._read_more()
            end = self._buf.find(b"\n")
        if end == -1 and not self._buf:
            return None
        line = self._buf if end == -1 else self._buf[:end]
        return zlib.crc32(line[:-1] if line.endswith(b"\r") else line)

    def _seek_towards(self, number: int) -> None:
        """Jump ahead to the last block where a line at most `number` starts, when that is ahead."""
        # Block b starts inside line breaks_before[b] + 1; the next line starts in it (or b starts it).
        block = bisect.bisect_right(self._breaks_before, number - 2) - 1
        if block <= 0 or self._breaks_before[block] + 1 <= self._line:
            return
        self._handle.seek(block * self._block_size - 1)
        starts_a_line = self._handle.read(1) == b"\n"
        self._buf = b""
        self._eof = False
        self._line = self._breaks_before[block] + 1
        if not starts_a_line:
            self._skip(1)  # the rest of the line the block starts inside

    def _skip(self, count: int) -> None:
        while count > 0:
            newlines = self._buf.count(b"\n")
            if newlines >= count:
                position = -1
                for _ in range(count):
                    position = self._buf.find(b"\n", position + 1)
                self._buf = self._buf[position + 1 :]
                self._line += count
                return
            if newlines:
                self._buf = self._buf[self._buf.rfind(b"\n") + 1 :]
                self._line += newlines
                count -= newlines
            if self._eof:
                if self._buf:  # a last line without a line break
                    self._buf = b""
                    self._line += 1
                    count -= 1
                if count > 0:
                    return
            else:
                self._read_more()

    def _read_more(self) -> None:
        chunk = self._handle.read(4 * READ_CHUNK)
        if chunk:
            self._buf += chunk
        else:
            self._eof = True


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


def write_numbered_lines(path: Location, target: TextIO, prefix: str = "") -> NumberedCopy:
    """Write a JSON-lines file's lines to `target` as `<prefix><line>\\t<line text>` lines.

    Args:
        path: the input file (plain or gzip).
        target: the numbered copy, open for writing text.
        prefix: written before each line number (several files in one copy: `<file index>\\t`).

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
                "".join(f"{prefix}{number + i}\t{line.removesuffix(chr(13))}\n" for i, line in enumerate(lines, 1))
            )
            number += len(lines)
        tail = b"".join(pending).decode("utf-8", "replace")
        if error is not None:
            return NumberedCopy(lines=number, lines_read=number, error=error, cut_text=tail)
        if tail:
            target.write(f"{prefix}{number + 1}\t{tail.removesuffix(chr(13))}\n")
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
