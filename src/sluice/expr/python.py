"""The expression language evaluated in Python: at enqueue (priority functions,
declared properties) and wherever no database is at hand.

A checked tree is turned once into nested closures, so evaluating it per
message costs a few function calls, not a tree walk with type tests.
"""

from __future__ import annotations

import math
import operator
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any, Final

from sluice.errors import ExpressionError
from sluice.expr import python_rules
from sluice.expr.nodes import (
    ArrayAgg,
    Binary,
    Case,
    Cast,
    Coerce,
    Column,
    Compare,
    Func,
    In,
    IsNull,
    JsonArray,
    JsonObject,
    Like,
    Lit,
    Logic,
    Node,
    Not,
    Param,
    Path,
    Prop,
    Subquery,
    Type,
    XmlConcat,
    XmlElement,
    XmlForest,
    XmlNodes,
    XPath,
)
from sluice.expr.python_rules import Evaluator, Row
from sluice.message import is_xml

__all__ = ["Evaluator", "Row", "compile_python"]


# ASCII digits only (re.ASCII): str's \d and int() would also take fullwidth or Arabic-Indic digits,
# which the SQL engines do not read as numbers.
_NUMBER: Final = re.compile(r" *[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)? *", re.ASCII)
_DATETIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?Z?)?", re.ASCII
)
"""ISO 8601 as the language takes it: a date, or a date and time (UTC, Z optional)."""


def compile_python(node: Node) -> Callable[[Row], Any]:
    """A function computing ``node`` for one message.

    Rules' forms give Python values: a JSON object or array as a dict or list, XML
    as text. Relations (``queue('q')``, ``slice()``) are read in the database only:
    ExpressionError.
    """
    fn = _compile(node)
    empty: Mapping[str, Any] = {}
    return lambda row: fn(row, empty)


def _compile(node: Node) -> Evaluator:  # noqa: PLR0911, PLR0912  (one case per node kind)
    if isinstance(node, Lit):
        value = node.value
        return lambda row, env: value
    if isinstance(node, Column):
        name = node.name
        return lambda row, env: row.get(name)
    if isinstance(node, Prop):
        name = node.name
        return lambda row, env: row["properties"].get(name)
    if isinstance(node, Path):
        return _path(node)
    if isinstance(node, Coerce):
        return _coerce(node.arg, node.type)
    if isinstance(node, Cast):
        arg, to = _compile(node.arg), _CONVERT[node.type]
        if node.fails is not None:
            return python_rules.failing_cast(arg, to, node.fails, node.type)
        return lambda row, env: to(arg(row, env))
    if isinstance(node, Binary):
        if node.fails is not None:
            return python_rules.failing_divide(
                _compile(node.left), _compile(node.right), node.fails
            )
        return _binary(node.op, _compile(node.left), _compile(node.right))
    if isinstance(node, Compare):
        return _compare(node.op, _compile(node.left), _compile(node.right))
    if isinstance(node, Logic):
        return _logic(node.op == "and", [_compile(a) for a in node.args])
    if isinstance(node, Not):
        arg = _compile(node.arg)
        return lambda row, env: None if (v := arg(row, env)) is None else not v
    if isinstance(node, IsNull):
        arg, negated = _compile(node.arg), node.negated
        return lambda row, env: (arg(row, env) is None) != negated
    if isinstance(node, In):
        return _in(_compile(node.arg), [_compile(i) for i in node.items], node.negated)
    if isinstance(node, Like):
        return _like(_compile(node.arg), node.pattern, node.negated)
    if isinstance(node, Case):
        return _case(
            [(_compile(c), _compile(v)) for c, v in node.whens],
            _compile(node.default) if node.default else None,
        )
    if isinstance(node, Func):
        return _function(node.name, [_compile(a) for a in node.args])
    if isinstance(node, ArrayAgg):
        return _aggregate(node)
    if isinstance(node, XPath):
        return _xpath(node.type, node.path)
    if isinstance(node, Param):
        return _param(node.name)
    if isinstance(node, Subquery):
        raise ExpressionError(
            "queue() and slice() are read in the database only: the rules engine runs "
            "this expression in SQL, not in Python"
        )
    if isinstance(node, JsonObject | JsonArray | XmlElement | XmlForest | XmlConcat | XmlNodes):
        return python_rules.construct(node, _compile)
    raise AssertionError(f"unknown node {node!r}")


def _path(node: Path) -> Evaluator:
    steps = node.steps
    root = node.root
    if isinstance(root, str):
        fetch: Evaluator = lambda row, env: row.get(root)  # noqa: E731
    else:
        name = root.name
        fetch = lambda row, env: env.get(name)  # noqa: E731

    def walk(row: Row, env: Mapping[str, Any]) -> Any:
        value = fetch(row, env)
        for step in steps:
            if isinstance(step, int):
                if not isinstance(value, list) or step >= len(value):
                    return None
            elif not isinstance(value, dict):
                return None
            value = value[step] if isinstance(step, int) else value.get(step)
        return value

    return walk


