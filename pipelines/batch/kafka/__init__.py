"""DataHub's Kafka topics as a landing source, exactly once into bronze.

Each landing batch takes messages from the topic partitions, writes each partition's messages as a
numbered copy (`<offset>\\t<record>` lines, records decoded from JSON or Avro by `bronze.wire`) and lands
them like files: provenance `source_file` kafka://<topic>/<partition>, `line_number` the offset. The batch
also writes its offset ranges to bronze.kafka_offsets before its ledger rows, so the offsets to resume from
are what committed batches hold; the consumer group's offsets are committed afterwards, as a hint for
monitoring tools (read back only with `start_at: group_offsets`, for partitions bronze holds nothing of).

Modules: `client` (the consumer and its security settings, topic partitions, end offsets, offsets at a
time, errors), `registry` (Avro decoding through confluent-kafka's Schema Registry client), `segments`
(messages -> landing plans), `offsets` (committed offsets, where a partition starts, the offsets table),
`source` (landing what is available now, or given messages; the watch feed; status).
"""
