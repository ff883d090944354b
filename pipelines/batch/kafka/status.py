"""Per-partition Kafka status of a home (`lakehouse status`): the offset bronze committed, the end, the lag."""

from __future__ import annotations

from typing import Any

from conf.errors import InputError
from conf.settings import Settings
from conf.tables import table_location
from pipelines.runtime.storage import delta_storage_options, table_exists
from pipelines.batch.kafka.client import TopicPartition, end_offsets, open_consumer, topic_partitions
from pipelines.batch.kafka.offsets import next_offsets, start_offsets
from pipelines.batch.landing.model import KAFKA_OFFSETS_TABLE, LEDGER_TABLE


def kafka_status(settings: Settings) -> dict[str, Any]:
    """The consumed partitions with their committed offset (from bronze), end offset and lag.

    Reads the bronze tables with delta-rs (no engine session) and asks the broker for the ends.

    Returns:
        `partitions`: one dict per partition (source, topic, partition, committed, end, lag); `committed` of a
        partition bronze holds nothing of is where it starts (`ingest.kafka.start_at`);
        `missing_topics`: configured topics the broker lacks; `error`: why the broker could not be asked.
    """
    kafka = settings.ingest.kafka
    committed = bronze_offsets(settings)
    consumer = None
    try:
        # It reads one fetch per partition to learn the end offsets: keep what the client prefetches small.
        consumer = open_consumer(kafka, {"queued.max.messages.kbytes": 1024, "fetch.max.bytes": 1048576})
        partitions, missing = topic_partitions(consumer, kafka)
        committed = start_offsets(consumer, kafka, partitions, committed)
        ends = end_offsets(consumer, kafka, committed)
    except InputError as exc:
        known = sorted(committed)
        rows = [_row(tp, committed[tp], None) for tp in known]
        return {"partitions": rows, "missing_topics": [], "error": str(exc)}
    finally:
        if consumer is not None:
            consumer.close()
    return {
        "partitions": [_row(tp, committed.get(tp, 0), ends[tp]) for tp in partitions],
        "missing_topics": missing,
        "error": None,
    }


def bronze_offsets(settings: Settings) -> dict[TopicPartition, int]:
    """`next_offsets` of the home's bronze tables, read with delta-rs (empty for a home without them)."""
    import pyarrow
    from deltalake import DeltaTable, QueryBuilder

    offsets_path = str(table_location(settings, KAFKA_OFFSETS_TABLE))
    ledger_path = str(table_location(settings, LEDGER_TABLE))
    options = delta_storage_options(offsets_path)
    if not (table_exists(offsets_path) and table_exists(ledger_path)):
        return {}
    # The query engine honours deletion vectors (rows of discarded batches), the plain Arrow reader refuses.
    query = (
        QueryBuilder()
        .register("offsets", DeltaTable(offsets_path, storage_options=options))
        .register("ledger", DeltaTable(ledger_path, storage_options=options))
    )
    rows = pyarrow.table(
        query.execute(
            "select batch_id, topic, kafka_partition, max(last_offset) as last_offset from offsets "
            "group by batch_id, topic, kafka_partition"
        ).read_all()
    ).to_pylist()
    batches = pyarrow.table(query.execute("select distinct batch_id from ledger").read_all()).column("batch_id").to_pylist()
    return next_offsets(((r["batch_id"], r["topic"], r["kafka_partition"], r["last_offset"]) for r in rows), batches)


def _row(tp: TopicPartition, committed: int, end: int | None) -> dict[str, Any]:
    return {
        "source": tp.source,
        "topic": tp.topic,
        "partition": tp.partition,
        "committed": committed,
        "end": end,
        "lag": None if end is None else max(end - committed, 0),
    }
