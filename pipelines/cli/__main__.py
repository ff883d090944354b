"""`python -m pipelines.cli`: the same as the `lakehouse` command."""

from pipelines.cli.app import main

main()
