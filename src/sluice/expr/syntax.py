"""Reading sqlglot's syntax trees: the forms the checker accepts, spelled out once.

Paths (``body.a[0].b``), literals, operand chains and function arguments as
sqlglot parses them, and how to quote a tree back in an error message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from sqlglot import exp
from sqlglot import parser as sqlglot_parser
from sqlglot.dialects.dialect import Dialect

if TYPE_CHECKING:
    from sqlglot.tokenizer_core import Token

from sluice.errors import ExpressionError
from sluice.expr.nodes import Lit, Step

__all__ = [
    "Language",
    "arguments",
    "literal",
    "negated",
    "operands",
    "parts",
    "parts_or_none",
    "quoted",
    "refused",
    "span",
]


class Language(Dialect):
    """SQL as sqlglot reads it for the expression language: every function call left as
    a plain call (sqlglot would otherwise check SQL's own arity, sum takes one argument,
    and turn calls into its own node kinds; the checker's allow-list decides instead)."""

    # An ORDER BY key without NULLS FIRST/LAST then parses as NULLS LAST, what the
    # language does: only an explicit NULLS FIRST can be told apart, and refused.
    NULL_ORDERING = "nulls_are_last"

    class Parser(sqlglot_parser.Parser):
        FUNCTIONS: ClassVar[dict[str, Any]] = {}

        def _parse_json_key_value(self) -> exp.JSONKeyValue | None:
            # sqlglot reads json_object's values only up to a comparison or AND, so
            # json_object('ok', x < 10) did not parse: a value is any expression, as an
            # argument of json_array is.
            self._match_text_seq("KEY")
            key = self._parse_column()
            self._match_set(self.JSON_KEY_VALUE_SEPARATOR_TOKENS)
            self._match_text_seq("VALUE")
            value = self._parse_disjunction()
            if not key and not value:
                return None
            return self.expression(exp.JSONKeyValue(this=key, expression=value))


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
    """Why ``e`` is not part of the language, in the language's words."""
    if isinstance(e, exp.Query | exp.Subquery):
        return "subqueries and statements cannot be used"
    if isinstance(e, exp.DDL | exp.DML | exp.Command | exp.Drop | exp.Create | exp.Alter):
        return "it is a statement; an expression is one condition or value"
    if isinstance(e, exp.Func):
        return f"function {e.sql_name().lower()} is not on the allow-list"
    for kinds, reason in _REFUSED:
        if isinstance(e, kinds):
            return reason
    return "it is not part of the expression language (docs/expressions.md lists what is)"


_REFUSED: Final[tuple[tuple[type[exp.Expression] | tuple[type[exp.Expression], ...], str], ...]] = (
    (exp.Mod, "'%' (modulo) is not part of the language"),
    (exp.ILike, "ILIKE is not part of the language: compare lower(x) LIKE 'pattern'"),
    ((exp.Placeholder, exp.Parameter), "parameters (?, :x, @x) are not part of the language: "
     "write the value itself"),
    (exp.Star, "'*' stands for no value here; count(*) is for rules' subqueries only"),
    (exp.Window, "window functions (OVER) are not part of the language"),
    (exp.Interval, "INTERVAL is not part of the language: times are numbers of seconds"),
    (exp.Alias, "AS names nothing in an expression; two values side by side need an "
     "operator between them"),
    (exp.NullSafeEQ, "'<=>' is not part of the language: use x = y OR (x IS NULL AND y IS NULL)"),
    ((exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift,
      exp.BitwiseRightShift), "bitwise operators are not part of the language"),
    ((exp.Tuple, exp.Array), "a list of values is only written after IN: x IN (1, 2)"),
)  # fmt: skip


def span(e: exp.Expr, tokens: Sequence[Token]) -> tuple[int, int] | None:
    """Where ``e`` is written in the text ``tokens`` come from: the offsets of its first
    and last character, as far as its parts that know their place tell; None if none do."""
    if e.parent is None and tokens:  # the whole text: a statement, say
        return tokens[0].start, tokens[-1].end
    starts = [n.meta["start"] for n in e.walk() if "start" in n.meta]
    if not starts or not tokens:
        return _unplaced(e, tokens)
    start, end = min(starts), max(n.meta["end"] for n in e.walk() if "end" in n.meta)
    a = next((k for k, t in enumerate(tokens) if t.start >= start), len(tokens) - 1)
    b = next((k for k in range(len(tokens) - 1, -1, -1) if tokens[k].end <= end), a)
    kinds = exp.Paren | exp.Subquery | exp.Tuple | exp.Exists
    if isinstance(e, kinds) or (isinstance(e, exp.Func) and not isinstance(e, exp.Anonymous)):
        # What locates e is inside its brackets: its '(' and the name before it belong to it.
        depth = 0
        for k in range(a - 1, -1, -1):
            kind = tokens[k].token_type.name
            depth += kind == "R_PAREN"
            if kind == "L_PAREN":
                if not depth:
                    a = k - (k > 0 and not isinstance(e, exp.Paren | exp.Subquery | exp.Tuple))
                    break
                depth -= 1
    elif isinstance(e, exp.Not) and a > 0 and tokens[a - 1].token_type.name == "NOT":
        a -= 1
    elif isinstance(e, exp.Case):
        a = next((k for k in range(a - 1, -1, -1) if tokens[k].token_type.name == "CASE"), a)
    depth = cases = 0
    for k in range(a, len(tokens)):
        kind = tokens[k].token_type.name
        depth += (kind in ("L_PAREN", "L_BRACKET")) - (kind in ("R_PAREN", "R_BRACKET"))
        cases += (kind == "CASE") - (kind == "END")
        if k >= b and depth <= 0 and cases <= 0:
            b = k
            break
    return tokens[a].start, tokens[b].end


def _unplaced(e: exp.Expr, tokens: Sequence[Token]) -> tuple[int, int] | None:
    # TRUE, NULL, '*', '?' know no place: the first token spelt so where the parent is.
    parent = e.parent
    around = span(parent, tokens) if parent is not None else None
    if around is None:
        return None
    written = quoted(e).upper() if isinstance(e, exp.Expression) else ""
    for t in tokens:
        if around[0] <= t.start <= around[1] and t.text.upper() == written:
            return t.start, t.end
    return around
