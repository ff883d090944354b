"""Shared runtime: Spark sessions, table I/O, the run lock, tracking, maintenance and stage progress."""
