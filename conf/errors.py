"""The project's exceptions: one base class and a few meaningful subclasses."""

from __future__ import annotations


class LakehouseError(Exception):
    """Base class of every error the lakehouse raises on purpose."""


class ConfigError(LakehouseError):
    """Settings or command-line arguments that cannot be used.

    Args:
        problems: every problem found, each naming the key and the bad value.
    """

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:  # one line, e.g. a busy port: nothing to list
            super().__init__(f"invalid configuration: {self.problems[0]}")
        else:
            super().__init__("invalid configuration:\n  - " + "\n  - ".join(self.problems))


class InputError(LakehouseError):
    """An input file, record or argument that cannot be processed; the message names the field and value."""


class RequestError(LakehouseError):
    """A search or export request that breaks the API contract (served as HTTP 400)."""


class AuthError(LakehouseError):
    """A caller that is not authenticated (401) or not allowed (403).

    Args:
        message: what was wrong, safe to show to the caller.
        status: 401 for a missing or unknown token, 403 for a token without the needed role.
    """

    def __init__(self, message: str, status: int = 401):
        self.status = status
        super().__init__(message)


class SourceUnavailable(LakehouseError):
    """A source that does not answer in time (a Kafka broker, a Schema Registry): nothing was lost, try again."""


class StageError(LakehouseError):
    """A pipeline stage that failed on an engine or system error; its `__cause__` is that error.

    The message names the stage, the batches it was working on, what the run had committed before the
    failure and what the next run does (every stage resumes where it stopped).

    Args:
        stage: land, refine or publish.
        batch_ids: the batches the stage was working on (empty: land, before a batch existed).
        committed: the tables the run had committed to before the failure, in order.
        cause: the error, as `error_text` gives it.
    """

    def __init__(self, stage: str, batch_ids: list[str], committed: list[str], cause: str):
        self.stage, self.batch_ids, self.committed = stage, list(batch_ids), list(committed)
        batches = f"batch {', '.join(batch_ids)}" if batch_ids else "new input (no batch landed yet)"
        done = f"this run committed to {', '.join(committed)}" if committed else "this run committed nothing"
        super().__init__(
            f"stage {stage} failed on {batches}; {done}. The next run resumes at {stage}, nothing is lost. "
            f"Cause: {cause}"
        )


class ConcurrencyError(LakehouseError):
    """Another run holds the lock, or a table commit kept losing races after bounded retries."""


def error_text(exc: BaseException) -> str:
    """The exception's type and message on one log field, cut to 500 characters (engine errors run long)."""
    return f"{type(exc).__name__}: {str(exc)[:500]}"
