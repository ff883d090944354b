"""Turn an engine profile into a Spark session: the only place the project creates sessions."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from conf.errors import ConfigError
from conf.settings import Settings
from pipelines.runtime.storage import storage_options

if TYPE_CHECKING:  # imported by each engine when opened: a base install (no engine extra) serves in-process
    from pyspark.sql import SparkSession

    from pipelines.runtime.plan_sizes import PlanSizes

# The top-level modules the engine extras bring: `[local]` all of them, `[connect]` the client's.
ENGINE_MODULES = ("pyspark", "py4j", "pysail", "delta", "grpc", "grpc_status")
# What each engine kind imports to open a session.
ENGINE_IMPORTS = {
    "local": ("pyspark.sql", "pysail.spark"),
    "connect": ("pyspark.sql", "pyspark.sql.connect.client"),
    "classic": ("pyspark.sql",),
}
INSTALL_HINT = (
    "pip install 'metadata-audit-lakehouse[local]' for the embedded engine, or "
    "pip install 'metadata-audit-lakehouse[connect]' and --profile connect with engine.connect_url for a "
    "Spark Connect server (`lakehouse serve` with serve.engine: inprocess needs neither)"
)


def is_missing_engine(exc: BaseException) -> bool:
    """True when `exc` is the failed import of a module only an engine extra brings."""
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in ENGINE_MODULES


def missing_engine_error(exc: ImportError, kind: str | None = None) -> ConfigError:
    """The error naming the extra to install, for the failed import `exc` of an engine module.

    The wheel's base dependencies leave the engine out: a node that only serves needs none.

    Args:
        exc: the ImportError of the engine module.
        kind: the engine.kind that needed it, when known.
    """
    needed = f"engine.kind: {kind!r} needs" if kind else "this command needs"
    return ConfigError(f"{needed} a Spark engine, which is not installed ({exc}): {INSTALL_HINT}")


def require_engine(kind: str) -> None:
    """Import what engine `kind` opens sessions with.

    Raises:
        ConfigError: naming the extra to install, when a module of it is missing.
    """
    for module in ENGINE_IMPORTS.get(kind, ()):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_engine_error(exc, kind) from None


@contextlib.contextmanager
def open_session(
    settings: Settings, *, register_tables: bool = True, plan_sizes: PlanSizes | None = None
) -> Iterator[SparkSession]:
    """Open a Spark session for the settings' engine, register every table, and stop it on exit.

    Args:
        settings: the lakehouse settings; `settings.engine.kind` picks the engine.
        register_tables: create (if missing) and register every declared table and view.
        plan_sizes: a recorder of the size of every request the session sends (Spark Connect engines only).

    Yields:
        The session. For `local`, the embedded Sail server lives exactly as long as the block.

    Raises:
        ConfigError: for an engine kind this function does not know, a Spark Connect endpoint that
            cannot be reached, or JVM Spark without the Delta jars.
        ConfigError: also when the engine is not installed (a base install without an engine extra).
    """
    kind = settings.engine.kind
    require_engine(kind)
    if kind == "local":
        opener = _local_session
    elif kind == "connect":
        opener = _connect_session
    elif kind == "classic":
        opener = _classic_session
    else:
        raise ConfigError(f"engine.kind: unknown engine {kind!r}")
    if plan_sizes is not None and kind == "classic":
        raise ConfigError("engine.kind: request sizes are recorded on Spark Connect sessions, not on 'classic'")
    with opener(settings, plan_sizes) as spark:
        _apply_conf(spark, settings)
        if register_tables:
            from pipelines.runtime.catalog import ensure_tables

            ensure_tables(spark, settings)
        yield spark


@contextlib.contextmanager
def _local_session(settings: Settings, plan_sizes: PlanSizes | None) -> Iterator[SparkSession]:
    # The embedded engine logs sessions and shutdown to stderr; keep CLI output readable unless asked.
    os.environ.setdefault("RUST_LOG", "error")
    os.environ.update(sail_environment(settings))
    # Object storage: the engine reads the same options (AWS_ENDPOINT_URL, ...) from its environment.
    os.environ.update(storage_options(settings))
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    try:
        _, port = server.listening_address
        spark = _connect_to(f"sc://127.0.0.1:{port}", plan_sizes)
        try:
            yield spark
        finally:
            spark.stop()
    finally:
        server.stop()


# Sail's cluster runner (0.7.2) streams record batches between its workers as gRPC messages, and a
# worker refuses a message over 4 MiB ("decoded message length too large"): at Sail's 8192 rows refine of
# a 500k-version batch stopped there, and at 2048 rows another 500k-version batch did (4.28-4.48 MB).
# The engine cuts a batch into pieces of equal row counts, so a piece of a batch's large rows is over
# its 2 MiB target (test_engine_defects). 512 rows keep rows averaging up to 8 kB under the limit, at no
# measured cost (docs/scaling.md, "The cluster runner's 4 MiB messages").
CLUSTER_RUNNER_BATCH_ROWS = 512
CLUSTER_MODES = ("local-cluster", "kubernetes-cluster")


def sail_environment(settings: Settings, mode: str = "local") -> dict[str, str]:
    """The environment a Sail server needs for these settings (it reads its configuration there at start).

    The embedded engine gets it in this process; a remote Sail server (`sail spark server`, Sail on
    Kubernetes) must be started with it, since nothing a client sends changes it (docs/scaling.md).

    Args:
        settings: the lakehouse settings (`engine.memory_limit_mb`, `engine.parquet_filter_pushdown`,
            `engine.batch_rows`).
        mode: the server's `SAIL_MODE`: `local` (one process), `local-cluster` or `kubernetes-cluster`
            (the cluster runner, whose record batches are CLUSTER_RUNNER_BATCH_ROWS unless
            `engine.batch_rows` says otherwise).

    Returns:
        SAIL_* variable names and values.
    """
    environment = {
        # A micro-batch joins its few keys with the whole state: with pushdown, the scan decodes the key
        # columns, keeps the rows the join's filter lets through, and decodes the JSON of those alone.
        "SAIL_PARQUET__PUSHDOWN_FILTERS": "true" if settings.engine.parquet_filter_pushdown else "false",
        # The engine's Parquet reader (parquet-rs 59.2) can fail a pushed-down scan with "Invalid offset in
        # sparse column chunk data" when its predicate cache reads a page that page pruning left unloaded
        # (arrow-rs #10733): refine hit it on a state written by 20 MERGEs. Without the cache, the filter
        # columns are decoded again for the output instead of kept from the filter (reproduced in
        # tests/pipelines/runtime/test_engine_defects.py).
        "SAIL_PARQUET__MAX_PREDICATE_CACHE_SIZE": "0",
    }
    batch_rows = settings.engine.batch_rows or (CLUSTER_RUNNER_BATCH_ROWS if mode in CLUSTER_MODES else None)
    if batch_rows is not None:
        environment["SAIL_EXECUTION__BATCH_SIZE"] = str(batch_rows)
    if settings.engine.memory_limit_mb is not None:
        environment["SAIL_RUNTIME__MEMORY_POOL__TYPE"] = "fair"
        environment["SAIL_RUNTIME__MEMORY_POOL__FAIR__MAX_SIZE"] = str(settings.engine.memory_limit_mb * 2**20)
    return environment


# Seconds to wait for a Spark Connect endpoint to accept a connection before reporting it unreachable.
CONNECT_PROBE_SECONDS = 10.0


def check_reachable(connect_url: str, timeout: float = CONNECT_PROBE_SECONDS) -> None:
    """Fail fast when no Spark Connect endpoint answers at a URL.

    The Connect client retries an unreachable endpoint for minutes without a word. The probe opens
    the client's own gRPC channel for the URL (so proxies, TLS and the URL's parameters apply as they
    will for the session) and waits for it to connect; it sends no request.

    Raises:
        ConfigError: naming engine.connect_url (without its token) and what went wrong.
    """
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    shown = connect_url.split(";")[0]  # the parameters after ';' can hold a token
    try:
        builder = DefaultChannelBuilder(connect_url)
    except ValueError as exc:  # PySparkValueError is one too
        raise ConfigError(f"engine.connect_url: {shown!r} is not a Spark Connect URL ({exc})") from None
    channel = builder.toChannel()
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise ConfigError(
            f"engine.connect_url: nothing answers at {builder.endpoint} (no connection within {timeout:g} s)"
        ) from None
    finally:
        channel.close()


@contextlib.contextmanager
def _connect_session(settings: Settings, plan_sizes: PlanSizes | None) -> Iterator[SparkSession]:
    check_reachable(settings.engine.connect_url)
    spark = _connect_to(settings.engine.connect_url, plan_sizes)
    try:
        yield spark
    finally:
        if settings.engine.stop_on_exit:
            spark.stop()


def _connect_to(url: str, plan_sizes: PlanSizes | None) -> SparkSession:
    """A new Spark Connect session on `url`, its requests measured by `plan_sizes` when given."""
    if plan_sizes is None:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(url).create()
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    channel = DefaultChannelBuilder(url)
    channel.add_interceptor(plan_sizes)
    # What SparkSession.builder.remote() does before it delegates: functions and readers take the Connect path.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return ConnectSession.builder.channelBuilder(channel).create()


@contextlib.contextmanager
def _classic_session(settings: Settings, _plan_sizes: None = None) -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("lakehouse")
    if settings.engine.master:
        builder = builder.master(settings.engine.master)
    for key, value in settings.engine.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        _check_session_catalog(spark)
        yield spark
    finally:
        if settings.engine.stop_on_exit:
            spark.stop()


def _check_session_catalog(spark: SparkSession) -> None:
    """Fail with one message when JVM Spark cannot load its session catalog (the Delta jars are missing).

    Otherwise the first table operation fails with a JVM stack trace of hundreds of lines.

    Raises:
        ConfigError: naming the engine and the JVM's own first line.
    """
    try:
        spark.catalog.currentDatabase()
    except Exception as exc:  # the JVM's errors reach Python as several unrelated classes
        reason = java_message(exc)
        hint = (
            "; the classic profile needs the delta-spark jars on the JVM classpath "
            "(e.g. spark-submit --packages io.delta:delta-spark_2.13:<version>)"
            if "delta" in reason.lower()
            else ""
        )
        raise ConfigError(f"engine: JVM Spark cannot open its session catalog: {reason}{hint}") from None


def java_message(exc: BaseException) -> str:
    """The first line of what the engine said, without its stack trace (JVM or Spark Connect)."""
    text = str(exc).strip()
    text = text.split("\n\nJVM stacktrace:")[0].split("\n\n")[0]
    # py4j puts the Java exception on the line after "An error occurred while calling ...", after ": ".
    java = [line[2:] for line in text.splitlines() if line.startswith(": ")]
    return java[0] if java else (text or type(exc).__name__)


def _apply_conf(spark: SparkSession, settings: Settings) -> None:
    """Set the profile's runtime Spark settings that a running session accepts."""
    for key, value in settings.engine.spark_conf.items():
        # JVM Spark fixes spark.python.* when it starts (a classic session gets them from its builder);
        # the embedded engine takes them at any time.
        runtime = key.startswith("spark.sql.") or (key.startswith("spark.python.") and settings.engine.kind == "local")
        if runtime and key not in ("spark.sql.extensions", "spark.sql.catalog.spark_catalog"):
            spark.conf.set(key, value)