def _is(kind: Type, value: Any) -> bool:
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "text":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    return isinstance(value, dict | list)


_KINDS: Final[Mapping[str, tuple[type, ...]]] = {
    "number": (int, float),
    "text": (str,),
    "boolean": (bool,),
    "json": (dict, list),
}
"""The Python types of decoded JSON values of each kind (exact types: a bool is no int)."""


def _coerce(arg_node: Node, kind: Type) -> Evaluator:
    kinds = _KINDS[kind]
    steps = arg_node.steps if isinstance(arg_node, Path) else ()
    if len(steps) == 1 and isinstance(steps[0], str):
        # The common case, such as l.price in a priority function: one key of an
        # object, read and checked in one closure (this runs per message at enqueue).
        key, root = steps[0], arg_node.root  # type: ignore[union-attr]
        if isinstance(root, str):

            def member(row: Row, env: Mapping[str, Any]) -> Any:
                obj = row.get(root)
                if type(obj) is dict:
                    value = obj.get(key)
                    if type(value) in kinds:
                        return value
                return None

            return member
        name = root.name

        def var_member(row: Row, env: Mapping[str, Any]) -> Any:
            obj = env.get(name)
            if type(obj) is dict:
                value = obj.get(key)
                if type(value) in kinds:
                    return value
            return None

        return var_member
    arg = _compile(arg_node)

    def coerce(row: Row, env: Mapping[str, Any]) -> Any:
        value = arg(row, env)
        return value if type(value) in kinds else None

    return coerce


def _to_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _to_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) <= _EXACT:
            return str(value)
        try:  # numbers are doubles: a larger integer prints as the double it reads as
            value = float(value)
        except OverflowError:
            return None
    if isinstance(value, float):
        return _number_text(value)
    return value if isinstance(value, str) else None


_EXACT: Final = 2**53
"""Integers up to this are exactly doubles."""


def _number_text(value: float) -> str:
    """The shortest decimal that reads back as ``value``, written out in full.

    No exponent and no trailing zeros: 1e20 is 100000000000000000000, 2.0 is 2,
    1e-05 is 0.00001, 0.1 + 0.2 is 0.30000000000000004.
    """
    if value == 0:
        return "0"  # and not -0
    # repr is the shortest form that reads back; Decimal writes it out digit by digit.
    return format(Decimal(repr(value)).normalize(_ROUNDING), "f")


def _to_boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip(" ").lower())
    return None


_CONVERT: Final[Mapping[str, Callable[[Any], Any]]] = {
    "number": _to_number,
    "text": _to_text,
    "boolean": _to_boolean,
}


_ARITHMETIC: Final[Mapping[str, Callable[[Any, Any], Any]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "||": operator.add,
}


def _binary(op: str, left: Evaluator, right: Evaluator) -> Evaluator:
    if op == "/":

        def divide(row: Row, env: Mapping[str, Any]) -> Any:
            a, b = left(row, env), right(row, env)
            if a is None or b is None or b == 0:
                return None
            try:
                return a / b
            except OverflowError:  # integers too large for a double
                return None

        return divide
    fn = _ARITHMETIC[op]

    def apply(row: Row, env: Mapping[str, Any]) -> Any:
        a, b = left(row, env), right(row, env)
        return None if a is None or b is None else fn(a, b)

    return apply


_COMPARE: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _compare(op: str, left: Evaluator, right: Evaluator) -> Evaluator:
    test = _COMPARE[op]

    def compare(row: Row, env: Mapping[str, Any]) -> bool | None:
        a, b = left(row, env), right(row, env)
        return None if a is None or b is None else test(a, b)

    return compare


def _logic(conjunction: bool, args: list[Evaluator]) -> Evaluator:
    # SQL's three-valued logic: a decisive value wins over unknown (None).
    def logic(row: Row, env: Mapping[str, Any]) -> bool | None:
        unknown = False
        for arg in args:
            value = arg(row, env)
            if value is None:
                unknown = True
            elif bool(value) != conjunction:
                return not conjunction
        return None if unknown else conjunction

    return logic


def _in(arg: Evaluator, items: list[Evaluator], negated: bool) -> Evaluator:
    def member(row: Row, env: Mapping[str, Any]) -> bool | None:
        value = arg(row, env)
        if value is None:
            return None
        unknown = False
        for item in items:
            candidate = item(row, env)
            if candidate is None:
                unknown = True
            elif candidate == value:
                return not negated
        return None if unknown else negated

    return member


def _like(arg: Evaluator, pattern: str, negated: bool) -> Evaluator:
    regex = re.compile(
        "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern),
        re.DOTALL,
    )

    def like(row: Row, env: Mapping[str, Any]) -> bool | None:
        value = arg(row, env)
        return None if value is None else (regex.fullmatch(value) is not None) != negated

    return like


def _case(whens: list[tuple[Evaluator, Evaluator]], default: Evaluator | None) -> Evaluator:
    def case(row: Row, env: Mapping[str, Any]) -> Any:
        for condition, value in whens:
            if condition(row, env):
                return value(row, env)
        return default(row, env) if default else None

    return case


def _substr(s: str, start: float, length: float | None = None) -> str | None:
    begin = int(start)
    if begin < 1 or (length is not None and length < 0):
        return None
    return s[begin - 1 :] if length is None else s[begin - 1 : begin - 1 + int(length)]


_ROUNDING: Final = Context(prec=1000, rounding=ROUND_HALF_UP, Emin=-9999, Emax=9999)
"""Precise enough for any double at any of the digit positions ``_round`` allows."""


def _round(x: float, digits: float = 0) -> float | None:
    # Half away from zero on the number's decimal reading, as PostgreSQL's numeric
    # round. Beyond 340 places a double has no digits left, beyond -310 none at all.
    places = max(-310, min(340, int(digits)))
    try:
        exponent = Decimal(1).scaleb(-places)
        return float(Decimal(repr(x)).quantize(exponent, context=_ROUNDING))
    except InvalidOperation:
        return None


def _datetime(text: str) -> datetime | None:
    match = _DATETIME.fullmatch(text)
    if match is None:
        return None
    y, mo, d, h, mi, s, frac = match.groups()
    try:
        return datetime(
            int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0),
            round(float(frac) * 1_000_000) if frac else 0, tzinfo=UTC,
        )  # fmt: skip
    except ValueError:
        return None


