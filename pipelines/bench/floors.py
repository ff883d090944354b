"""`lakehouse bench silver --floors`: the least work each step of land + refine can do, timed alone.

Each floor is one engine job that does only what any design of that step must do, on the bench's own
input and tables, for the LAST batch of the run (all of it when the run has one batch): read and parse
the input records; write the batch's bronze rows to a Delta table; sort the batch by key and order;
check that every aspect value is JSON (as the landing does); parse every aspect's JSON once (written
out, and only aggregated); compute the event ids and write the batch's events to a Delta table. One
more prices a design rather than a step: the bronze write with every aspect also stored parsed into
typed columns (what parsing once at landing would cost there). With more than one batch, also read the
rows of the last batch's keys out of the state left by all of them (the predecessors a later batch must
read; the key columns alone, and with the aspect JSON). Writes go to a scratch folder that is removed
afterwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.aspects import ASPECT_SCHEMAS, FIELD_ARRAYS, JSON_OPTIONS
from bronze.records import SNAPSHOT_ENVELOPE
from conf.settings import Settings
from conf.tables import ASPECT_SNAPSHOTS, ASPECT_STATE, ENTITY_CHANGE_EVENTS
from pipelines.runtime.state_store import STATE_KEYS
from pipelines.bench.harness import Measurement, measure
from pipelines.runtime.io import read_table
from silver.aspects import parse_aspect, parse_schema_fields
from silver.events import event_id


def measure_floors(
    spark: SparkSession, settings: Settings, input_files: list[Path], scratch: Path
) -> dict[str, Measurement]:
    """Time each floor once; return its measurement (wall and CPU seconds) by name (`<what>_s`).

    Args:
        spark: the session the run used (tables registered).
        settings: the run's settings.
        input_files: the input files of the last batch.
        scratch: an empty folder for the floors' writes (removed afterwards).
    """
    bronze_df = read_table(spark, settings, ASPECT_SNAPSHOTS)
    batch_ids = sorted(r.batch_id for r in bronze_df.select("batch_id").distinct().collect())
    batch_df = bronze_df.filter(F.col("batch_id") == batch_ids[-1])
    events_df = read_table(spark, settings, ENTITY_CHANGE_EVENTS).filter(F.col("batch_id") == batch_ids[-1])
    parsed_envelope = F.from_json(F.col("value"), SNAPSHOT_ENVELOPE, JSON_OPTIONS).alias("r")
    parsed = {
        f"parsed_{name}": F.when(F.col("aspect_name") == name, parse_aspect("aspect_json", name))
        for name in sorted(ASPECT_SCHEMAS)
    }
    parsed["parsed_fields"] = F.when(F.col("aspect_name").isin(list(FIELD_ARRAYS)), parse_schema_fields("aspect_json"))
    parsed_aspects = [column.alias(name) for name, column in parsed.items()]
    # Aggregates over the parsed values keep the engine from skipping the parse.
    floors: dict[str, Callable[[], object]] = {
        "read_parse_input_s": lambda: spark.read.text([str(p) for p in input_files])
        .select(parsed_envelope)
        .agg(F.count("r.entityUrn"), F.sum(F.length("r.aspect.value")))
        .collect(),
        "scan_bronze_s": lambda: batch_df.agg(F.count("entity_urn"), F.sum(F.length("aspect_json"))).collect(),
        "write_bronze_s": lambda: batch_df.write.format("delta").save(str(scratch / "bronze")),
        "sort_batch_s": lambda: batch_df.select(*STATE_KEYS, "created_time", "version", "line_number", "aspect_json")
        .repartition("entity_urn")
        .sortWithinPartitions(*STATE_KEYS, "version", "created_time", "line_number")
        .write.parquet(str(scratch / "sorted")),
        "parse_aspects_once_s": lambda: batch_df.select(*STATE_KEYS, *parsed_aspects).write.parquet(str(scratch / "parsed")),
        # What the landing's JSON check of every aspect value costs alone (a malformed value is quarantined).
        "validate_aspects_s": lambda: batch_df.agg(F.count(F.get_json_object("aspect_json", "$"))).collect(),
        "parse_aspects_only_s": lambda: batch_df.select(*parsed_aspects)
        .agg(*[F.count(name) for name in parsed])
        .collect(),
        "write_bronze_parsed_s": lambda: batch_df.select("*", *parsed_aspects)
        .write.format("delta")
        .save(str(scratch / "bronze_parsed")),
        "event_ids_s": lambda: events_df.agg(F.count(event_id())).collect(),
        "write_events_s": lambda: events_df.write.format("delta").save(str(scratch / "events")),
    }
    if len(batch_ids) > 1:
        state_df = read_table(spark, settings, ASPECT_STATE)
        batch_keys_df = batch_df.select(*STATE_KEYS).distinct()

        def read_state(*columns: str) -> None:
            state_df.select(*STATE_KEYS, *columns).join(batch_keys_df, STATE_KEYS, "left_semi").write.mode("overwrite").parquet(
                str(scratch / "state")
            )

        floors["read_batch_state_keys_s"] = lambda: read_state("order_key")
        floors["read_batch_state_with_json_s"] = lambda: read_state("order_key", "aspect_json")
    shutil.rmtree(scratch, ignore_errors=True)
    figures = {}
    try:
        for name, run in floors.items():
            with measure() as taken:
                run()
            figures[name] = taken
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return figures
