"""`lakehouse bench backfill`: versions/s and peak memory from DataHub's database to committed bronze.

Starts a local PostgreSQL and/or MariaDB (`databases`), fills `metadata_aspect_v2` inside the server with
N versions as DataHub leaves them (10 versions per (urn, aspect): the newest is version 0, the earlier
ones 1..9 in time order), then times, each in a new home: the reader alone (database -> Arrow, ADBC and
connectorx for PostgreSQL, connectorx for MariaDB) and the whole backfill (database -> committed bronze).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from pipelines.bench.databases import LocalDatabase, local_mariadb, local_postgres
from pipelines.bench.harness import bench_settings, measure, peak_rss_since_reset, reset_peak_rss, write_result

VERSIONS_PER_KEY = 10
BASE_MS = 1_672_531_200_000  # 2023-01-01T00:00:00Z
ENGINES = ("postgres", "mariadb")


def fill_sql(engine: str, versions: int) -> str:
    """An INSERT ... SELECT that makes `versions` rows inside the server (no client round trip per row)."""
    keys = max(versions // VERSIONS_PER_KEY, 1)
    v = VERSIONS_PER_KEY
    if engine == "postgres":
        source, div, cat = f"generate_series(CAST(0 AS BIGINT), {versions - 1}) AS s(i)", "/", lambda *p: " || ".join(p)
        createdon = "TIMESTAMP '1970-01-01' + t * INTERVAL '1 millisecond'"
        text = lambda e: f"CAST({e} AS TEXT)"  # noqa: E731
    else:
        source, div, cat = f"seq_0_to_{versions - 1} AS s", "DIV", lambda *p: f"CONCAT({', '.join(p)})"
        createdon = "TIMESTAMPADD(MICROSECOND, t * 1000, '1970-01-01 00:00:00')"
        text = lambda e: f"CAST({e} AS CHAR)"  # noqa: E731
    index = "i" if engine == "postgres" else "seq"
    owner = cat("'urn:li:corpuser:u'", text("j"))
    tags = cat("'{\"tags\": [{\"tag\": \"urn:li:tag:base\"}, {\"tag\": \"urn:li:tag:t'", text("j"), "'\"}]}'")
    ownership = cat(
        "'{\"owners\": [{\"owner\": \"'", owner, "'\", \"type\": \"DATAOWNER\"}], \"lastModified\": {\"time\": '",
        text("t"), "', \"actor\": \"'", owner, "'\"}}'",
    )  # fmt: skip
    urn = cat("'urn:li:dataset:(urn:li:dataPlatform:hive,bench.table_'", text(f"k {div} 2"), "',PROD)'")
    system_metadata = cat(
        "'{\"runId\": \"bench\", \"lastObserved\": '", text("t"), "', \"version\": \"'", text("j + 1"), "'\"}'"
    )
    actor = cat("'urn:li:corpuser:u'", text(f"{index} % 97"))
    return f"""
        INSERT INTO metadata_aspect_v2 (urn, aspect, version, metadata, systemmetadata, createdon, createdby)
        SELECT {urn},
               CASE WHEN k % 2 = 0 THEN 'globalTags' ELSE 'ownership' END,
               CASE WHEN j = {v - 1} THEN 0 ELSE j + 1 END,
               CASE WHEN k % 2 = 0 THEN {tags} ELSE {ownership} END,
               {system_metadata},
               {createdon},
               {actor}
        FROM (SELECT {index}, k, j, {BASE_MS} + j * {keys} * 1000 + k AS t
              FROM (SELECT {index}, {index} {div} {v} AS k, {index} % {v} AS j FROM {source}) AS a) AS b
    """


def fill(database: LocalDatabase, versions: int) -> float:
    """Replace the table's rows with `versions` generated ones; return the seconds it took."""
    started = time.monotonic()
    with database.admin_connection() as conn:
        cursor = conn.cursor()
        cursor.execute("DELETE FROM metadata_aspect_v2")
        cursor.execute(fill_sql(database.engine, versions))
        conn.commit()
    return time.monotonic() - started


