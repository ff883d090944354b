"""Benchmarks: the harness and one module per `lakehouse bench` command."""
