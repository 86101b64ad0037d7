"""The checked form of an expression: a small typed tree every compiler reads.

The parser (sqlglot) only supplies syntax; everything here has passed the
allow-list and carries a static type, so compilers never meet a surprise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
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
    "Like",
    "Lit",
    "Logic",
    "Node",
    "Not",
    "Path",
    "Prop",
    "Type",
    "Var",
    "XPath",
]

Type = Literal["boolean", "number", "text", "json", "any"]
"""``json``: an object or array; ``any``: a JSON value whose type the data decides."""

Step: TypeAlias = str | int
"""A JSON path step: an object key, or an array index (0-based)."""


@dataclass(frozen=True, slots=True)
class Lit:
    """A constant; always bound as a parameter, never spliced into SQL."""

    value: bool | int | float | str | None
    type: Type


@dataclass(frozen=True, slots=True)
class Column:
    """A message's own field: priority, enqueued_at, type, ..."""

    name: str
    type: Type


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


@dataclass(frozen=True, slots=True)
class Coerce:
    """A JSON value read as ``type``: the value if its JSON type is that, else NULL."""

    arg: Node
    type: Type


@dataclass(frozen=True, slots=True)
class Cast:
    """An explicit conversion, CAST(x AS type): NULL where the value does not convert."""

    arg: Node
    source: Type
    type: Type


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic (+ - * /) on numbers, or || on text."""

    op: Literal["+", "-", "*", "/", "||"]
    left: Node
    right: Node
    type: Type


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
)
