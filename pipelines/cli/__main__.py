"""`python -m pipelines.cli`: the same as the `lakehouse` command."""

from pipelines.cli.app import main

# Guarded: a process spawned by `lakehouse serve` (multiprocessing's spawn) imports this module again.
if __name__ == "__main__":
    main()
