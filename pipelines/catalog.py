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
        return f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)}{_properties(spec)}"
    location = table_location(settings, spec.key)
    quoted = str(location).replace("'", "\\'")
    if (location / "_delta_log").is_dir():
        # An existing table keeps the schema in its log; the embedded engine mis-compares declared MAP
        # columns with the stored ones, so existing tables are registered by location alone.
        return f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{quoted}'"
    return (
        f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)}{_properties(spec)} "
        f"LOCATION '{quoted}'"
    )


def _partitioning(spec: TableSpec) -> str:
    return f" PARTITIONED BY ({', '.join(spec.partitioned_by)})" if spec.partitioned_by else ""


def _properties(spec: TableSpec) -> str:
    return f" TBLPROPERTIES ({_property_list(spec.properties)})" if spec.properties else ""


def _property_list(properties: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties)


def missing_properties(spark: SparkSession, settings: Settings, spec: TableSpec) -> tuple[tuple[str, str], ...]:
    """The declared properties an existing table does not have (with another value or not at all)."""
    if not spec.properties:
        return ()
    rows = spark.sql(f"DESCRIBE EXTENDED {table_name(settings, spec.key)}").collect()
    shown = next((str(r["data_type"]) for r in rows if str(r["col_name"]).strip() == "Table Properties"), "[]")
    return tuple((k, v) for k, v in spec.properties if not shows_property(shown, k, v))


def shows_property(shown: str, key: str, value: str) -> bool:
    """Whether a `Table Properties` text of DESCRIBE EXTENDED holds key=value.

    Spark, Databricks and the embedded engine all print the properties as `[k1=v1, k2=v2]`. Splitting
    that on commas would cut a value that holds one, so the entry is looked up whole instead.
    """
    body = shown.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    return f", {key}={value}," in f", {body},"


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
        missing = missing_properties(spark, settings, spec)
        if missing:
            # A table created before the declaration gained these properties is brought up to it.
            spark.sql(f"ALTER TABLE {table_name(settings, spec.key)} SET TBLPROPERTIES ({_property_list(missing)})")
    from pipelines.views import ensure_views

    ensure_views(spark, settings)
