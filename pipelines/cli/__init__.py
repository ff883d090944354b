"""The `lakehouse` command line: the app, shared argument parsing, console output and command groups."""
