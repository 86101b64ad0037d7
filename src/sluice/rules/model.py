"""A rules application as sluice keeps it: queues, properties, slicings and rules.

The definition language (``sluice.rules.language``) parses text into the
statements below; ``sluice.rules.check`` applies them onto an ``Application``
and checks everything that can be checked before a message arrives. The runner
(``sluice.rules.runner``) executes a checked ``Application``. Expressions stay
as their text here (with the line they start on): they are checked and
compiled against the application they belong to; where they are in the file
is kept for errors (``sluice.rules.placed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

__all__ = [
    "PROPERTY_TYPES",
    "SYSTEM_PROPERTIES",
    "Action",
    "Application",
    "Branch",
    "Drop",
    "Enqueue",
    "Expr",
    "GatewayDef",
    "PropertyDef",
    "QueueDef",
    "Reset",
    "RuleDef",
    "SlicingDef",
    "Statement",
]

PropertyType = Literal["text", "integer", "real", "boolean", "timestamp"]

PROPERTY_TYPES: dict[str, Literal["text", "number", "boolean"]] = {
    "text": "text",
    "integer": "number",
    "real": "number",
    "boolean": "boolean",
    "timestamp": "number",  # seconds since the epoch, by the engine clock
}
"""A property's declared type -> the expression type it reads as."""

SYSTEM_PROPERTIES: dict[str, Literal["text", "number"]] = {
    "rule": "text",  # the rule whose action created the message
    "created_at": "number",  # when, by the engine clock
    "trigger_id": "number",  # the triggering message's id
    "trigger_queue": "text",  # and its queue
}
"""Properties sluice sets on every message a rule creates; nobody else may set them."""


@dataclass(frozen=True, slots=True)
class Expr:
    """An expression as the checks read it, the line of the file it starts on, and
    where its text is in the file (for errors that point at the file's own line).

    ``text`` is the expression with blanks and comments between its tokens folded to
    one space. The placing fields do not take part in comparisons: an expression
    moved or reformatted is the same expression.
    """

    text: str
    line: int
    column: int = field(default=0, compare=False)
    """The column of ``line`` the expression starts at, from 1; 0 when it was not read
    from a file (written by sluice, or stored by an older version)."""
    source: str = field(default="", compare=False)
    """The file's text of the lines the expression is on, as written: the part of its
    first line before it, the expression with its comments and line breaks, and the
    rest of its last line (the parts around it cut to 80 characters, "..." where cut)."""
    runs: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    """How ``text`` maps onto ``source``: (offset in ``text``, offset in ``source``) where
    each part copied as written starts: the first token, and each token after blanks
    or a comment folded into one space."""


@dataclass(frozen=True, slots=True)
class QueueDef:
    """``CREATE QUEUE name [KIND basic|echo|gateway IN|OUT TRANSPORT t [WITH (...)]]
    [MODE ...] [PRIORITY n] [TYPE ...] [ERRORQUEUE q] [RETENTION duration]``."""

    name: str
    line: int
    kind: Literal["basic", "echo", "gateway"] = "basic"
    mode: Literal["persistent", "transient"] = "persistent"
    priority: int = 0
    """The scheduler's order among queues: higher first."""
    types: tuple[str, ...] = ()
    error_queue: str | None = None
    retention: float = 0.0
    """Seconds a processed message is kept at least (and longer while a slice holds it)."""
    gateway: GatewayDef | None = None
    """A KIND gateway queue's direction, transport and settings (sluice.gateways)."""


@dataclass(frozen=True, slots=True)
class GatewayDef:
    """``KIND gateway IN|OUT TRANSPORT t [WITH (name = value, ...)]``: the transport that
    brings messages into the queue (in) or sends what is put into it (out)."""

    direction: Literal["in", "out"]
    transport: str
    settings: tuple[tuple[str, str | int | float | bool], ...] = ()


@dataclass(frozen=True, slots=True)
class PropertyDef:
    """``CREATE PROPERTY name AS type [FIXED|INHERITED] QUEUE q, ... [VALUE expr]
    [QUEUE q VALUE expr ...]``.

    ``values`` maps each queue that has the property to the expression computing it
    there (None: set explicitly, or inherited). A FIXED property is computed and
    never set; an INHERITED one is copied from the triggering message unless set.
    """

    name: str
    type: PropertyType
    line: int
    values: dict[str, Expr | None] = field(default_factory=dict)
    fixed: bool = False
    inherited: bool = False


@dataclass(frozen=True, slots=True)
class SlicingDef:
    """``CREATE SLICING name ON property``: one slice per distinct value."""

    name: str
    property: str
    line: int


@dataclass(frozen=True, slots=True)
class Enqueue:
    """``ENQUEUE body INTO queue [WITH p = expr, ...]``."""

    body: Expr
    queue: str
    properties: tuple[tuple[str, Expr], ...] = ()


@dataclass(frozen=True, slots=True)
class Reset:
    """``RESET [slicing [KEY expr]]``: bare RESET, in a rule for a slicing, resets the
    current slice; with a name, that slicing's slice whose key is ``key`` (default:
    the triggering message's value of the slicing's property)."""

    slicing: str | None = None
    key: Expr | None = None
    line: int = 0


Action: TypeAlias = Enqueue | Reset


@dataclass(frozen=True, slots=True)
class Branch:
    """``IF condition THEN actions`` (``condition`` None: the final ELSE)."""

    condition: Expr | None
    actions: tuple[Action, ...]


@dataclass(frozen=True, slots=True)
class RuleDef:
    """``CREATE RULE name FOR queue-or-slicing [ERRORQUEUE q] IF ... [ELSE IF ...] [ELSE ...]``.

    The first branch whose condition holds runs; none may run.
    """

    name: str
    target: str
    line: int
    branches: tuple[Branch, ...]
    error_queue: str | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    """``DROP RULE|SLICING|PROPERTY|QUEUE [IF EXISTS] name``."""

    kind: Literal["rule", "slicing", "property", "queue"]
    name: str
    line: int
    if_exists: bool = False
    """IF EXISTS: dropping what is not there does nothing, so a file that drops stays
    idempotent; without it that is an error."""


@dataclass(frozen=True, slots=True)
class ErrorQueueDef:
    """``SET ERRORQUEUE q``: the file's error queue, for rules and queues that name none."""

    queue: str
    line: int


Statement: TypeAlias = QueueDef | PropertyDef | SlicingDef | RuleDef | Drop | ErrorQueueDef


@dataclass(frozen=True, slots=True)
class Application:
    """Everything applied so far, by name (statement order kept in ``rules``)."""

    queues: dict[str, QueueDef] = field(default_factory=dict)
    properties: dict[str, PropertyDef] = field(default_factory=dict)
    slicings: dict[str, SlicingDef] = field(default_factory=dict)
    rules: dict[str, RuleDef] = field(default_factory=dict)
    error_queue: str | None = None
