"""Bronze: land raw DataHub aspect snapshots, usage events and action requests, with quarantine."""
