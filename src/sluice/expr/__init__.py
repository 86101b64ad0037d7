"""The one expression language: SQL expressions over a message, parsed once and
compiled for SQLite, PostgreSQL, Spark SQL and Python (see docs/expressions.md).

The parser's names (``parse``, ``parse_order``, ...) load with sqlglot when first
used: a program whose queues declare no expression never loads it, and checked trees,
compilers and scopes do not need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.expr.nodes import COLUMNS, Node, Type, builds_xml
from sluice.expr.python import Row, compile_python
from sluice.expr.scope import Relations, Scope
from sluice.expr.sql import Compiled, Source

if TYPE_CHECKING:
    from sluice.expr.check import FUNCTIONS, parse, parse_order, slice_key

__all__ = [
    "COLUMNS",
    "FUNCTIONS",
    "Compiled",
    "Node",
    "Relations",
    "Row",
    "Scope",
    "Source",
    "Type",
    "builds_xml",
    "compile_python",
    "parse",
    "parse_order",
    "slice_key",
]

_PARSER = frozenset({"FUNCTIONS", "parse", "parse_order", "slice_key"})


def __getattr__(name: str) -> Any:
    if name in _PARSER:
        from sluice.expr import check  # noqa: PLC0415  (sqlglot loads here, when first needed)

        value = getattr(check, name)
        globals()[name] = value  # later uses find it without this call
        return value
    raise AttributeError(f"module 'sluice.expr' has no attribute {name!r}")
