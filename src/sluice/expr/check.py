"""From text to a checked tree: sqlglot parses, this module admits only the allow-list.

Everything not named here (statements, subqueries, tables, functions off the
list) is refused with an ExpressionError that quotes the offending part. JSON
values get their type from where they are used (``body.total > 10`` reads a
number), so the engines never have to guess. The text is read (and refused when
malformed) by ``expr/reading.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from sqlglot import exp

from sluice.errors import ExpressionError
from sluice.expr import syntax
from sluice.expr.check_rules import RULE_CALLS, Relations, RulesChecker, check_keys, slice_key
from sluice.expr.coercion import CASTS as _CASTS
from sluice.expr.coercion import INTEGER_CASTS as _INTEGER_CASTS
from sluice.expr.coercion import SCALARS as _SCALARS
from sluice.expr.coercion import as_type as _as
from sluice.expr.coercion import cast_to as _cast
from sluice.expr.coercion import common_type as _common
from sluice.expr.failing import cast_reason, division_reason
from sluice.expr.located import located, nearest
from sluice.expr.nodes import (
    COLUMNS,
    ArrayAgg,
    Binary,
    Case,
    Column,
    Compare,
    Func,
    In,
    IsNull,
    Like,
    Lit,
    Logic,
    Node,
    Not,
    Path,
    Prop,
    Step,
    Subquery,
    Type,
    Var,
    XPath,
    expanded_size,
)
from sluice.expr.reading import MAX_DEPTH, MAX_LENGTH, read_tree, tokens
from sluice.expr.scope import Scope
from sluice.expr.syntax import quoted, refused

__all__ = [
    "COLUMNS",
    "FUNCTIONS",
    "MAX_LENGTH",
    "MAX_NODES",
    "Relations",
    "Scope",
    "check",
    "parse",
    "parse_order",
    "slice_key",
]

_MAX_STEPS: Final = 256
_MAX_ARGUMENTS: Final = 100

MAX_NODES: Final = 20_000
"""The most parts a checked expression may have, counting each use of a shared one."""

FUNCTIONS: Final[Mapping[str, tuple[tuple[Type, ...], int, Type]]] = {
    # name: (argument types, how many of them are required, result type)
    "lower": (("text",), 1, "text"),
    "upper": (("text",), 1, "text"),
    "length": (("text",), 1, "number"),
    "trim": (("text",), 1, "text"),
    "substr": (("text", "number", "number"), 2, "text"),
    "replace": (("text", "text", "text"), 3, "text"),
    "abs": (("number",), 1, "number"),
    "round": (("number", "number"), 1, "number"),
    "floor": (("number",), 1, "number"),
    "ceil": (("number",), 1, "number"),
    "epoch": (("text",), 1, "number"),
    "year": (("text",), 1, "number"),
    "month": (("text",), 1, "number"),
    "day": (("text",), 1, "number"),
}
"""Scalar functions: each compiler implements exactly these, with the same meaning."""

_WRITTEN_OTHERWISE: Final[Mapping[str, str]] = {
    # What sqlglot reads some SQL as, and what the language writes instead.
    "json_extract": "'->' does not read JSON here: write a path, body.a.b or body.a['b']; "
    "a lambda (x -> ...) is an argument of an array function: count, exists, sum, min, max, avg",
    "json_extract_scalar": "'->>' does not read JSON here: write a path, body.a.b or body.a['b']",
    "filter": "filter(array, x -> condition) is only the array of an array function: "
    "count(filter(body.lines, l -> l.qty > 1))",
    "concat": "texts are joined with ||: 'a' || 'b'",
    "collate": "COLLATE is not part of the language: texts compare by code point",
}
_ALIASES: Final = {"substring": "substr", "ceiling": "ceil", "char_length": "length"}
_AGGREGATES: Final = ("count", "sum", "min", "max", "avg", "exists")
_XPATH: Final[Mapping[str, Type]] = {
    "xpath": "text",
    "xpath_string": "text",
    "xpath_number": "number",
    "xpath_double": "number",
    "xpath_boolean": "boolean",
    "xpath_bool": "boolean",
}
_ORDER: Final = re.compile(r"\s+(asc|desc)\s*$", re.IGNORECASE)


def parse(text: str, scope: Scope | None = None, *, want: Type | None = None) -> Node:
    """Parse and check ``text``; ``want`` is the type the result must have.

    Raises ExpressionError, and nothing else, for any input.
    """
    tree = read_tree(text)
    node = _Checker(scope or Scope(), text).node(tree, 0)
    if want is not None:
        node = _as(node, want, text)
    # BETWEEN and simple CASE use their operand more than once: nested, that doubles
    # at each level, and every engine evaluates the expanded tree.
    size = expanded_size(node, {})
    if size > MAX_NODES:
        raise ExpressionError(
            f"the expression is too large: {size} parts once expanded, at most {MAX_NODES}"
        )
    return node


def parse_order(text: str, scope: Scope | None = None) -> tuple[Node, bool]:
    """An ordering key, ``expr [ASC|DESC]``: the checked expression and whether descending."""
    if not isinstance(text, str):
        raise ExpressionError(f"an ordering key must be a str, not {type(text).__name__}")
    match = _ORDER.search(text)
    descending = bool(match and match.group(1).lower() == "desc")
    node = parse(text[: match.start()] if match else text, scope)
    if node.type == "json":
        raise ExpressionError(f"cannot order by {text!r}: it is an object or array")
    return node, descending


def check(node: Node, want: Type, text: str) -> Node:
    """``node`` as a ``want`` value, or ExpressionError."""
    return _as(node, want, text)


class _Checker(RulesChecker):
    def __init__(self, scope: Scope, text: str) -> None:
        super().__init__(scope.relations, scope.properties)
        self.scope = scope
        self.text = text

    def node(self, e: exp.Expression, depth: int) -> Node:
        try:
            return self.kind(e, depth)
        except ExpressionError as exc:
            # The innermost part a mistake is found in is where it is: said once, there.
            found = self.placed(exc, e)
            if found is exc:
                raise
            raise found from exc.__cause__

    def placed(self, exc: ExpressionError, e: exp.Expression) -> ExpressionError:
        """``exc`` located at ``e`` in the text, unless it says where already."""
        if exc.expression is not None:
            return exc
        where = syntax.span(e, tokens(self.text) or [])
        if where is None:
            return exc
        start, end = where
        return located(exc.reason, self.text, start, length=end + 1 - start, expected=exc.expected)

    def kind(self, e: exp.Expression, depth: int) -> Node:  # noqa: PLR0911, PLR0912  (one case per kind)
        if depth > MAX_DEPTH:
            raise ExpressionError(f"the expression nests deeper than {MAX_DEPTH} levels")
        d = depth + 1
        if isinstance(e, exp.Paren):
            return self.node(e.this, d)
        if isinstance(e, exp.Literal):
            return syntax.literal(e)
        if isinstance(e, exp.Boolean):
            return Lit(bool(e.this), "boolean")
        if isinstance(e, exp.Null):
            return Lit(None, "any")
        if isinstance(e, exp.Column | exp.Dot | exp.Bracket | exp.Identifier):
            return self.reference(e)
        if isinstance(e, exp.Neg):
            arg = self.typed(e.this, "number", d)
            if isinstance(arg, Lit) and isinstance(arg.value, int | float):
                return Lit(-arg.value, "number")
            return Binary("-", Lit(0, "number"), arg, "number")
        if isinstance(e, exp.Add | exp.Sub | exp.Mul | exp.Div):
            op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}[type(e)]
            left, right = self.typed(e.this, "number", d), self.typed(e.expression, "number", d)
            fails = division_reason(quoted(e)) if op == "/" and self.relations else None
            return Binary(op, left, right, "number", fails)  # type: ignore[arg-type]
        if isinstance(e, exp.DPipe):
            left, right = self.typed(e.this, "text", d), self.typed(e.expression, "text", d)
            return Binary("||", left, right, "text")
        if isinstance(e, exp.EQ | exp.NEQ | exp.LT | exp.LTE | exp.GT | exp.GTE):
            return self.compare(e, d)
        if isinstance(e, exp.And | exp.Or):
            # a OR b OR c is one Logic of three: a long chain nests neither here nor
            # in the SQL it compiles to.
            op = "and" if isinstance(e, exp.And) else "or"
            args = tuple(self.typed(a, "boolean", d) for a in syntax.operands(e, type(e)))
            return Logic(op, args)  # type: ignore[arg-type]
        if isinstance(e, exp.Not):
            inner = e.this
            if isinstance(inner, exp.Is):
                return self.is_null(inner, d, negated=True)
            if isinstance(inner, exp.In):
                return self.in_list(inner, d, negated=True)
            if isinstance(inner, exp.Like):
                return self.like(inner, d, negated=True)
            return Not(self.typed(inner, "boolean", d))
        if isinstance(e, exp.Is):
            return self.is_null(e, d, negated=False)
        if isinstance(e, exp.In):
            return self.in_list(e, d, negated=False)
        if isinstance(e, exp.Like):
            return self.like(e, d, negated=False)
        if isinstance(e, exp.Between):
            return self.between(e, d)
        if isinstance(e, exp.Case):
            return self.case(e, d)
        if isinstance(e, exp.Cast | exp.TryCast):
            return self.cast(e, d)
        if isinstance(e, exp.Exists):
            return self.exists(e, d) if self.relations is not None else self.refuse(e)
        if isinstance(e, exp.Subquery):
            return self.subquery(e, d) if self.relations is not None else self.refuse(e)
        if isinstance(e, exp.JSONObject):
            return self.json_object(e, d)
        if isinstance(e, exp.XMLElement):
            return self.xml_element(e, d)
        if isinstance(e, exp.Anonymous):
            return self.call(e.name, list(e.expressions), e, d)
        if isinstance(e, exp.Func) and not isinstance(e, exp.AggFunc | exp.Predicate):
            # Calls sqlglot parses into its own node kinds even so (floor, round, ...).
            return self.call(e.sql_name(), syntax.arguments(e), e, d)
        return self.refuse(e)

    def refuse(self, e: exp.Expression) -> Node:
        reason = refused(e)
        if self.relations is None and isinstance(e, exp.Exists | exp.Subquery):
            reason += "; subqueries over queue() and slice() are for rules only"
        raise ExpressionError(f"{quoted(e)!r} is not allowed in an expression ({reason})")

    def typed(self, e: exp.Expression, want: Type, depth: int) -> Node:
        node = self.node(e, depth)
        try:
            return _as(node, want, quoted(e))
        except ExpressionError as exc:
            raise self.placed(exc, e) from None

    # --- references ------------------------------------------------------------------
    def reference(self, e: exp.Expression) -> Node:
        parts = syntax.parts(e)
        head, steps = parts[0], tuple(parts[1:])
        if len(steps) > _MAX_STEPS:
            # PostgreSQL reads each step as one more operator: a few thousand went past its
            # stack (a StorageError at the dequeue, not an ExpressionError here).
            raise ExpressionError(f"the path has {len(steps)} steps; at most {_MAX_STEPS}")
        if not isinstance(head, str):
            raise ExpressionError(f"{quoted(e)!r}: a path starts with a name")
        if head in self.vars:
            return Path(Var(head), steps)
        if head in self.rows:
            return self.row_reference(e, head, steps)
        check_keys(e, steps)
        if head in ("body", "props"):
            return self.props(Path(head, steps))  # type: ignore[arg-type]
        if steps:
            raise self.outside(e, head, steps)
        if head in COLUMNS:
            return Column(head, COLUMNS[head])
        if head in self.scope.properties:
            return Prop(head, self.scope.properties[head])
        if (named := self.trigger_name(head)) is not None:
            return named
        names = [*COLUMNS, *self.trigger_names(), *self.scope.properties, *self.vars]
        close = nearest(head, names)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ExpressionError(
            f"unknown name {head!r}: {hint}A message has body.<path>, props.<name>, "
            f"{', '.join(COLUMNS)}{', its declared properties' if self.scope.properties else ''}"
            f"{''.join(f', {p}' for p in self.scope.properties)}",
            expected=close or tuple(names),
        )

    def outside(self, e: exp.Expression, head: str, steps: tuple[Step, ...]) -> ExpressionError:
        """A path whose head is no name of a message's: said with the path meant, if clear."""
        roots = {"body": "body", "props": "props", "properties": "props", "property": "props",
                 "prop": "props", "message": "body", "msg": "body", "payload": "body"}  # fmt: skip
        root = roots.get(head.lower()) or next(iter(nearest(head, ["body", "props"])), None)
        if root is not None and all(isinstance(s, str) and s.isidentifier() for s in steps):
            meant = ".".join([root, *(str(s) for s in steps)])
            return ExpressionError(
                f"{quoted(e)!r} is not a path of the message: did you mean {meant}? Paths "
                "start with body (the message's body) or props (its properties)",
                expected=(meant,),
            )
        return ExpressionError(
            f"{quoted(e)!r} reaches outside the message: paths start with body, props, "
            "an array function's variable or (in rules) a subquery's relation",
            expected=("body", "props", *self.vars, *self.rows),
        )

    # --- operators -------------------------------------------------------------------
    def compare(self, e: exp.Expression, depth: int) -> Node:
        ops: dict[type[exp.Expression], str] = {
            exp.EQ: "=",
            exp.NEQ: "<>",
            exp.LT: "<",
            exp.LTE: "<=",
            exp.GT: ">",
            exp.GTE: ">=",
        }
        op = ops[type(e)]
        left, right = self.node(e.this, depth), self.node(e.expression, depth)
        operand = _common([left, right], quoted(e))
        if operand == "boolean" and op not in ("=", "<>"):
            raise ExpressionError(f"{quoted(e)!r}: booleans are compared with = and <> only")
        left, right = _as(left, operand, quoted(e)), _as(right, operand, quoted(e))
        return Compare(op, left, right, operand)  # type: ignore[arg-type]

    def is_null(self, e: exp.Is, depth: int, *, negated: bool) -> Node:
        if not isinstance(e.expression, exp.Null):
            raise ExpressionError(f"{quoted(e)!r}: only IS NULL and IS NOT NULL are supported")
        arg = self.node(e.this, depth)
        if isinstance(arg, Subquery) and arg.type == "any" and arg.value is not None:
            # (SELECT a.body.x ...) IS NULL: whether the first row's value is (JSON) null.
            present = IsNull(arg.value, negated=True)
            arg = Subquery(
                "first",
                arg.relation,
                Case(((present, Lit(1, "number")),), None, "number"),
                arg.where,
                arg.order,
                "number",
            )
        return IsNull(arg, negated != syntax.negated(e))

    def in_list(self, e: exp.In, depth: int, *, negated: bool) -> Node:
        if e.args.get("query") or e.args.get("unnest") or e.args.get("field"):
            raise ExpressionError(f"{quoted(e)!r}: IN takes a list of values, not a subquery")
        arg = self.node(e.this, depth)
        items = [self.node(i, depth) for i in e.expressions]
        if not items:
            raise ExpressionError(f"{quoted(e)!r}: IN needs at least one value")
        # Quoted once: rendered again for each of a long list's items, 3,000 took minutes.
        text = quoted(e)
        operand = _common([arg, *items], text)
        return In(
            _as(arg, operand, text),
            tuple(_as(i, operand, text) for i in items),
            negated != syntax.negated(e),
            operand,
        )

    def like(self, e: exp.Like, depth: int, *, negated: bool) -> Node:
        pattern = e.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise ExpressionError(f"{quoted(e)!r}: the LIKE pattern must be a quoted text literal")
        # sqlglot marks ``a NOT LIKE b`` on the Like itself, not with a Not around it.
        return Like(self.typed(e.this, "text", depth), pattern.this, negated != syntax.negated(e))

    def between(self, e: exp.Between, depth: int) -> Node:
        arg = self.node(e.this, depth)
        low, high = self.node(e.args["low"], depth), self.node(e.args["high"], depth)
        operand = _common([arg, low, high], quoted(e))
        if operand == "boolean":
            raise ExpressionError(f"{quoted(e)!r}: BETWEEN needs numbers or text")
        arg, low, high = (_as(n, operand, quoted(e)) for n in (arg, low, high))
        both = Logic("and", (Compare(">=", arg, low, operand), Compare("<=", arg, high, operand)))
        return Not(both) if syntax.negated(e) else both

    def case(self, e: exp.Case, depth: int) -> Node:
        subject = e.this
        conditions: list[Node] = []
        results: list[Node] = []
        for branch in e.args.get("ifs") or []:
            when = branch.this
            cond = exp.EQ(this=subject.copy(), expression=when) if subject else when
            conditions.append(self.typed(cond, "boolean", depth))
            results.append(self.node(branch.args["true"], depth))
        default = self.node(e.args["default"], depth) if e.args.get("default") else None
        text = quoted(e)  # once, as in in_list
        kind = _common([*results, *([default] if default else [])], text)
        return Case(
            tuple(zip(conditions, (_as(r, kind, text) for r in results), strict=True)),
            _as(default, kind, text) if default else None,
            kind,
        )

    def cast(self, e: exp.Cast | exp.TryCast, depth: int) -> Node:
        to = e.args["to"]
        name = to.this.name if isinstance(to, exp.DataType) else str(to)
        # VARCHAR(3) or DECIMAL(10, 2) would promise a truncation or rounding that
        # the language does not do: only the bare type names are accepted.
        if name not in _CASTS or (isinstance(to, exp.DataType) and to.expressions):
            raise ExpressionError(
                f"{quoted(e)!r}: cannot cast to {quoted(to)}; use DOUBLE, INT, TEXT or BOOLEAN"
            )
        arg = self.node(e.this, depth)
        if arg.type == "json":
            raise ExpressionError(f"{quoted(e)!r}: an object or array cannot be cast")
        target = _CASTS[name]
        fails = cast_reason(quoted(e)) if self.relations else None  # in rules: an error
        node: Node
        if isinstance(arg, Lit) and arg.value is None:
            node = Lit(None, target)
        elif arg.type == "any":
            # A JSON value converts from whichever type it turns out to have: exactly
            # one of the typed readings is not NULL, so each engine only ever
            # converts between known types.
            node = Func(
                "coalesce",
                tuple(_cast(_as(arg, source, quoted(e)), target, fails) for source in _SCALARS),
                target,
            )
        else:
            node = _cast(arg, target, fails)
        if name in _INTEGER_CASTS:  # INT truncates toward zero, as SQL does
            node = Func("trunc", (node,), "number")
        return node

    # --- calls -----------------------------------------------------------------------
    def call(  # noqa: PLR0911  (one case per kind of function)
        self, called: str, args: list[exp.Expression], e: exp.Expression, depth: int
    ) -> Node:
        name = _ALIASES.get(called.lower(), called.lower())
        if name == "count" and len(args) == 1 and (counted := self.count_of(args[0], e)):
            return counted
        if name in _AGGREGATES:
            return self.aggregate(name, args, e, depth)
        if name in _XPATH:
            return self.xpath(name, args, e)
        if name in RULE_CALLS:
            return self.rule_call(name, args, e, depth)
        if name == "coalesce":
            return self.coalesce(args, e, depth)
        if name == "json_array_length":
            return self.aggregate("count", args, e, depth)
        if name == "now":
            if args:
                raise ExpressionError(f"{quoted(e)!r}: now takes no arguments")
            return self.now() if self.relations is not None else Func("now", (), "number")
        if name not in FUNCTIONS:
            raise self.unknown_function(name)
        types, required, result = FUNCTIONS[name]
        if not required <= len(args) <= len(types):
            count = str(required) if required == len(types) else f"{required} to {len(types)}"
            raise ExpressionError(f"{quoted(e)!r}: {name} takes {count} argument(s)")
        checked = tuple(self.typed(a, t, depth) for a, t in zip(args, types, strict=False))
        return Func(name, checked, result)

    def unknown_function(self, name: str) -> ExpressionError:
        rules = RULE_CALLS | {"json_object", "xmlelement"} if self.relations else set()
        known = sorted({*FUNCTIONS, *_ALIASES, *_AGGREGATES, *_XPATH, "coalesce",
                        "json_array_length", "now", *rules})  # fmt: skip
        if name in _WRITTEN_OTHERWISE:
            return ExpressionError(_WRITTEN_OTHERWISE[name])
        close = nearest(name, known)
        said = (
            f"did you mean {' or '.join(close)}?"
            if close
            else f"the functions are {', '.join(known)}"
        )
        return ExpressionError(
            f"there is no function {name!r} in the expression language: {said}",
            expected=close or tuple(known),
        )

    def coalesce(self, args: list[exp.Expression], e: exp.Expression, depth: int) -> Node:
        if not args:
            raise ExpressionError(f"{quoted(e)!r}: coalesce needs at least one argument")
        if len(args) > _MAX_ARGUMENTS:
            # SQLite takes 127 (SQLITE_MAX_FUNCTION_ARG): more failed there as a StorageError.
            raise ExpressionError(
                f"coalesce takes at most {_MAX_ARGUMENTS} arguments, not {len(args)}"
            )
        nodes = [self.node(a, depth) for a in args]
        text = quoted(e)  # once, as in in_list
        kind = _common(nodes, text)
        return Func("coalesce", tuple(_as(n, kind, text) for n in nodes), kind)

    def aggregate(self, op: str, args: list[exp.Expression], e: exp.Expression, depth: int) -> Node:
        if not args or len(args) > 2:
            raise ExpressionError(f"{quoted(e)!r}: {op} takes an array and optionally a lambda")
        source, where = args[0], None
        if isinstance(source, exp.ArrayFilter):  # filter(array, x -> condition)
            source, where = source.this, source.expression
        elif isinstance(source, exp.Anonymous) and source.name.lower() == "filter":
            if len(source.expressions) != 2:
                raise ExpressionError(f"{quoted(source)!r}: filter takes an array and a lambda")
            source, where = source.expressions
        array = self.node(source, depth)
        if not isinstance(array, Path):
            raise ExpressionError(f"{quoted(e)!r}: {op} applies to an array inside the message")
        lambdas = [where] if where is not None else []
        if len(args) == 2:
            lambdas.append(args[1])
        var = self.lambda_var(lambdas, e)
        self.vars.append(var.name)
        try:
            element: Node = Path(var, ())
            kept = self.typed(where.this, "boolean", depth) if where is not None else None
            value = self.node(args[1].this, depth) if len(args) == 2 else None
        finally:
            self.vars.pop()
        if op in ("count", "exists"):
            if value is not None:  # count(a, x -> cond): a condition, as filter's
                value = _as(value, "boolean", quoted(e))
                kept = value if kept is None else Logic("and", (kept, value))
            if op == "exists" and kept is None:
                raise ExpressionError(f"{quoted(e)!r}: exists needs a condition, x -> ...")
            return ArrayAgg(op, array, var, None, kept, "number" if op == "count" else "boolean")  # type: ignore[arg-type]  # fmt: skip
        value = _as(value if value is not None else element, "number", quoted(e))
        return ArrayAgg(op, array, var, value, kept, "number")  # type: ignore[arg-type]

    def lambda_var(self, lambdas: list[exp.Expression], e: exp.Expression) -> Var:
        if not lambdas:  # count(body.lines): a name no expression can spell
            return Var(f"#{len(self.vars)}")
        names = set()
        for fn in lambdas:
            if not isinstance(fn, exp.Lambda) or len(fn.expressions) != 1:
                raise ExpressionError(f"{quoted(e)!r}: expected a lambda of one variable, x -> ...")
            names.add(fn.expressions[0].name)
        if len(names) != 1:
            raise ExpressionError(f"{quoted(e)!r}: use the same variable name in both lambdas")
        (name,) = names
        if name in ("body", "props") or name in COLUMNS or name in self.scope.properties:
            raise ExpressionError(f"{quoted(e)!r}: the variable {name!r} hides a field; rename it")
        if name in self.vars:
            raise ExpressionError(
                f"{quoted(e)!r}: {name!r} already names an element of an enclosing array "
                "function; give the inner lambda another variable"
            )
        if name in self.rows:
            raise ExpressionError(
                f"{quoted(e)!r}: {name!r} already names an enclosing subquery's relation; "
                "give the lambda another variable"
            )
        return Var(name)

    def xpath(self, name: str, args: list[exp.Expression], e: exp.Expression) -> Node:
        is_body, row = self.body_of(args[0]) if len(args) == 2 else (False, None)
        if not is_body:
            raise ExpressionError(f"{quoted(e)!r}: write {name}(body, '/an/xpath')")
        path = args[1]
        if not (isinstance(path, exp.Literal) and path.is_string):
            raise ExpressionError(f"{quoted(e)!r}: the XPath must be a quoted text literal")
        from sluice.expr.xml import check_xpath  # noqa: PLC0415  (lxml is optional: only XPath needs it)

        check_xpath(path.this)
        return XPath(path.this, _XPATH[name], row)
