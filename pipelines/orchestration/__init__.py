"""Orchestration: a run (land -> refine -> publish -> deliver) and the watcher that runs it in micro-batches."""
