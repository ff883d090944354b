"""Evaluate a search's match condition (the sqlglot tree of `gold.search.to_match_condition`) over a FileIndex.

The same tree is rendered as SQL for Spark and DuckDB; here it is evaluated node by node over the index's
arrays, one function per node kind. A node's value is a boolean array over index positions [lo, hi) or
a plain bool when it is the same for every row (a partition column compared with a literal). A node
this evaluator does not know raises, rather than being guessed at. NOT is one of them: a leaf on a null
value is false here, which is SQL's answer under AND and OR but not under NOT.
"""

from __future__ import annotations

import datetime
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
from sqlglot import exp

from conf.errors import ConfigError
from gold.scopes import like_to_regex
from pipelines.serving.index import TIME_COLUMN, FileIndex

_COMPARISONS: dict[type, Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}


def to_mask(condition: exp.Expression, index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
    """Return which index positions in [lo, hi) satisfy `condition` (a bool: all of them, or none).

    Raises:
        ConfigError: for a node or column the index cannot evaluate.
    """
    if isinstance(condition, exp.Paren):
        return to_mask(condition.this, index, lo, hi)
    if isinstance(condition, exp.And):
        return _and(to_mask(condition.left, index, lo, hi), to_mask(condition.right, index, lo, hi))
    if isinstance(condition, exp.Or):
        return _or(to_mask(condition.left, index, lo, hi), to_mask(condition.right, index, lo, hi))
    if isinstance(condition, exp.In):
        return _in(condition, index, lo, hi)
    if isinstance(condition, exp.Like):
        return _like(condition, index, lo, hi)
    if isinstance(condition, exp.Boolean):
        return bool(condition.this)
    if type(condition) in _COMPARISONS:
        return _compare(condition, index, lo, hi)
    raise ConfigError(f"serve.engine: inprocess cannot evaluate {condition.sql()!r} over its index")


def _and(left: np.ndarray | bool, right: np.ndarray | bool) -> np.ndarray | bool:
    if isinstance(left, bool):
        return right if left else False
    if isinstance(right, bool):
        return left if right else False
    return left & right


def _or(left: np.ndarray | bool, right: np.ndarray | bool) -> np.ndarray | bool:
    if isinstance(left, bool):
        return True if left else right
    if isinstance(right, bool):
        return True if right else left
    return left | right


def _in(node: exp.In, index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
    name = _column_name(node.this)
    values = [_literal(v) for v in node.expressions]
    if name in index.constants:
        return index.constants[name] in values
    if name in index.columns:
        column = index.columns[name]
        codes = column.codes_of([v for v in values if isinstance(v, str)])
        if not codes:
            return False
        window = column.codes[lo:hi]
        if len(codes) == 1:
            return window == codes[0]
        # One lookup per row; its last slot is the null code's (-1), never wanted.
        wanted = np.zeros(len(column.values) + 1, dtype=bool)
        wanted[codes] = True
        return wanted[window]
    raise ConfigError(f"serve.engine: inprocess has no index column {name!r} (in {node.sql()!r})")


def _like(node: exp.Like, index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
    """A LIKE pattern over a coded column: matched once per distinct value, then looked up by code."""
    name = _column_name(node.this)
    pattern = _literal(node.expression)
    if name not in index.columns or not isinstance(pattern, str):
        raise ConfigError(f"serve.engine: inprocess cannot evaluate {node.sql()!r} over its index")
    return index.columns[name].rows_matching(like_to_regex(pattern))[lo:hi]


def _compare(node: exp.Expression, index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
    compare = _COMPARISONS[type(node)]
    name = _column_name(node.left)
    value = _literal(node.right)
    if name == TIME_COLUMN:
        return _compare_sorted(compare, index.timestamps[lo:hi], int(value), monotone=type(node) not in (exp.EQ, exp.NEQ))
    if name in index.constants:
        constant = index.constants[name]
        # SQL: a comparison with NULL is not true.
        return constant is not None and bool(compare(constant, value))
    if name in index.columns and type(node) in (exp.EQ, exp.NEQ) and isinstance(value, str):
        column = index.columns[name]
        codes = column.codes_of([value])
        window = column.codes[lo:hi]
        if type(node) is exp.EQ:
            return window == codes[0] if codes else False
        return (window != codes[0]) & (window >= 0) if codes else window >= 0
    raise ConfigError(f"serve.engine: inprocess cannot evaluate {node.sql()!r} over its index")


def _compare_sorted(compare: Callable[[Any, Any], Any], times: np.ndarray, value: int, monotone: bool) -> np.ndarray | bool:
    """Compare ascending `times` with `value`; an order comparison true (or false) at both ends is so throughout."""
    if not len(times):
        return False
    if monotone:
        first, last = bool(compare(times[0], value)), bool(compare(times[-1], value))
        if first == last:
            return first
    return compare(times, value)


def _column_name(node: exp.Expression) -> str:
    if not isinstance(node, exp.Column):
        raise ConfigError(f"serve.engine: inprocess expects a column, got {node.sql()!r}")
    return node.name


def _literal(node: exp.Expression) -> object:
    """The Python value of a literal, or of a literal string cast to DATE."""
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else int(node.this) if node.is_int else float(node.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.to.this == exp.DataType.Type.DATE:
        return datetime.date.fromisoformat(node.this.this)
    raise ConfigError(f"serve.engine: inprocess expects a literal, got {node.sql()!r}")
