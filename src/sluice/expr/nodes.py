"""The checked form of an expression: a small typed tree every compiler reads.

The parser (sqlglot) only supplies syntax; everything here has passed the
allow-list and carries a static type, so compilers never meet a surprise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Final, Literal, TypeAlias

__all__ = [
    "COLUMNS",
    "RULES_ONLY",
    "ArrayAgg",
    "Binary",
    "Case",
    "Cast",
    "Coerce",
    "Column",
    "Compare",
    "Func",
    "In",
    "IsNull",
    "JsonArray",
    "JsonObject",
    "Like",
    "Lit",
    "Logic",
    "Node",
    "Not",
    "Param",
    "Path",
    "Prop",
    "Relation",
    "Subquery",
    "Type",
    "Var",
    "XPath",
    "XmlConcat",
    "XmlElement",
    "XmlForest",
    "XmlNodes",
    "builds_xml",
    "expanded_size",
]

Type = Literal["boolean", "number", "text", "json", "any"]
"""``json``: an object or array; ``any``: a JSON value whose type the data decides."""

Step: TypeAlias = str | int
"""A JSON path step: an object key, or an array index (0-based)."""

COLUMNS: Final[Mapping[str, Type]] = {
    "priority": "number",
    "enqueued_at": "number",
    "available_at": "number",
    "expires_at": "number",
    "attempts": "number",
    "type": "text",
    "correlation_id": "text",
    "reply_to": "text",
    "content_type": "text",
}
"""A message's own fields, as expressions see them (times in seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class Lit:
    """A constant; always bound as a parameter, never spliced into SQL."""

    value: bool | int | float | str | None
    type: Type


@dataclass(frozen=True, slots=True)
class Column:
    """A message's own field: priority, enqueued_at, type, ...

    ``row``: the relation row it belongs to (``Relation.row``; then also ``id`` and
    ``queue``); None: the message the expression is about (in rules, the triggering one).
    """

    name: str
    type: Type
    row: str | None = None


@dataclass(frozen=True, slots=True)
class Prop:
    """A declared property: computed at enqueue, stored and indexed."""

    name: str
    type: Type


@dataclass(frozen=True, slots=True)
class Var:
    """The element an array function's lambda is applied to."""

    name: str


@dataclass(frozen=True, slots=True)
class Path:
    """A JSON value inside the body, the properties or a lambda's element (type ``any``)."""

    root: Literal["body", "props"] | Var
    steps: tuple[Step, ...]
    type: Type = "any"
    row: str | None = None
    """As ``Column.row``: whose body or properties (None for a lambda's element)."""


@dataclass(frozen=True, slots=True)
class Coerce:
    """A JSON value read as ``type``: the value if its JSON type is that, else NULL."""

    arg: Node
    type: Type


