"""The one expression language: SQL expressions over a message, parsed once and
compiled for SQLite, PostgreSQL, Spark SQL and Python (see docs/expressions.md)."""

from sluice.expr.check import COLUMNS, FUNCTIONS, Relations, Scope, parse, parse_order, slice_key
from sluice.expr.nodes import Node, Type, builds_xml
from sluice.expr.python import Row, compile_python
from sluice.expr.sql import Compiled, Source

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
