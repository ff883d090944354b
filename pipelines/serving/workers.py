"""Worker processes behind one port: a parent that starts, watches, replaces and stops the server's workers.

One Python process answers as fast as one core lets it (the request path holds the interpreter lock), so
`lakehouse serve` runs `serve.workers` processes. The parent binds the listening socket and forks the
workers; each accepts connections on that one socket (the kernel hands each new connection to one
waiting worker), opens its own serving engine (its own index of the pinned Delta versions) and answers
requests start to end. What must hold for the whole server lives outside any one worker:

- admission: the query slots and the wait queue are counted on a `WorkerBoard` in shared memory,
  created by the parent before the first fork (`pipelines.serving.admission`);
- scroll ids: they carry the table version and the sort key, nothing of the worker, so any worker
  answers the next page (it opens the pinned version when it has not yet);
- metrics: `PROMETHEUS_MULTIPROC_DIR` is set by the parent to a fresh folder of the server's run directory
  before the first fork, so metrics written by the workers with prometheus-client aggregate there.

The parent replaces a worker that dies (a crash, or kill -9) and stops them all on SIGTERM or SIGINT:
each finishes its requests in flight, and one still running after STOP_TIMEOUT_S is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import uvicorn

from conf.errors import ConfigError
from pipelines.serving.admission import Admission, WorkerBoard
from pipelines.serving.rate_limit import SharedTokenBuckets, TokenBuckets

# The response header naming the worker that answered (its number, 0..workers-1).
WORKER_HEADER = "x-lakehouse-worker"
# The environment variable prometheus-client reads for its multi-process mode.
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Seconds a worker has to finish its requests in flight on shutdown; the parent kills what is left after
# STOP_TIMEOUT_S (so SIGTERM stops the server within 30 s).
GRACEFUL_S = 20
STOP_TIMEOUT_S = 25.0
# A worker that exits within QUICK_EXIT_S of its start QUICK_EXITS times in a row is not started again:
# it cannot serve (e.g. a broken table), and restarting it forever would hide that.
QUICK_EXIT_S = 5.0
QUICK_EXITS = 5
# Connections the listening socket queues before the workers accept them.
BACKLOG = 2048
log = logging.getLogger("lakehouse.serve")

# Builds a worker's application around the server-wide admission and rate buckets (called in the worker,
# after the fork).
AppFactory = Callable[[Admission, TokenBuckets], Any]


def default_workers() -> int:
    """The number of cores this process may run on."""
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class StoppableServer(uvicorn.Server):
    """A uvicorn server for which SIGTERM and SIGINT are the normal way to stop: it shuts down and exits 0.

    uvicorn re-raises the signal after its graceful shutdown, so the process would end "killed by SIGTERM"
    and a supervisor would see a failure.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class WorkerHeader:
    """ASGI middleware adding the header that names the worker to every HTTP response.

    Args:
        app: the application.
        worker: the worker's number.
    """

    def __init__(self, app: Any, worker: int):
        self.app = app
        self._header = (WORKER_HEADER.encode(), str(worker).encode())

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._header]}
            await send(message)

        await self.app(scope, receive, send_named)


