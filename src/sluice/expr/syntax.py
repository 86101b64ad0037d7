"""Reading sqlglot's syntax trees: the forms the checker accepts, spelled out once.

Paths (``body.a[0].b``), literals, operand chains and function arguments as
sqlglot parses them, and how to quote a tree back in an error message.
"""

from __future__ import annotations

import math
import re

from sqlglot import exp

from sluice.errors import ExpressionError
from sluice.expr.nodes import Lit, Step

__all__ = [
    "arguments",
    "literal",
    "negated",
    "operands",
    "parts",
    "parts_or_none",
    "quoted",
    "refused",
]


def operands(e: exp.Expression, kind: type[exp.Expression]) -> list[exp.Expression]:
    """The operands of a chain of ``kind`` (AND or OR), parentheses included, in order."""
    out: list[exp.Expression] = []
    stack = [e]
    while stack:
        node = stack.pop()
        inner = node
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, kind):
            stack.extend((inner.expression, inner.this))
        else:
            out.append(node)
    return out


def negated(e: exp.Expression) -> bool:
    return bool(e.args.get("negate"))


def arguments(e: exp.Func) -> list[exp.Expression]:
    args: list[exp.Expression] = []
    for key in e.arg_types:
        value = e.args.get(key)
        if isinstance(value, list):
            args.extend(v for v in value if isinstance(v, exp.Expression))
        elif isinstance(value, exp.Expression):
            args.append(value)
    return args


def literal(e: exp.Literal) -> Lit:
    if e.is_string:
        return Lit(e.this, "text")
    text = e.this
    try:
        value: int | float = int(text) if re.fullmatch(r"\d+", text) else float(text)
    except ValueError:
        raise ExpressionError(f"{text!r} is not a number") from None
    if (isinstance(value, int) and value >= 2**63) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise ExpressionError(f"the number {text} is out of range")
    return Lit(value, "number")


def parts(e: exp.Expression) -> list[Step]:
    parts = parts_or_none(e)
    if parts is None:
        raise ExpressionError(f"{quoted(e)!r} is not a path: use names, .name and [index]")
    return parts


def parts_or_none(e: exp.Expression) -> list[Step] | None:
    # Along the chain of steps, not recursively: a path of thousands of steps
    # (body.a.a.a...) hit Python's recursion limit, a RecursionError from parse.
    steps: list[Step] = []
    while isinstance(e, exp.Dot) or (isinstance(e, exp.Bracket) and len(e.expressions) == 1):
        if isinstance(e, exp.Dot):
            if not isinstance(e.expression, exp.Identifier):
                return None
            steps.append(e.expression.this)
        else:
            index = e.expressions[0]
            if not isinstance(index, exp.Literal):
                return None
            if index.is_string:
                steps.append(index.this)
            elif re.fullmatch(r"\d{1,9}", index.this):
                steps.append(int(index.this))
            else:
                return None
        e = e.this
    if isinstance(e, exp.Identifier):
        head = [e.this]
    elif isinstance(e, exp.Column):
        names = [e.args.get(k) for k in ("catalog", "db", "table", "this")]
        if not all(isinstance(n, exp.Identifier) or n is None for n in names):
            return None
        head = [n.this for n in names if n is not None]
    else:
        return None
    return [*head, *reversed(steps)]


def quoted(e: exp.Expression) -> str:
    try:
        return e.sql()
    except Exception:  # only used to quote the input back in messages
        return type(e).__name__


def refused(e: exp.Expression) -> str:
    if isinstance(e, exp.Query | exp.Subquery):
        return "subqueries and statements cannot be used"
    if isinstance(e, exp.Func):
        return f"function {e.sql_name().lower()} is not on the allow-list"
    return f"{type(e).__name__} is not part of the expression language"
