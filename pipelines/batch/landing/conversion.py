"""Files the engine cannot read as lines, converted into numbered copies by the engine's workers, a task per file.

A file-sink file is one JSON array (DataHub's file sink writes it so) and an MCE file holds snapshots of
many aspects each: neither is a line per record, so neither is read as text by the engine. Each is
converted by Python code into a numbered copy (`<line>\\t<record>` lines, each record with the line it
starts on), which the engine then stages like any text file. The conversion runs inside the engine, as a
function over a table of the files, one partition per file: on a cluster the workers convert the files
side by side and the driver receives only per-file facts (line counts, how reading ended, the records
rejected with their reasons), never the files' bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.formats import FILE_SINK, MCE
from bronze.snapshots import expand_snapshot_line
from conf.errors import InputError
from conf.locations import Location, parse_location
from pipelines.batch.landing.files import NumberedCopy, convert_file_sink, number_lines, open_output_text, open_text
from pipelines.batch.landing.model import LANDED, FilePlan
from pipelines.runtime.storage import Storage, register_storage, storage_for

CONVERTED_KINDS = (FILE_SINK, MCE)
# The facts of one converted file, as the engine returns them.
_RESULT_TYPE = (
    "struct<lines:bigint, lines_read:bigint, error:string, cut_text:string, cut_line:bigint, input_error:string, "
    "rejected:array<struct<line:bigint, text:string, reason:string>>>"
)

Rejected = list[tuple[int, str, str]]


def convert_file(kind: str, path: Location, out: Location, max_record_bytes: int) -> tuple[NumberedCopy, Rejected]:
    """Write the numbered copy of one file-sink or MCE file at `out`.

    Returns:
        How reading ended, and the records rejected as (line, raw text, reason).

    Raises:
        InputError: naming the file, when a file-sink file's text is not a JSON array; for another kind.
    """
    if kind == FILE_SINK:
        return convert_file_sink(path, out, max_record_bytes)
    if kind == MCE:
        return _expand_snapshots(path, out, max_record_bytes)
    raise InputError(f"kind: {kind!r} is not converted (only {', '.join(CONVERTED_KINDS)})")


def _expand_snapshots(path: Location, out: Location, max_record_bytes: int) -> tuple[NumberedCopy, Rejected]:
    """Number a JSON-lines file of MCEs, each MCE written as one MCP line per aspect.

    Every aspect line keeps the line number of its MCE; an aspect that cannot land (an unknown class) is
    rejected with its reason, the snapshot's other aspects land.
    """
    lines_path = out.with_name(f"{out.name}.lines")
    copy = number_lines(path, lines_path)
    rejected: Rejected = []
    written = 0
    with open_text(lines_path) as source, open_output_text(out) as target:
        for numbered_line in source:
            number, _, text = numbered_line.rstrip("\n").partition("\t")
            for record, reason in expand_snapshot_line(text):
                if reason is None:
                    target.write(f"{number}\t{record}\n")
                    written += 1
                else:
                    rejected.append((int(number), record[:max_record_bytes], reason))
    storage_for(lines_path).delete(lines_path)
    return NumberedCopy(written, copy.lines_read, copy.error, copy.cut_text, copy.cut_line), rejected


def converted_location(plan: FilePlan, scratch: Location) -> Location:
    """Where the numbered copy of a converted plan's file is written."""
    return scratch / "input" / f"{plan.index:05d}.txt"


def convert_in_engine(spark: SparkSession, plans: Sequence[FilePlan], scratch: Location, max_record_bytes: int,
                      storage_options: Mapping[str, str]) -> None:  # fmt: skip
    """Convert the file-sink and MCE files of `plans` in one engine job; set each one's `converted` and `rejected`.

    Args:
        spark: the session (its engine runs the conversion).
        plans: the batch's plans; those of another kind or not landing are left alone.
        scratch: the batch's scratch folder, where the copies are written.
        max_record_bytes: the most of a rejected record's text kept.
        storage_options: the home's storage options, for workers that read and write object storage.

    Raises:
        InputError: naming the file, for a file-sink file whose text is not a JSON array.
    """
    chosen = [p for p in plans if p.status == LANDED and p.kind in CONVERTED_KINDS and p.numbered is None]
    if not chosen:
        return
    rows = [(p.index, p.kind, str(p.path), str(converted_location(p, scratch))) for p in chosen]
    files_df = spark.createDataFrame(rows, "file_index int, kind string, path string, out string").repartition(len(rows))
    options = dict(storage_options)
    # A lambda, not the annotated function: the client would read its hints as a pandas UDF's.
    convert = F.udf(lambda kind, path, out: _convert_in_worker(kind, path, out, max_record_bytes=max_record_bytes,
                                                               options=options), _RESULT_TYPE)  # fmt: skip
    results = {
        int(row.file_index): row.result
        for row in files_df.select("file_index", convert("kind", "path", "out").alias("result")).collect()
    }
    for plan in chosen:
        result = results[plan.index]
        if result.input_error is not None:
            raise InputError(result.input_error)
        copy = NumberedCopy(int(result.lines), int(result.lines_read), result.error, result.cut_text or "",
                            None if result.cut_line is None else int(result.cut_line))  # fmt: skip
        plan.converted = (converted_location(plan, scratch), copy)
        plan.rejected += [(int(r.line), r.text, r.reason) for r in result.rejected]


def _convert_in_worker(kind: str, path: str, out: str, *, max_record_bytes: int, options: dict[str, str]) -> dict[str, Any]:
    """(In the engine's worker) convert one file and return its facts as a row of _RESULT_TYPE."""
    source, target = parse_location(path), parse_location(out)
    register_storage(Storage(options), [source, target])
    try:
        copy, rejected = convert_file(kind, source, target, max_record_bytes)
    except InputError as exc:  # reported to the driver as it is, not as a failed task
        return {"lines": 0, "lines_read": 0, "input_error": str(exc), "rejected": []}
    return {
        "lines": copy.lines,
        "lines_read": copy.lines_read,
        "error": copy.error,
        "cut_text": copy.cut_text,
        "cut_line": copy.cut_line,
        "input_error": None,
        "rejected": [{"line": line, "text": text, "reason": reason} for line, text, reason in rejected],
    }