def read_only(database: LocalDatabase, reader: str, window_rows: int) -> dict[str, Any]:
    """Time streaming every row to Arrow in version order alone (no landing), through `reader`.

    `reader`: adbc or connectorx (the server sorts), or `ranges` (the backfill's MariaDB reader: the
    server's own order, sorted on the client a `createdon` range at a time).
    """
    from pipelines.batch.backfill.reader import mysql_url, postgres_uri, version_batches, version_order_query

    backfill = bench_settings(None, f"ingest.backfill.window_rows={window_rows}", *database.settings_overrides()).ingest.backfill
    query = version_order_query(backfill, None)
    rows = 0
    with measure() as took:
        if reader == "ranges":
            with version_batches(backfill, database.reader_password, None) as batches:
                rows = sum(batch.num_rows for batch in batches)
        elif reader == "adbc":
            import adbc_driver_postgresql.dbapi as adbc

            with adbc.connect(postgres_uri(backfill, database.reader_password)) as conn, conn.cursor() as cursor:
                cursor.execute(query)
                for batch in cursor.fetch_record_batch():
                    rows += batch.num_rows
        else:
            import connectorx

            url = (postgres_uri if database.engine == "postgres" else mysql_url)(backfill, database.reader_password)
            for batch in connectorx.read_sql(url, query, return_type="arrow_stream", batch_size=20000):
                rows += batch.num_rows
    return {"reader": reader, "rows": rows, "wall_s": took.wall_s, "rows_per_s": round(rows / took.wall_s, 1)}


def backfill_run(database: LocalDatabase, work: Path, window_rows: int) -> dict[str, Any]:
    """Time one whole backfill into a new home: database -> committed bronze."""
    import os

    from pipelines.batch.backfill import run_backfill
    from pipelines.runtime.catalog import ensure_tables
    from pipelines.runtime.engine import open_session

    home = Path(tempfile.mkdtemp(prefix="backfill-bench-home-", dir=work))
    settings = bench_settings(home, f"ingest.backfill.window_rows={window_rows}", *database.settings_overrides())
    os.environ[settings.ingest.backfill.password_env] = database.reader_password
    with open_session(settings) as spark:
        ensure_tables(spark, settings)
        reset_peak_rss()
        with measure() as took:
            report = run_backfill(spark, settings)
        peak = peak_rss_since_reset()
    shutil.rmtree(home, ignore_errors=True)
    read = report.totals["records_read"]
    return {
        "versions": read,
        "landed": report.totals["records_landed"],
        "windows": len(report.windows),
        "wall_s": took.wall_s,
        "cpu_s": took.cpu_s,
        "versions_per_s": round(read / took.wall_s, 1),
        "peak_rss_bytes": peak,
    }


def register(bench_app: typer.Typer) -> None:
    """Add `bench backfill` to the bench group."""

    @bench_app.command("backfill")
    def bench_backfill_command(
        versions: int = typer.Option(1_000_000, "--versions", min=10, help="Versions in metadata_aspect_v2."),
        engine: list[str] = typer.Option(list(ENGINES), "--engine", help="postgres, mariadb (repeatable)."),
        window_rows: int = typer.Option(200_000, "--window-rows", min=1, help="Rows per landing window."),
        readers: bool = typer.Option(True, "--readers/--no-readers", help="Also time the readers alone."),
        work: Path | None = typer.Option(None, "--work", help="Folder for the servers and homes (removed after)."),
        out: Path = typer.Option(Path("bench-results"), "--out", help="Folder for the JSON result."),
    ) -> None:
        """Measure backfill throughput (versions/s) and peak RSS from local PostgreSQL and MariaDB to bronze."""
        for name in engine:
            if name not in ENGINES:
                raise typer.BadParameter(f"{name!r} is not one of {', '.join(ENGINES)}", param_hint="--engine")
        folder = Path(work or tempfile.mkdtemp(prefix="backfill-bench-")).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        results: dict[str, Any] = {"versions": versions, "window_rows": window_rows}
        starters = {"postgres": local_postgres, "mariadb": local_mariadb}
        try:
            for name in engine:
                with contextlib.ExitStack() as stack:
                    database = stack.enter_context(starters[name](folder / name))
                    fill_s = fill(database, versions)
                    figures: dict[str, Any] = {"fill_s": round(fill_s, 3)}
                    if readers:
                        choices = ("adbc", "connectorx") if name == "postgres" else ("connectorx", "ranges")
                        figures["readers"] = [read_only(database, reader, window_rows) for reader in choices]
                    figures["backfill"] = backfill_run(database, folder, window_rows)
                    results[name] = figures
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        path = write_result(out, "backfill", results)
        lines = [
            f"{name}: {results[name]['backfill']['versions_per_s']:,.0f} versions/s, peak RSS "
            f"{results[name]['backfill']['peak_rss_bytes'] / 2**30:.2f} GiB"
            for name in engine
        ]
        typer.echo(f"{'; '.join(lines)} -> {path}")
