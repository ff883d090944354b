"""A principal's scope over the change events the explorer and the report read.

The rule is the audit search's (`gold.scopes.change_event_condition`, one sqlglot tree): rendered as
Spark SQL for the report and the timeline, translated to an Arrow filter for the in-process change search.

Change events carry no domain. An entity's domain is the one on its newest row of gold.audit_events
(`gold.scopes.newest_domain_query`, the rule of every scoped read): reading three columns of one Delta
table in-process is cheaper than rebuilding the current state (silver.aspect_state with its change log
applied) per request. Entities never published (no audit row yet) belong to no domain, so a domain scope
does not show them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable, QueryBuilder
from sqlglot import exp

from conf.errors import RequestError
from conf.locations import Location
from conf.settings import Settings
from conf.tables import AUDIT_EVENTS, table_location
from gold.scopes import Scope, change_event_condition, newest_domain_query
from pipelines.runtime.storage import delta_storage_options, table_exists

AUDIT_TABLE = AUDIT_EVENTS
# The name the audit rows go by in the in-process query.
_AUDIT_VIEW = "audit_events"
# Plain strings: the query engine answers string views, which Arrow's `is_in` does not take.
_NEWEST_DOMAINS = pa.schema([("entity_urn", pa.string()), ("domain", pa.string())])


class OutOfScopeError(RequestError):
    """An entity outside the caller's scope: served as HTTP 404, as for an entity that does not exist."""

    status = 404


def arrow_filter(condition: exp.Expression) -> ds.Expression:
    """Translate a scope condition (columns, string literals, IN, LIKE, AND, OR, FALSE) to an Arrow filter.

    Raises:
        RequestError: for a node the scope rule never builds (a new kind must be translated here too).
    """
    if isinstance(condition, exp.Paren):
        return arrow_filter(condition.this)
    if isinstance(condition, exp.And):
        return arrow_filter(condition.left) & arrow_filter(condition.right)
    if isinstance(condition, exp.Or):
        return arrow_filter(condition.left) | arrow_filter(condition.right)
    if isinstance(condition, exp.In):
        return ds.field(condition.this.name).isin([value.this for value in condition.expressions])
    if isinstance(condition, exp.Like):
        return pc.match_like(ds.field(condition.this.name), condition.expression.this)
    if isinstance(condition, exp.Boolean):
        return pc.scalar(bool(condition.this))
    raise RequestError(f"scope: the condition {condition.sql()!r} has no Arrow translation")


@dataclass(frozen=True)
class ChangeEventScope:
    """A scope resolved for change events: the condition with the domain kind turned into entity urns.

    Attributes:
        condition: None when every row is visible.
    """

    condition: exp.Expression | None

    @property
    def spark_sql(self) -> str | None:
        """The condition as Spark SQL (None: every row)."""
        return None if self.condition is None else self.condition.sql(dialect="spark")

    @property
    def arrow(self) -> ds.Expression | None:
        """The condition as an Arrow filter (None: every row)."""
        return None if self.condition is None else arrow_filter(self.condition)

    def visible_entities(self, entity_urns: Sequence[str | None], entity_types: Sequence[str | None]) -> list[bool]:
        """Whether each (aspect entity urn, aspect entity type) pair is in the scope."""
        if self.condition is None:
            return [True] * len(entity_urns)
        table = pa.table({
            "aspect_entity_urn": pa.array(entity_urns, pa.string()),
            "aspect_entity_type": pa.array(entity_types, pa.string()),
        })  # fmt: skip
        matched = table.append_column("_row", pa.array(range(len(entity_urns)), pa.int64())).filter(self.arrow)
        kept = set(matched["_row"].to_pylist())
        return [row in kept for row in range(len(entity_urns))]


class EntityDomains:
    """The entities of given domains by `gold.scopes.newest_domain_query` (cached per table version).

    Args:
        settings: the lakehouse settings (the audit table's location).
    """

    def __init__(self, settings: Settings):
        self._location: Location = table_location(settings, AUDIT_TABLE)
        self._lock = threading.Lock()
        self._cached: tuple[int, pa.Table] | None = None

    def _newest_domains(self) -> pa.Table:
        if not table_exists(self._location):
            return _NEWEST_DOMAINS.empty_table()
        table = DeltaTable(str(self._location), storage_options=delta_storage_options(self._location))
        version = table.version()
        with self._lock:
            if self._cached is not None and self._cached[0] == version:
                return self._cached[1]
        # The query engine honours deletion vectors, the plain Arrow reader refuses them.
        query = newest_domain_query(_AUDIT_VIEW).sql(dialect="postgres")
        rows = pa.table(QueryBuilder().register(_AUDIT_VIEW, table).execute(query).read_all())
        newest = rows.select(["entity_urn", "domain"]).cast(_NEWEST_DOMAINS)
        with self._lock:
            self._cached = (version, newest)
        return newest

    def entities_of(self, domains: Sequence[str]) -> list[str]:
        """The urns of the entities whose newest audit row names one of `domains`, sorted."""
        newest = self._newest_domains()
        return sorted(newest.filter(pc.is_in(newest["domain"], pa.array(list(domains), pa.string())))["entity_urn"].to_pylist())


def change_event_scope(scope: Scope, domains: EntityDomains) -> ChangeEventScope:
    """Resolve `scope` for change events (the domain kind read from gold.audit_events only when present)."""
    entities = domains.entities_of(scope.domains) if scope.domains else None
    return ChangeEventScope(change_event_condition(scope, entities))


def visible_history(events: list[dict[str, Any]], scope: ChangeEventScope) -> list[dict[str, Any]]:
    """The change events of an entity's history that `scope` shows (by the entity whose aspect was written)."""
    keep = scope.visible_entities([e.get("aspect_entity_urn") for e in events], [e.get("aspect_entity_type") for e in events])
    return [event for event, visible in zip(events, keep) if visible]