def _date_part(part: str) -> Callable[[str], int | None]:
    def extract(text: str) -> int | None:
        moment = _datetime(text)
        return None if moment is None else int(getattr(moment, part))

    return extract


def _epoch(text: str) -> float | None:
    moment = _datetime(text)
    return None if moment is None else moment.timestamp()


def _replace(s: str, old: str, new: str) -> str:
    return s.replace(old, new) if old else s


_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "lower": str.lower,
    "upper": str.upper,
    "length": len,
    "trim": lambda s: s.strip(" "),
    "substr": _substr,
    "replace": _replace,
    "abs": abs,
    "round": _round,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "epoch": _epoch,
    "year": _date_part("year"),
    "month": _date_part("month"),
    "day": _date_part("day"),
}


def _function(name: str, args: list[Evaluator]) -> Evaluator:
    if name == "now":
        return lambda row, env: time.time()
    if name == "coalesce":

        def coalesce(row: Row, env: Mapping[str, Any]) -> Any:
            for arg in args:
                value = arg(row, env)
                if value is not None:
                    return value
            return None

        return coalesce
    fn = _FUNCTIONS[name]

    def call(row: Row, env: Mapping[str, Any]) -> Any:
        values = [a(row, env) for a in args]
        if any(v is None for v in values):
            return None
        try:
            return fn(*values)
        except (ArithmeticError, ValueError):  # floor(1e308 * 10): no number, NULL
            return None

    return call


def _aggregate(node: ArrayAgg) -> Evaluator:
    array = _compile(node.array)
    value = _compile(node.value) if node.value else None
    where = _compile(node.where) if node.where else None
    name, op = node.var.name, node.op

    def aggregate(row: Row, env: Mapping[str, Any]) -> Any:  # noqa: PLR0911  (one per op)
        items = array(row, env)
        if not isinstance(items, list):
            return None
        kept = []
        scope = dict(env)  # one copy per call, not per element
        for item in items:
            scope[name] = item
            if where is None or where(row, scope) is True:
                kept.append(value(row, scope) if value else item)
        if op == "count":
            return len(kept)
        if op == "exists":
            return bool(kept)
        numbers = [v for v in kept if v is not None]
        if op == "sum":
            return sum(numbers)
        if not numbers:
            return None
        if op == "avg":
            return sum(numbers) / len(numbers)
        return min(numbers) if op == "min" else max(numbers)

    return aggregate


def _xpath(kind: Type, path: str) -> Evaluator:
    from sluice.expr.xml import evaluate_xpath  # noqa: PLC0415  (lxml is optional)

    def xpath(row: Row, env: Mapping[str, Any]) -> Any:
        # Only an XML body has nodes: a text body that happens to parse has none.
        content_type = row.get("content_type")
        if not (isinstance(content_type, str) and is_xml(content_type)):
            return None
        return evaluate_xpath(kind, path, row.get("raw"))

    return xpath


def _param(name: str) -> Evaluator:
    def param(row: Row, env: Mapping[str, Any]) -> Any:
        if name not in row:
            raise ExpressionError(f"{name}() in a rule reads the row's {name!r}, which is missing")
        return row[name]

    return param
