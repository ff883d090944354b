"""Create and register every declared table (and the gold SQL views) in a session."""

from __future__ import annotations

from pyspark.sql import SparkSession

from conf.settings import LAYERS, Settings
from conf.tables import TABLES, TableSpec, schema_name, table_location, table_name


def create_table_sql(settings: Settings, spec: TableSpec) -> str:
    """Return the `CREATE TABLE IF NOT EXISTS` statement of one declared table.

    Args:
        settings: names the catalog/schema and decides between external (LOCATION) and managed tables.
        spec: the table declaration.
    """
    name = table_name(settings, spec.key)
    if settings.catalog.managed_tables:
        return f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)}"
    location = table_location(settings, spec.key)
    quoted = str(location).replace("'", "\\'")
    if (location / "_delta_log").is_dir():
        # An existing table keeps the schema in its log; the embedded engine mis-compares declared MAP
        # columns with the stored ones, so existing tables are registered by location alone.
        return f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{quoted}'"
    return f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)} LOCATION '{quoted}'"


def _partitioning(spec: TableSpec) -> str:
    return f" PARTITIONED BY ({', '.join(spec.partitioned_by)})" if spec.partitioned_by else ""


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create every schema and table that is missing and register it in the session's catalog.

    Registration matters on the embedded engine, whose catalog lives in memory: a table written by
    an earlier process becomes queryable by name again once its location is registered.

    Args:
        spark: the session.
        settings: the lakehouse settings.
    """
    for layer in LAYERS:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema_name(settings, layer)}")
    for spec in TABLES.values():
        spark.sql(create_table_sql(settings, spec))
    from pipelines.views import ensure_views

    ensure_views(spark, settings)
