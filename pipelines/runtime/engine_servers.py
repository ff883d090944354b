"""Engine servers as processes on loopback: Sail (local or local-cluster mode) and JVM Spark as Spark Connect
servers, a free port for them, waiting for one to listen and stopping it.

Sessions are opened on them by `pipelines.runtime.engine`, the only place that creates sessions.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence

from conf.errors import ConfigError
from conf.settings import Settings
from pipelines.runtime.engine import sail_environment
from pipelines.runtime.storage import storage_options


def free_loopback_port() -> int:
    """A loopback TCP port that nothing listens on right now (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def jvm_connect_server(
    master: str = "local[2]", startup_timeout: float = 120.0, java_options: Sequence[str] = ()
) -> Iterator[str]:
    """Run JVM Spark (pyspark's bundled jars) as a Spark Connect server on loopback.

    One process cannot mix classic PySpark sessions with Connect sessions, so JVM Spark is reached
    through Connect like every other engine: the same client code runs on both.

    Args:
        master: the Spark master of the server, e.g. `local[2]`.
        startup_timeout: seconds to wait for the server's port.
        java_options: options of the server's JVM (`--driver-java-options`; in local mode the only JVM).

    Yields:
        The `sc://` URL of the server; it is stopped when the block ends.

    Raises:
        ConfigError: when the server does not come up in time (its log tail is in the message).
    """
    import tempfile
    import time

    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    port = free_loopback_port()
    command = [
        os.path.join(spark_home, "bin", "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", master,
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.sql.shuffle.partitions=4",
        *(["--driver-java-options", " ".join(java_options)] if java_options else []),
        "spark-internal",
    ]  # fmt: skip
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SPARK_HOME": spark_home}
        )
        try:
            wait_for_port(process, port, log, time.monotonic() + startup_timeout, "JVM Spark Connect server")
            yield f"sc://127.0.0.1:{port}"
        finally:
            stop_process(process)


def stop_process(process: subprocess.Popen, timeout: float = 30.0) -> int:
    """Stop a child process: SIGTERM, as a supervisor does, then SIGKILL if it outlives `timeout` seconds.

    Returns:
        Its exit code (a process that had exited already keeps its own).
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def wait_for_port(process, port: int, log, deadline: float, what: str) -> None:
    """Return once something listens on the loopback port, or raise with the process's log tail.

    Args:
        process: the server's process (its exit ends the wait).
        log: the server's output, a text file open for reading.
        deadline: the `time.monotonic()` by which it must listen.
        what: the server, as the error names it.

    Raises:
        ConfigError: when the process exits or the deadline passes first.
    """
    import time

    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                tail = log.read()[-2000:]
                raise ConfigError(f"engine: {what} on port {port} did not start:\n{tail}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def sail_connect_server(
    settings: Settings,
    mode: str = "local-cluster",
    workdir: str | None = None,
    startup_timeout: float = 60.0,
    environment: Mapping[str, str] | None = None,
    log_path: str | None = None,
) -> Iterator[str]:
    """Run Sail as a Spark Connect server in its own process on loopback (`sail spark server`).

    The server gets `sail_environment(settings, mode)`, the home's object-storage options
    (`storage_options(settings)`: an `s3://` home is read and written by the server itself) and
    `SAIL_MODE` in its environment, as a remote Sail deployment must; in `local-cluster` mode it starts a
    driver and workers that exchange data over the network (the runner Sail uses on Kubernetes).

    Args:
        settings: the settings whose Sail environment the server starts with.
        mode: `SAIL_MODE`: `local` (one process, threads) or `local-cluster`.
        workdir: the server's working directory (default: a new temporary one).
        startup_timeout: seconds to wait for the server's port.
        environment: more variables for the server, over the others (e.g. `SAIL_CLUSTER__WORKER_TASK_SLOTS`).
        log_path: a file the server's output is appended to and kept (default: a temporary one).

    Yields:
        The `sc://` URL of the server; it is killed when the block ends.

    Raises:
        ConfigError: when the server does not come up in time (its log tail is in the message).
    """
    import shutil
    import sys
    import tempfile
    import time

    sail = shutil.which("sail") or os.path.join(os.path.dirname(sys.executable), "sail")
    port = free_loopback_port()
    server_environment = {
        **os.environ, "RUST_LOG": "error", **sail_environment(settings, mode), **storage_options(settings), "SAIL_MODE": mode,
        **(environment or {}),
    }  # fmt: skip
    kept_log = open(log_path, "a+") if log_path else None  # noqa: SIM115 - closed with the other files below
    with (
        tempfile.TemporaryDirectory(prefix="sail-server-") as scratch,
        kept_log or tempfile.TemporaryFile(mode="w+") as log,
    ):
        process = subprocess.Popen(
            [sail, "spark", "server", "--ip", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=server_environment, cwd=workdir or scratch,
        )  # fmt: skip
        try:
            wait_for_port(process, port, log, time.monotonic() + startup_timeout, "Sail Spark Connect server")
            yield f"sc://127.0.0.1:{port}"
        finally:
            process.kill()
            process.wait()
