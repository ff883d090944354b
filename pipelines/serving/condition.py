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
# An IN over at most this many codes compares the codes once per value; more, through a lookup table.
FEW_CODES = 8


# A compiled condition: which index positions in [lo, hi) of a file satisfy it.
Evaluator = Callable[[FileIndex, int, int], "np.ndarray | bool"]


def to_mask(condition: exp.Expression, index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
    """Return which index positions in [lo, hi) satisfy `condition` (a bool: all of them, or none).

    Raises:
        ConfigError: for a node or column the index cannot evaluate.
    """
    return compile_condition(condition)(index, lo, hi)


def compile_condition(condition: exp.Expression) -> Evaluator:
    """Turn `condition` into a function of (index, lo, hi), walking the tree and reading its literals once.

    A search evaluates its condition over every file its window meets: compiled once per search, each
    file costs only the array work.

    Raises:
        ConfigError: for a node the index cannot evaluate (a column it lacks is named when evaluated).
    """
    if isinstance(condition, exp.Paren):
        return compile_condition(condition.this)
    if isinstance(condition, (exp.And, exp.Or)):
        left, right = compile_condition(condition.left), compile_condition(condition.right)
        if isinstance(condition, exp.And):
            return lambda index, lo, hi: _and(left(index, lo, hi), lambda: right(index, lo, hi))
        return lambda index, lo, hi: _or(left(index, lo, hi), lambda: right(index, lo, hi))
    if isinstance(condition, exp.In):
        return _in(condition)
    if isinstance(condition, exp.Like):
        return _like(condition)
    if isinstance(condition, exp.Boolean):
        constant = bool(condition.this)
        return lambda index, lo, hi: constant
    if type(condition) in _COMPARISONS:
        return _compare(condition)
    raise ConfigError(f"serve.engine: inprocess cannot evaluate {condition.sql()!r} over its index")


def compile_file_count(condition: exp.Expression) -> Callable[[FileIndex], int]:
    """Turn `condition` into a function counting the rows of a whole file that satisfy it.

    One IN or = over a coded column is counted from the column's value counts, without a pass over the
    rows (most searches over a long window filter on one column); any other condition by its mask.

    Raises:
        ConfigError: for a node the index cannot evaluate.
    """
    evaluate = compile_condition(condition)
    one_column = _values_of_one_column(condition)

    def count(index: FileIndex) -> int:
        if one_column is not None and one_column[0] in index.columns:
            column = index.columns[one_column[0]]
            codes = column.codes_of(one_column[1])
            return int(column.value_counts[codes].sum()) if codes else 0
        return count_matching(evaluate(index, 0, index.size), index.size)

    return count


def count_matching(mask: np.ndarray | bool, size: int) -> int:
    """How many of `size` positions a mask (or a bool standing for all or none of them) selects."""
    if isinstance(mask, bool):
        return size if mask else 0
    return int(np.count_nonzero(mask))


def _values_of_one_column(condition: exp.Expression) -> tuple[str, list[str]] | None:
    """(column, string values) of `column IN (...)` or `column = '...'` over a column, else None."""
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.In) and isinstance(condition.this, exp.Column) and not condition.args.get("query"):
        values = [_literal(v) for v in condition.expressions]
    elif isinstance(condition, exp.EQ) and isinstance(condition.left, exp.Column) and isinstance(condition.right, exp.Literal):
        values = [_literal(condition.right)]
    else:
        return None
    if not values or not all(isinstance(v, str) for v in values):
        return None
    return condition.this.name if isinstance(condition, exp.In) else condition.left.name, values


def _and(left: np.ndarray | bool, right: Callable[[], np.ndarray | bool]) -> np.ndarray | bool:
    """AND of two masks; the right one is evaluated only when the left one leaves it a say."""
    if isinstance(left, bool):
        return right() if left else False
    evaluated = right()
    if isinstance(evaluated, bool):
        return left if evaluated else False
    return left & evaluated


def _or(left: np.ndarray | bool, right: Callable[[], np.ndarray | bool]) -> np.ndarray | bool:
    """OR of two masks; the right one is evaluated only when the left one leaves it a say."""
    if isinstance(left, bool):
        return True if left else right()
    evaluated = right()
    if isinstance(evaluated, bool):
        return True if evaluated else left
    return left | evaluated


def _in(node: exp.In) -> Evaluator:
    name = _column_name(node.this)
    values = [_literal(v) for v in node.expressions]
    strings = [v for v in values if isinstance(v, str)]

    def evaluate(index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
        if name in index.constants:
            return index.constants[name] in values
        if name in index.columns:
            column = index.columns[name]
            codes = column.codes_of(strings)
            if not codes:
                return False
            window = column.codes[lo:hi]
            if len(codes) <= FEW_CODES:
                # A comparison per code streams through the codes; a lookup per row gathers, ten times slower.
                mask = window == codes[0]
                for code in codes[1:]:
                    mask |= window == code
                return mask
            # One lookup per row; its last slot is the null code's (-1), never wanted.
            wanted = np.zeros(len(column.values) + 1, dtype=bool)
            wanted[codes] = True
            return wanted.take(window)
        raise ConfigError(f"serve.engine: inprocess has no index column {name!r} (in {node.sql()!r})")

    return evaluate


def _like(node: exp.Like) -> Evaluator:
    """A LIKE pattern over a coded column: matched once per distinct value, then looked up by code."""
    name = _column_name(node.this)
    pattern = _literal(node.expression)
    if not isinstance(pattern, str):
        raise ConfigError(f"serve.engine: inprocess cannot evaluate {node.sql()!r} over its index")
    regex = like_to_regex(pattern)

    def evaluate(index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
        if name not in index.columns:
            raise ConfigError(f"serve.engine: inprocess cannot evaluate {node.sql()!r} over its index")
        return index.columns[name].rows_matching(regex)[lo:hi]

    return evaluate


def _compare(node: exp.Expression) -> Evaluator:
    kind = type(node)
    compare = _COMPARISONS[kind]
    name = _column_name(node.left)
    value = _literal(node.right)
    if name == TIME_COLUMN:
        monotone = kind not in (exp.EQ, exp.NEQ)
        return lambda index, lo, hi: _compare_sorted(compare, index.timestamps[lo:hi], int(value), monotone)

    def evaluate(index: FileIndex, lo: int, hi: int) -> np.ndarray | bool:
        if name in index.constants:
            constant = index.constants[name]
            # SQL: a comparison with NULL is not true.
            return constant is not None and bool(compare(constant, value))
        if name in index.columns and kind in (exp.EQ, exp.NEQ) and isinstance(value, str):
            column = index.columns[name]
            codes = column.codes_of([value])
            window = column.codes[lo:hi]
            if kind is exp.EQ:
                return window == codes[0] if codes else False
            return (window != codes[0]) & (window >= 0) if codes else window >= 0
        raise ConfigError(f"serve.engine: inprocess cannot evaluate {node.sql()!r} over its index")

    return evaluate


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
