"""Command groups of the `lakehouse` CLI; each module exposes `register(app)`."""