def listening_socket(host: str, port: int) -> socket.socket:
    """Bind a TCP socket to host:port and listen on it (port 0: a free port).

    One socket shared by the workers was measured against one per worker (SO_REUSEPORT) and kept: no
    difference in throughput, and the connections queued on it outlive any one worker.

    Raises:
        ConfigError: when the address cannot be bound.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--port: cannot listen on {host}:{port} ({exc.strerror}); choose another port (--port, api.port)") from None
    sock.listen(BACKLOG)
    return sock


class WorkerPool:
    """The parent of the server's workers: forks them, replaces the dead, stops them all on a signal.

    Args:
        sock: the listening socket every worker accepts on.
        workers: the number of worker processes.
        make_app: builds a worker's application around the server-wide admission and rate buckets.
        admission: the bounds (slots, queue depth, wait timeout) the workers share.
        run_dir: the server's folder for its lock file and metrics (removed when the server stops).
    """

    def __init__(self, sock: socket.socket, workers: int, make_app: AppFactory, admission: tuple[int, int, float],
                 run_dir: Path, server_options: dict[str, Any] | None = None,
                 on_ready: Callable[[], None] | None = None):  # fmt: skip
        if workers < 1:
            raise ConfigError(f"serve.workers: {workers!r} must be at least 1")
        self.sock = sock
        self.server_options = dict(server_options or {})
        self.workers = workers
        self.board = WorkerBoard(workers, run_dir / "admission.lock")
        # Callers' request rates, counted for the whole server under the board's lock.
        self.rate_buckets = SharedTokenBuckets(self.board.locked)
        self._make_app = make_app
        self._admission = admission
        self._run_dir = run_dir
        self._context = multiprocessing.get_context("fork")
        # Each worker sends one message once its application is built: the server then answers requests.
        self._ready_reader, self._ready_writer = self._context.Pipe(duplex=False)
        self._on_ready = on_ready
        self._processes: list[Any] = [None] * workers
        self._started: list[float] = [0.0] * workers
        self._quick_exits = [0] * workers
        self._stopping = False

    def _announce_ready(self) -> None:
        """Call on_ready once, when the first worker has its application (engine open) and accepts."""
        with contextlib.suppress(EOFError, OSError):
            self._ready_reader.recv_bytes()
        if self._on_ready is not None:
            on_ready, self._on_ready = self._on_ready, None
            on_ready()

    def run(self) -> None:
        """Start the workers and keep them running until SIGTERM or SIGINT; then stop them all.

        Raises:
            ConfigError: when a worker keeps exiting right after its start.
        """
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for index in range(self.workers):
                self._start(index)
            while not self._stopping:
                sentinels = {p.sentinel: i for i, p in enumerate(self._processes)}
                for sentinel in wait([*sentinels, self._ready_reader], timeout=0.5):
                    if sentinel is self._ready_reader:
                        self._announce_ready()
                    else:
                        self._replace(sentinels[sentinel])
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, *_: object) -> None:
        self._stopping = True

    def _start(self, index: int) -> None:
        process = self._context.Process(target=self._work, args=(index,), name=f"lakehouse-worker-{index}")
        process.start()
        self._processes[index] = process
        self._started[index] = time.monotonic()

    def _replace(self, index: int) -> None:
        """Start a new worker in place of the dead worker `index`, freeing its places on the board."""
        dead = self._processes[index]
        dead.join()
        if self._stopping:
            return
        log.warning("worker %d (pid %s) exited with %s; starting a new one", index, dead.pid, dead.exitcode)
        self.board.reset(index, 0)
        _forget_metrics_of(dead.pid)
        quick = time.monotonic() - self._started[index] < QUICK_EXIT_S
        self._quick_exits[index] = self._quick_exits[index] + 1 if quick else 0
        if self._quick_exits[index] >= QUICK_EXITS:
            self._stopping = True
            raise ConfigError(f"serve: worker {index} exited {QUICK_EXITS} times within {QUICK_EXIT_S} s of its start")
        self._start(index)

    def stop(self) -> None:
        """Ask every worker to finish (SIGTERM), wait up to STOP_TIMEOUT_S, kill what is still running."""
        self._stopping = True
        running = [p for p in self._processes if p is not None and p.is_alive()]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in running:
            if process.is_alive():
                log.warning("worker pid %s did not stop within %s s; killing it", process.pid, STOP_TIMEOUT_S)
                process.kill()
                process.join()

    def _work(self, index: int) -> None:
        """The worker process: answer requests on the shared socket until told to stop."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        _end_with_parent()
        self.board.reset(index, os.getpid())
        slots, queue_depth, wait_timeout_s = self._admission
        admission = Admission(slots, queue_depth, wait_timeout_s, board=self.board, worker=index)
        app = WorkerHeader(self._make_app(admission, self.rate_buckets), index)
        # The socket listens already: connections wait in its queue until this server's loop accepts them.
        with contextlib.suppress(OSError):
            self._ready_writer.send_bytes(b"ready")
        config = uvicorn.Config(app, log_level="warning", access_log=False, loop="uvloop", http="httptools",
                                timeout_graceful_shutdown=GRACEFUL_S, backlog=BACKLOG, **self.server_options)  # fmt: skip
        StoppableServer(config).run(sockets=[self.sock])


def _end_with_parent() -> None:
    """Have the kernel send this process SIGTERM when its parent dies (Linux), so no worker outlives the server."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _forget_metrics_of(pid: int | None) -> None:
    """Drop the live gauges of a dead worker from the multi-process metrics (prometheus-client's own clean-up)."""
    if pid is None or not os.environ.get(METRICS_DIR_ENV):
        return
    with contextlib.suppress(ImportError):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


@contextlib.contextmanager
def run_directory() -> Iterator[Path]:
    """A fresh folder for one server run (its lock file; its metrics folder, exported for prometheus-client)."""
    run_dir = Path(tempfile.mkdtemp(prefix="lakehouse-serve-"))
    metrics_dir = run_dir / "metrics"
    metrics_dir.mkdir()
    previous = os.environ.get(METRICS_DIR_ENV)
    os.environ[METRICS_DIR_ENV] = str(metrics_dir)
    try:
        yield run_dir
    finally:
        if previous is None:
            os.environ.pop(METRICS_DIR_ENV, None)
        else:
            os.environ[METRICS_DIR_ENV] = previous
        shutil.rmtree(run_dir, ignore_errors=True)


def serve_workers(sock: socket.socket, workers: int, make_app: AppFactory, admission: tuple[int, int, float],
                  server_options: dict[str, Any] | None = None, on_ready: Callable[[], None] | None = None) -> None:  # fmt: skip
    """Serve on a listening socket with `workers` processes until SIGTERM or SIGINT.

    Args:
        sock: the listening socket (`listening_socket`); the caller closes it.
        workers: the number of worker processes.
        make_app: builds a worker's application around the server-wide admission and rate buckets (called in
            each worker).
        admission: (query slots, queue depth, wait timeout in seconds) for the whole server.
        server_options: more uvicorn settings of every worker (TLS files, log configuration).
        on_ready: called once, when the first worker accepts requests.

    Raises:
        ConfigError: when a worker keeps exiting at its start.
    """
    with run_directory() as run_dir:
        WorkerPool(sock, workers, make_app, admission, run_dir, server_options, on_ready).run()
