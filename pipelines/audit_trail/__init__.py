"""The audit trail every process shares: the chain's keys, lock and checkpoint, links written without a session,
and the regulator report's request and formats (the Spark side of the chain is pipelines.batch.audit_chain)."""