@dataclass(frozen=True, slots=True)
class Cast:
    """An explicit conversion, CAST(x AS type): NULL where the value does not convert,
    unless ``fails`` says why that is a run-time error (in rules)."""

    arg: Node
    source: Type
    type: Type
    fails: str | None = None
    """In rules: the run-time error a value that does not convert raises (its text
    before the value, see ``sluice.expr.failing``); None: it is NULL."""


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic (+ - * /) on numbers, or || on text."""

    op: Literal["+", "-", "*", "/", "||"]
    left: Node
    right: Node
    type: Type
    fails: str | None = None
    """In rules, for ``/``: the run-time error a division by zero raises; None: it is NULL."""


@dataclass(frozen=True, slots=True)
class Compare:
    op: Literal["=", "<>", "<", "<=", ">", ">="]
    left: Node
    right: Node
    operand: Type
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class Logic:
    op: Literal["and", "or"]
    args: tuple[Node, ...]
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class Not:
    arg: Node
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class IsNull:
    arg: Node
    negated: bool
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class In:
    arg: Node
    items: tuple[Node, ...]
    negated: bool
    operand: Type
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class Like:
    """``arg LIKE pattern``: % any run, _ one character; case-sensitive."""

    arg: Node
    pattern: str
    negated: bool
    type: Type = "boolean"


@dataclass(frozen=True, slots=True)
class Case:
    whens: tuple[tuple[Node, Node], ...]
    default: Node | None
    type: Type


@dataclass(frozen=True, slots=True)
class Func:
    """A scalar function from the allow-list (see ``sluice.expr.check.FUNCTIONS``)."""

    name: str
    args: tuple[Node, ...]
    type: Type


@dataclass(frozen=True, slots=True)
class ArrayAgg:
    """count/sum/min/max/avg/exists over a JSON array inside the message.

    ``value`` maps an element to what is aggregated (None: the element
    itself); ``where`` keeps only the elements it holds for.
    """

    op: Literal["count", "sum", "min", "max", "avg", "exists"]
    array: Node
    var: Var
    value: Node | None
    where: Node | None
    type: Type


@dataclass(frozen=True, slots=True)
class XPath:
    """An XPath 1.0 expression over an XML body, read as text, number or boolean."""

    path: str
    type: Type
    row: str | None = None
    """As ``Column.row``: whose body."""


# --- rules (sluice.rules): allowed only when the checker's Scope has relations -----------
@dataclass(frozen=True, slots=True)
class Param:
    """A value bound by name when the compiled expression runs: ``now()`` in rules is
    the parameter ``now`` (the engine clock, in seconds since the epoch)."""

    name: str
    type: Type


@dataclass(frozen=True, slots=True)
class Relation:
    """``queue('q')`` or ``slice()``: messages a rule reads besides the triggering one.

    ``row`` names its rows for the ``Path``, ``Column`` and ``XPath`` nodes that
    read them (unique within one checked expression); ``key`` is, for ``slice()``,
    the triggering message's slice key as text (``check.slice_key``).
    """

    kind: Literal["queue", "slice"]
    row: str
    queue: str | None = None
    key: Node | None = None


@dataclass(frozen=True, slots=True)
class Subquery:
    """One value computed over a relation's rows that ``where`` holds for.

    ``exists``: whether there is one (boolean); ``count``: how many (``value``
    None); ``sum`` (0 over none), ``min``, ``max``, ``avg`` of ``value``;
    ``first``: ``value`` of the first row by ``order`` (key, descending), ties
    broken by the message id, so that it is determined.
    """

    op: Literal["exists", "count", "sum", "min", "max", "avg", "first"]
    relation: Relation
    value: Node | None
    where: Node | None
    order: tuple[tuple[Node, bool], ...]
    type: Type


@dataclass(frozen=True, slots=True)
class JsonObject:
    """``json_object('k', v, ...)``: a new JSON object; keys are distinct."""

    items: tuple[tuple[str, Node], ...]
    type: Type = "json"


@dataclass(frozen=True, slots=True)
class JsonArray:
    """``json_array(v, ...)``: a new JSON array."""

    items: tuple[Node, ...]
    type: Type = "json"


@dataclass(frozen=True, slots=True)
class XmlElement:
    """``xmlelement(name n, xmlattributes(v AS a, ...), content, ...)``: XML text.

    Attribute values are text (an attribute whose value is NULL is left out);
    content is text, escaped, or XML that ``builds_xml``, embedded (NULL: nothing).
    """

    name: str
    attributes: tuple[tuple[str, Node], ...]
    content: tuple[Node, ...]
    type: Type = "text"


@dataclass(frozen=True, slots=True)
class XmlForest:
    """``xmlforest(v AS n, ...)``: an element ``<n>v</n>`` per value that is not NULL."""

    items: tuple[tuple[str, Node], ...]
    type: Type = "text"


@dataclass(frozen=True, slots=True)
class XmlConcat:
    """``xmlconcat(x, ...)``: XML and escaped text, one after the other."""

    items: tuple[Node, ...]
    type: Type = "text"


@dataclass(frozen=True, slots=True)
class XmlNodes:
    """``xpath_nodes(body, '/x')``: the nodes an XPath selects in an XML body, as XML
    text ('' when none); NULL when the body is not XML. The root node stands for the
    document element."""

    path: str
    row: str | None = None
    type: Type = "text"


Node: TypeAlias = (
    Lit
    | Column
    | Prop
    | Path
    | Coerce
    | Cast
    | Binary
    | Compare
    | Logic
    | Not
    | IsNull
    | In
    | Like
    | Case
    | Func
    | ArrayAgg
    | XPath
    | Param
    | Subquery
    | JsonObject
    | JsonArray
    | XmlElement
    | XmlForest
    | XmlConcat
    | XmlNodes
)

RULES_ONLY: Final = (
    Param,
    Subquery,
    JsonObject,
    JsonArray,
    XmlElement,
    XmlForest,
    XmlConcat,
    XmlNodes,
)
"""The kinds of node only rules have (paths and columns of relation rows are inside a
Subquery): compiled for SQLite and PostgreSQL, and by Python where no relation is read."""

_XML: Final = (XmlElement, XmlForest, XmlConcat, XmlNodes)


def builds_xml(node: Node) -> bool:
    """Whether ``node`` makes XML text (an XML constructor or an XPath node selection,
    possibly chosen by CASE or coalesce or taken from a subquery), as opposed to text
    that XML content escapes. A rule's body that builds XML is stored as XML."""
    if isinstance(node, _XML):
        return True
    if isinstance(node, Subquery):
        return node.op == "first" and node.value is not None and builds_xml(node.value)
    if isinstance(node, Case):
        results = [v for _, v in node.whens] + ([node.default] if node.default else [])
        return all(builds_xml(r) for r in results)
    if isinstance(node, Func) and node.name == "coalesce":
        return all(builds_xml(a) for a in node.args)
    return False


def expanded_size(node: Node, seen: dict[int, int]) -> int:
    """How many nodes ``node`` has once shared subtrees are counted each time they occur."""
    known = seen.get(id(node))
    if known is not None:
        return known
    total = 1
    for f in fields(node):
        value = getattr(node, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            for child in item if isinstance(item, tuple) else (item,):
                if is_dataclass(child) and not isinstance(child, Var | type):
                    total += expanded_size(child, seen)  # type: ignore[arg-type]
    seen[id(node)] = total
    return total
