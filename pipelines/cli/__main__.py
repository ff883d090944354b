"""`python -m pipelines.cli.app`: the same as the `lakehouse` command."""

from pipelines.cli.app.app import main

main()
