"""Create and register every declared table (and the gold SQL views) in a session."""

from __future__ import annotations

from pyspark.sql import SparkSession

from conf.settings import Settings
from conf.settings_sections import LAYERS
from conf.tables import ADDED_COLUMNS, TABLES, TableSpec, schema_name, table_name
from pipelines.runtime.home import home_of
from pipelines.runtime.io import sql_string
from pipelines.runtime.maintenance import maintenance_for
from pipelines.runtime.storage import table_exists


def create_table_sql(settings: Settings, spec: TableSpec) -> str:
    """Return the `CREATE TABLE IF NOT EXISTS` statement of one declared table.

    Args:
        settings: names the catalog/schema and decides between external (LOCATION) and managed tables.
        spec: the table declaration.
    """
    name = table_name(settings, spec.key)
    if settings.catalog.managed_tables:
        return f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)}{_properties(spec)}"
    location = home_of(settings).table_location(spec.key)
    quoted = sql_string(str(location))
    if table_exists(location):
        # An existing table keeps the schema in its log; the embedded engine mis-compares declared MAP
        # columns with the stored ones, so existing tables are registered by location alone (docs/scaling.md).
        return f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION {quoted}"
    return (
        f"CREATE TABLE IF NOT EXISTS {name} ({spec.columns}) USING delta{_partitioning(spec)}{_properties(spec)} "
        f"LOCATION {quoted}"
    )


def _partitioning(spec: TableSpec) -> str:
    return f" PARTITIONED BY ({', '.join(spec.partitioned_by)})" if spec.partitioned_by else ""


def _properties(spec: TableSpec) -> str:
    return f" TBLPROPERTIES ({_property_list(spec.properties)})" if spec.properties else ""


def _property_list(properties: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties)


def missing_properties(spark: SparkSession, settings: Settings, spec: TableSpec) -> tuple[tuple[str, str], ...]:
    """The declared properties an existing table does not have (with another value or not at all).

    The answer comes from the table's own Delta configuration, never from DESCRIBE of a table this
    session has just registered: the embedded engine shows no `Table Properties` for a table it
    registered by location, which made every session set the properties again (one commit each).
    """
    if not spec.properties:
        return ()
    configuration = maintenance_for(settings, spark).configuration(spec.key)
    return tuple((k, v) for k, v in spec.properties if configuration.get(k) != v)


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
        if spec.key in ADDED_COLUMNS:
            # A table created before the declaration gained these columns gets them (null in old rows).
            maintenance_for(settings, spark).add_missing_columns(spec.key)
        missing = missing_properties(spark, settings, spec)
        if missing:
            # A table created before the declaration gained these properties is brought up to it.
            spark.sql(f"ALTER TABLE {table_name(settings, spec.key)} SET TBLPROPERTIES ({_property_list(missing)})")
    from pipelines.runtime.views import ensure_views

    ensure_views(spark, settings)
