"""The size of every request a Spark Connect session sends, by the pipeline step that sent it.

A plan that carries rows, key lists or per-file literals from the driver grows with the data, and at
production size it meets the server's message limit (4 MiB by default) in the second large batch. The
recorder is a gRPC client interceptor on the session's channel: it measures each request as serialized
(ExecutePlan, AnalyzePlan, Config, ...) and files it under the step running at the time, so a test and
`lakehouse bench plans` can tell a plan that stays flat from one that grows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from pipelines.runtime.lock import current_step

# The label of requests sent outside any step.
OUTSIDE_STEPS = "(outside steps)"

@dataclass(frozen=True)
class SentRequest:
    """One request a session sent: the step that sent it, the gRPC method and its serialized size."""

    step: str
    method: str
    size: int


class PlanSizes(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Records the serialized size of every request sent through the channel it is added to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[SentRequest] = []

    def intercept_unary_unary(self, continuation, client_call_details, request):
        self._record(client_call_details, request)
        return continuation(client_call_details, request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        self._record(client_call_details, request)
        return continuation(client_call_details, request)

    def _record(self, details: grpc.ClientCallDetails, request) -> None:
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        sent = SentRequest(current_step() or OUTSIDE_STEPS, method.rsplit("/", 1)[-1], request.ByteSize())
        with self._lock:
            self._sent.append(sent)

    def sent(self) -> list[SentRequest]:
        """Every request recorded so far, in the order sent."""
        with self._lock:
            return list(self._sent)

    def clear(self) -> None:
        """Forget the requests recorded so far."""
        with self._lock:
            self._sent.clear()

    def largest_by_step(self) -> dict[str, int]:
        """The largest request each step sent, in bytes."""
        largest: dict[str, int] = {}
        for sent in self.sent():
            largest[sent.step] = max(largest.get(sent.step, 0), sent.size)
        return largest
