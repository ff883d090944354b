"""Sessions, table I/O, jobs and the `lakehouse` command line."""
