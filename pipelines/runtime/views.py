"""The gold SQL views in conf/sql: qualify their table names, create them, transpile them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlglot
from pyspark.sql import SparkSession
from sqlglot import exp

from conf.errors import ConfigError
from conf.settings import CONF_DIR, Settings
from conf.tables import TABLES, schema_name, table_name

SQL_DIR = CONF_DIR / "sql"
VIEW_LAYER = "gold"


@dataclass(frozen=True)
class ViewSpec:
    """One view: its name and its SELECT, written against the default `<layer>.<table>` names."""

    name: str
    select_sql: str
    path: Path


def load_views(sql_dir: Path = SQL_DIR) -> tuple[ViewSpec, ...]:
    """Read every `<view name>.sql` file (one SELECT each) in name order."""
    return tuple(
        ViewSpec(path.stem, path.read_text().strip().rstrip(";"), path) for path in sorted(sql_dir.glob("*.sql"))
    )


def qualify_select(settings: Settings, view: ViewSpec, dialect: str = "spark") -> exp.Expression:
    """Parse a view's SELECT and point its `<layer>.<table>` references at the configured names.

    Raises:
        ConfigError: when the SQL does not parse or names a table or view that is not declared.
    """
    try:
        tree = sqlglot.parse_one(view.select_sql, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise ConfigError(f"{view.path}: not valid Spark SQL ({exc})") from exc
    known_views = {v.name for v in load_views(view.path.parent)}
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if not table.db and table.name in ctes:
            continue
        key = f"{table.db}.{table.name}"
        if key in TABLES:
            qualified = table_name(settings, key)
        elif table.db == VIEW_LAYER and table.name in known_views:
            qualified = f"{schema_name(settings, VIEW_LAYER)}.{table.name}"
        else:
            raise ConfigError(f"{view.path}: {key!r} is not a declared table or view")
        table.replace(exp.to_table(qualified, dialect="spark").as_(table.alias) if table.alias else exp.to_table(qualified))
    return tree


def create_view_sql(settings: Settings, view: ViewSpec, dialect: str = "spark") -> str:
    """Return `CREATE OR REPLACE VIEW <gold schema>.<name> AS <select>` in `dialect`."""
    select = qualify_select(settings, view).sql(dialect=dialect, pretty=True)
    return f"CREATE OR REPLACE VIEW {schema_name(settings, VIEW_LAYER)}.{view.name} AS\n{select}"


def ensure_views(spark: SparkSession, settings: Settings) -> None:
    """Create (or replace) every view of conf/sql in the session's catalog.

    Views are created in file-name order, so a view may only use views whose file sorts before its own.
    """
    for view in load_views():
        spark.sql(create_view_sql(settings, view))
