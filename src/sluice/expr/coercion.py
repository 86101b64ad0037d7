"""How checked values meet types: a JSON value read as the type its place asks for,
the type values must share, and the conversions CAST spells out.

Shared by the checker (``sluice.expr.check``) and the rules' forms
(``sluice.expr.check_rules``), so that both read a value the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from sluice.errors import ExpressionError
from sluice.expr.nodes import Cast, Coerce, Func, Lit, Node, Subquery, Type

__all__ = [
    "CASTS",
    "INTEGER_CASTS",
    "SCALARS",
    "article",
    "as_type",
    "cast_to",
    "common_type",
    "text_of",
]

SCALARS: Final[tuple[Type, ...]] = ("number", "text", "boolean")
CASTS: Final[Mapping[str, Type]] = {
    "DOUBLE": "number",
    "FLOAT": "number",
    "DECIMAL": "number",
    "INT": "number",
    "BIGINT": "number",
    "TEXT": "text",
    "VARCHAR": "text",
    "BOOLEAN": "boolean",
}
"""The types CAST converts to, by the names it takes."""
INTEGER_CASTS: Final = ("INT", "BIGINT")


def cast_to(arg: Node, target: Type, fails: str | None = None) -> Node:
    """``arg`` converted to ``target`` (both of known types), as CAST does; ``fails``: in
    rules, the run-time error of a text that does not convert (``Cast.fails``)."""
    if arg.type == target:
        return arg
    can_fail = arg.type == "text" and target in ("number", "boolean")
    return Cast(arg, arg.type, target, fails if can_fail else None)


def text_of(node: Node) -> Node:
    """``node`` as text, as CAST(node AS TEXT) converts it (a JSON value from its own type)."""
    if node.type == "any":
        if isinstance(node, Lit):
            return Lit(None, "text")
        # Exactly one of the typed readings is not NULL (see check._Checker.cast).
        return Func(
            "coalesce", tuple(cast_to(as_type(node, s, ""), "text") for s in SCALARS), "text"
        )
    return cast_to(node, "text")


def common_type(nodes: list[Node], text: str) -> Type:
    """The type values must share to be compared or chosen between."""
    known = {n.type for n in nodes if n.type != "any"}
    if "json" in known:
        raise ExpressionError(f"{text!r}: an object or array cannot be compared or chosen")
    if len(known) > 1:
        raise ExpressionError(
            f"{text!r} mixes {' and '.join(sorted(known))}; CAST one side to the other's type"
        )
    if not known:
        if all(isinstance(n, Lit) for n in nodes):
            return "text"  # NULL = NULL and the like: any type gives NULL
        raise ExpressionError(
            f"{text!r}: cannot tell whether the JSON values are numbers or text here; "
            "CAST one of them, e.g. CAST(body.x AS DOUBLE)"
        )
    return known.pop()


def as_type(node: Node, want: Type, text: str) -> Node:
    """``node`` as a ``want`` value: a JSON value is read as that type, else ExpressionError."""
    if node.type == want:
        return node
    if node.type == "any":
        if isinstance(node, Lit):
            return Lit(None, want)
        if isinstance(node, Subquery):
            # (SELECT a.body.x ...): the subquery reads the JSON value as the type.
            assert node.value is not None
            return replace(node, value=as_type(node.value, want, text), type=want)
        return Coerce(node, want)
    raise ExpressionError(f"{text!r} is {article(node.type)}, where {article(want)} is expected")


def article(kind: Type) -> str:
    """A type as a phrase: 'a number', 'an object or array'."""
    return {"json": "an object or array", "any": "a JSON value"}.get(kind, f"a {kind}")
