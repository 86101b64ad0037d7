"""The forms only rules have, evaluated in Python (``sluice.expr.python`` hands them over):
new JSON and XML bodies, and the run-time errors of a division by zero or a CAST that
does not convert (``sluice.expr.failing``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from sluice.expr.failing import SHOWN, RunTimeError, cast_suffix
from sluice.expr.nodes import (
    JsonArray,
    JsonObject,
    Node,
    Type,
    XmlConcat,
    XmlElement,
    XmlForest,
    XmlNodes,
    builds_xml,
)
from sluice.expr.xml import escape_attribute, escape_text, select_nodes
from sluice.message import is_xml

__all__ = ["Evaluator", "Row", "construct", "failing_cast", "failing_divide", "json_number"]

Row: TypeAlias = Mapping[str, Any]
"""What an expression sees of a message: ``body`` (the decoded JSON value, None for a
body that is not JSON), ``raw`` (the stored body, for XPath), ``props`` (a dict), the
fields named in ``sluice.expr.check.COLUMNS`` and ``properties`` (declared ones).
In rules, ``now`` too: the engine clock that now() reads (seconds since the epoch)."""

Evaluator: TypeAlias = Callable[[Row, Mapping[str, Any]], Any]
Compile: TypeAlias = Callable[[Node], Evaluator]

_EXACT: Final = 2**53
"""Integers up to this are exactly doubles."""


def json_number(value: Any) -> Any:
    """A number as the language writes it in JSON (docs/expressions.md, "Numbers"): an
    integral one as an integer (8.0 is 8, 1e20 is 100000000000000000000), others as they
    are; NaN and infinities, which JSON has not, as None (null). Anything else as it is.

    Numbers are doubles on every engine: an integer past 2**53 is the double it reads as.
    """
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _EXACT:
        try:
            return int(float(value))
        except OverflowError:
            return None
    return value


def construct(node: Node, compile: Compile) -> Evaluator:
    """A JSON object or array (a dict or list), or XML text."""
    if isinstance(node, JsonObject):
        items = [(key, _json_value(value, compile)) for key, value in node.items]
        return lambda row, env: {key: value(row, env) for key, value in items}
    if isinstance(node, JsonArray):
        values = [_json_value(value, compile) for value in node.items]
        return lambda row, env: [value(row, env) for value in values]
    if isinstance(node, XmlNodes):
        return _xml_nodes(node.path)
    assert isinstance(node, XmlElement | XmlForest | XmlConcat)
    return _xml(node, compile)


def _json_value(node: Node, compile: Compile) -> Evaluator:
    fn = compile(node)
    if node.type != "number":  # a JSON value of the message is copied as it is
        return fn
    return lambda row, env: json_number(fn(row, env))


def failing_divide(left: Evaluator, right: Evaluator, reason: str) -> Evaluator:
    """``left / right``; a division by zero raises RunTimeError (NULL / 0 is NULL)."""

    def divide(row: Row, env: Mapping[str, Any]) -> Any:
        a, b = left(row, env), right(row, env)
        if a is None or b is None:
            return None
        if b == 0:
            raise RunTimeError(reason)
        try:
            return a / b
        except OverflowError:  # integers too large for a double
            return None

    return divide


def failing_cast(
    arg: Evaluator, convert: Callable[[Any], Any], reason: str, target: Type
) -> Evaluator:
    """A CAST of text; a text that does not convert raises RunTimeError showing it."""
    suffix = cast_suffix(target)

    def cast(row: Row, env: Mapping[str, Any]) -> Any:
        value = arg(row, env)
        converted = convert(value)
        if converted is None and value is not None:
            raise RunTimeError(f"{reason}{str(value)[:SHOWN]}{suffix}")
        return converted

    return cast


def _xml(node: XmlElement | XmlForest | XmlConcat, compile: Compile) -> Evaluator:
    """XML built as text, exactly as ``sluice.expr.sql_rules`` builds it in SQL."""
    if isinstance(node, XmlConcat):
        parts = [_xml_part(c, compile) for c in node.items]
        return lambda row, env: "".join(p(row, env) or "" for p in parts)
    if isinstance(node, XmlForest):
        forest = [(name, _xml_part(value, compile)) for name, value in node.items]
        return lambda row, env: "".join(
            f"<{name}>{v}</{name}>" for name, p in forest if (v := p(row, env)) is not None
        )
    name = node.name
    attributes = [(key, compile(value)) for key, value in node.attributes]
    content = [_xml_part(c, compile) for c in node.content]

    def element(row: Row, env: Mapping[str, Any]) -> str:
        attrs = "".join(
            f' {key}="{escape_attribute(v)}"'
            for key, value in attributes
            if (v := value(row, env)) is not None
        )
        inner = "".join(p(row, env) or "" for p in content)
        return f"<{name}{attrs}>{inner}</{name}>"

    return element


def _xml_part(node: Node, compile: Compile) -> Evaluator:
    """Content: XML as it is, text escaped (None stays None)."""
    fn = compile(node)
    if builds_xml(node):
        return fn
    return lambda row, env: None if (v := fn(row, env)) is None else escape_text(v)


def _xml_nodes(path: str) -> Evaluator:
    def nodes(row: Row, env: Mapping[str, Any]) -> str | None:
        content_type = row.get("content_type")
        if not (isinstance(content_type, str) and is_xml(content_type)):
            return None
        return select_nodes(path, row.get("raw"))

    return nodes
