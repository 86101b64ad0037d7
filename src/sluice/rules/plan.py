"""An application compiled for one database: per processed queue, one SELECT that
evaluates every rule of a batch, and what to do with its columns.

A queue is processed by the rules engine when rules are for it, or for a slicing
on a property it has. Each rule expression becomes a column of the queue's
evaluation SELECT over the triggering message ``m``, in the backend's dialect, its
constants bound as parameters; ``now`` is bound at each run. A queue whose rules
read no relation it writes and no slice, and resets none, is evaluated a batch at a
time (one SELECT, one insert of what it produces): the outcome cannot depend on the
order. A queue whose rules read or reset only slices is evaluated in waves: the
messages of a batch that share a slice go to successive waves, each wave one SELECT
that sees the joins and resets of the waves before it, so every message sees what
the earlier ones did to its slices, as one at a time would. Only a queue whose rules
read a queue they write into, or reset a slice named by an expression, is evaluated
a message at a time. Each way, one transaction per batch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sluice.errors import ConfigurationError, ExpressionError
from sluice.expr import Node, Scope, Type, builds_xml, parse
from sluice.expr.check import Relations, slice_key
from sluice.expr.coercion import cast_to
from sluice.expr.nodes import Path
from sluice.expr.sql import RelationSource
from sluice.rules.check import rules_of
from sluice.rules.model import (
    PROPERTY_TYPES,
    SYSTEM_PROPERTIES,
    Application,
    Enqueue,
    Expr,
    QueueDef,
    Reset,
    RuleDef,
)
from sluice.rules.placed import expression_error

__all__ = [
    "SYSTEM_ERRORS",
    "BodyKind",
    "Join",
    "PlannedBranch",
    "PlannedEnqueue",
    "PlannedReset",
    "PlannedRule",
    "QueuePlan",
    "RuleCompilers",
    "compile_application",
    "processed_queues",
    "split_waves",
]

SYSTEM_ERRORS = "sluice_rule_errors"
"""The error queue of last resort: for failures no rule, queue or file names one for."""

BodyKind = Literal["json", "xml", "text", "value", "same", "scalar"]
"""How a column becomes a body: a JSON object or array, XML text, text, a JSON scalar,
the triggering message's own body (``ENQUEUE body``), or a JSON value of unknown type
(read through a one-element array)."""


@dataclass(frozen=True, slots=True)
class PlannedEnqueue:
    queue: str
    body: int | None
    """The column of the body (None: the triggering message's own body)."""
    kind: BodyKind
    properties: tuple[tuple[str, int], ...]
    """(property, its column) set by WITH."""
    line: int
    node: Node | None = None
    """The body's expression: a JSON object's, or the path of a JSON value's (the SQL
    enqueue reads computed properties of the made message off the trigger through it)."""


@dataclass(frozen=True, slots=True)
class PlannedReset:
    slicing: str
    key: int
    """The column of the slice's key, as text."""


@dataclass(frozen=True, slots=True)
class PlannedBranch:
    condition: int | None
    actions: tuple[PlannedEnqueue | PlannedReset, ...]


@dataclass(frozen=True, slots=True)
class PlannedRule:
    rule: RuleDef
    slicing: str | None
    key: int | None
    """For a rule for a slicing: the column of the message's slice key (NULL: the
    message is in no slice of it, and the rule does not run)."""
    branches: tuple[PlannedBranch, ...]


@dataclass(frozen=True, slots=True)
class Join:
    """The slices a processed message joins: one per slicing on a property it has."""

    slicing: str
    key_sql: str
    params: Mapping[str, Any]


@dataclass(slots=True)
class QueuePlan:
    """How the rules engine processes one queue."""

    definition: QueueDef
    queue_id: int
    rules: list[PlannedRule] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    """SQL of each evaluated column, in order (the SELECT has id, properties and the
    body's three columns before them)."""
    params: dict[str, Any] = field(default_factory=dict)
    joins: list[Join] = field(default_factory=list)
    sequential: bool = False
    """The outcome may depend on the order of a batch's messages (rules read slices or
    queues they write, or reset slices): evaluated in waves or a message at a time,
    never by one SQL enqueue for the batch."""
    waves: tuple[Join, ...] | None = None
    """For a sequential queue evaluated in waves: the slices that order them (messages
    sharing a key of one go to successive waves); None: a message at a time."""
    locks: set[int] = field(default_factory=set)
    """What the batch excludes other engines from while it runs (sequential queues):
    the queue itself, and each slicing whose slices its rules read or reset, since
    a slice spans queues (ids of queues; a slicing's is negative)."""
    reads: set[str] = field(default_factory=set)
    """The queues its rules read (``queue('q')``)."""
    removes: bool = False
    """A processed message is removed at once (rules_remove), not kept (rules_done):
    nothing could see it kept (see compile_application)."""

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def echo(self) -> bool:
        return self.definition.kind == "echo"

    def columns_sql(self, omit: frozenset[int] = frozenset()) -> str:
        """The columns of the evaluation SELECT; those in ``omit`` NULL (not needed)."""
        return "".join(
            f", {'NULL' if n in omit else sql} AS c{n}" for n, sql in enumerate(self.columns)
        )


class RuleCompilers(Protocol):
    """What compiling a plan needs of an engine: its compiler of rule expressions and where
    its relations are. A backend (``RuleStore``) for the database's own plans; Spark's
    (sluice.spark.rules) for the same plans' columns in Spark SQL."""

    def rules_compiler(
        self, relations: RelationSource | None, prefix: str = ..., alias: str = ...
    ) -> Any: ...

    def rules_relations(
        self, queue_ids: Mapping[str, int], slicing: str | None
    ) -> RelationSource: ...


def processed_queues(app: Application) -> list[QueueDef]:
    """The queues the rules engine consumes, highest PRIORITY first: those with rules,
    and echo queues."""
    found = [q for q in app.queues.values() if q.kind == "echo" or rules_of(app, q.name)]
    return sorted(found, key=lambda q: -q.priority)


def compile_application(
    app: Application, backend: RuleCompilers, queue_ids: Mapping[str, int]
) -> list[QueuePlan]:
    """Every processed queue's plan; ConfigurationError if a queue is missing."""
    plans = []
    for definition in processed_queues(app):
        if definition.name not in queue_ids:
            raise ConfigurationError(
                f"queue {definition.name!r} of the rules application does not exist; apply "
                "the application again"
            )
        plans.append(_plan(app, backend, queue_ids, definition))
    # A queue without retention keeps a processed message only for a slice or a rule
    # that reads the queue; with neither, it is removed as it is processed (one write
    # instead of two, as a consumer's ack removes its message).
    read = {name for plan in plans for name in plan.reads}
    for plan in plans:
        if plan.definition.retention == 0 and not plan.joins and plan.name not in read:
            plan.removes = True
    return plans


class _Recording(RelationSource):
    """A RelationSource that remembers the relations expressions read."""

    def __init__(self, inner: RelationSource) -> None:
        self.inner = inner
        self.queues: set[str] = set()
        self.slice = False

    def relation(
        self,
        kind: Literal["queue", "slice"],
        queue: str | None,
        alias: str,
        key: str | None,
        bind: Callable[[Any], str],
    ) -> tuple[str, str]:
        if kind == "slice":
            self.slice = True
        elif queue is not None:
            self.queues.add(queue)
        return self.inner.relation(kind, queue, alias, key, bind)

    def queue_name(self, alias: str) -> str:
        return self.inner.queue_name(alias)


def _plan(
    app: Application, backend: RuleCompilers, queue_ids: Mapping[str, int], definition: QueueDef
) -> QueuePlan:
    plan = QueuePlan(definition, queue_ids[definition.name])
    types: dict[str, Type] = {n: PROPERTY_TYPES[p.type] for n, p in app.properties.items()}
    types.update(SYSTEM_PROPERTIES)
    for on in app.slicings.values():
        prop = app.properties[on.property]
        if definition.name in prop.values:
            compiler = backend.rules_compiler(None, prefix=f"j{len(plan.joins)}_")
            sql = compiler.compile(slice_key(prop.name, PROPERTY_TYPES[prop.type]))
            plan.joins.append(Join(on.name, sql, dict(compiler.params)))
    reads = _Reads()
    for n, rule in enumerate(rules_of(app, definition.name)):
        _rule(app, backend, queue_ids, types, plan, n, rule, reads)
    _order(app, plan, reads)
    plan.reads = reads.queues
    return plan


@dataclass(slots=True)
class _Reads:
    """What a queue's rules read and reset: how much its batch's order matters."""

    queues: set[str] = field(default_factory=set)
    slicings: set[str] = field(default_factory=set)
    """Slicings whose slices the rules read or reset by the message's own key."""
    keyed_reset: bool = False
    """A RESET with a KEY expression: which slice it empties only evaluation tells."""


def _order(app: Application, plan: QueuePlan, reads: _Reads) -> None:
    """Set how ``plan``'s batches are evaluated: at once, in waves, or one by one."""
    written = {
        a.queue
        for r in plan.rules
        for b in r.branches
        for a in b.actions
        if isinstance(a, PlannedEnqueue)
    }
    # Error messages are written too: a rule reading an error queue sees them.
    written |= {r.rule.error_queue for r in plan.rules if r.rule.error_queue}
    written |= {q for q in (plan.definition.error_queue, app.error_queue) if q}
    written.add(SYSTEM_ERRORS)
    if not (reads.slicings or reads.keyed_reset or reads.queues & written):
        return  # what the rules read, no message of the batch changes
    plan.sequential = True
    plan.locks.add(plan.queue_id)
    plan.locks.update(slicing_lock(name) for name in reads.slicings)
    if not (reads.keyed_reset or reads.queues & written):
        plan.waves = tuple(j for j in plan.joins if j.slicing in reads.slicings)


def _rule(  # noqa: PLR0917  (one rule's part of its queue's plan)
    app: Application,
    backend: RuleCompilers,
    queue_ids: Mapping[str, int],
    types: dict[str, Type],
    plan: QueuePlan,
    n: int,
    rule: RuleDef,
    reads: _Reads,
) -> None:
    slicing = app.slicings.get(rule.target)
    prop = None if slicing is None else app.properties[slicing.property]
    relations = _Recording(
        backend.rules_relations(queue_ids, None if slicing is None else slicing.name)
    )
    scope = Scope(
        types,
        relations=Relations(
            queues=frozenset(app.queues),
            slicing=None if slicing is None else slicing.name,
            slice_type=None if prop is None else PROPERTY_TYPES[prop.type],
            slice_property=None if prop is None else prop.name,
            properties=types,
            trigger_queue=plan.name,
        ),
    )
    compiler = backend.rules_compiler(relations, prefix=f"r{n}_")
    parsed = _Parser(scope, rule)

    def node_column(node: Node) -> int:
        return _add(plan, compiler.compile(node))

    key = None if prop is None else node_column(slice_key(prop.name, PROPERTY_TYPES[prop.type]))
    branches = []
    for branch in rule.branches:
        condition = (
            None
            if branch.condition is None
            else node_column(parsed(branch.condition, "boolean", "IF condition"))
        )
        actions: list[PlannedEnqueue | PlannedReset] = []
        for action in branch.actions:
            if isinstance(action, Enqueue):
                actions.append(_enqueue(app, action, parsed, node_column))
            else:
                # A reset changes what later messages see (sequential: see below).
                actions.append(_reset(app, action, rule, parsed, node_column))
        branches.append(PlannedBranch(condition, tuple(actions)))
    plan.rules.append(
        PlannedRule(rule, None if slicing is None else slicing.name, key, tuple(branches))
    )
    plan.params.update(compiler.params)
    reads.queues |= relations.queues
    if relations.slice and slicing is not None:
        reads.slicings.add(slicing.name)
    for b in rule.branches:
        for a in b.actions:
            if isinstance(a, Reset):
                reads.slicings.add(a.slicing or rule.target)
                reads.keyed_reset |= a.key is not None


def slicing_lock(name: str) -> int:
    """A slicing's lock key: negative, so that no queue id (positive) is the same."""
    return -1 - (zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF)


def _add(plan: QueuePlan, sql: str) -> int:
    plan.columns.append(sql)
    return len(plan.columns) - 1


class _Parser:
    """Checks a rule's expressions against its scope; errors name the rule and place the
    mistake in the file (``sluice.rules.placed``)."""

    def __init__(self, scope: Scope, rule: RuleDef) -> None:
        self.scope = scope
        self.rule = rule

    def __call__(
        self, expr: Expr, want: Type | None, what: str, around: tuple[str, str] = ("", "")
    ) -> Node:
        """``expr`` (inside ``around``'s text before and after it) parsed; ``what`` names
        it in errors ("IF condition")."""
        before, after = around
        try:
            return parse(before + expr.text + after, self.scope, want=want)
        except ExpressionError as exc:
            where = f"rule {self.rule.name!r} {what}"
            raise expression_error(expr, exc, where, offset=len(before)) from exc


def _enqueue(
    app: Application, action: Enqueue, parsed: _Parser, node_column: Callable[[Node], int]
) -> PlannedEnqueue:
    line = action.body.line
    properties = []
    for name, expr in action.properties:
        prop = app.properties.get(name)
        want: Type | None = (
            PROPERTY_TYPES[prop.type] if prop is not None else SYSTEM_PROPERTIES.get(name)
        )
        properties.append((name, node_column(parsed(expr, want, f"WITH {name}"))))
    if action.body.text.strip().lower() == "body":
        return PlannedEnqueue(action.queue, None, "same", tuple(properties), line)
    node = parsed(action.body, None, "ENQUEUE body")
    kind: BodyKind
    if node.type == "json":
        kind = "json"
    elif builds_xml(node):
        kind = "xml"
    elif node.type == "text":
        kind = "text"
    elif isinstance(node, Path) or node.type == "any":
        # A JSON value whose type the data decides: read as a one-element array.
        kind = "scalar"
        shape: Node | None = node if isinstance(node, Path) else None
        node = parsed(action.body, "json", "ENQUEUE body", ("json_array(", ")"))
        return PlannedEnqueue(action.queue, node_column(node), kind, tuple(properties), line, shape)
    else:
        kind = "value"
    shape = node if kind == "json" else None
    return PlannedEnqueue(action.queue, node_column(node), kind, tuple(properties), line, shape)


def _reset(
    app: Application,
    action: Reset,
    rule: RuleDef,
    parsed: _Parser,
    node_column: Callable[[Node], int],
) -> PlannedReset:
    name = action.slicing or rule.target
    slicing = app.slicings[name]
    prop = app.properties[slicing.property]
    kind = PROPERTY_TYPES[prop.type]
    if action.key is None:
        return PlannedReset(name, node_column(slice_key(prop.name, kind)))
    return PlannedReset(name, node_column(cast_to(parsed(action.key, kind, "RESET KEY"), "text")))


def split_waves(ids: Sequence[int], keys: Mapping[int, tuple[Any, ...]]) -> list[list[int]]:
    """``ids`` in waves: each message one wave after the last earlier one it shares a
    key with (None shares nothing), so a wave holds at most one message per slice."""
    waves: list[list[int]] = []
    last: dict[tuple[int, Any], int] = {}
    for ref in ids:
        found = [(n, k) for n, k in enumerate(keys.get(ref, ())) if k is not None]
        wave = max((last[f] + 1 for f in found if f in last), default=0)
        for f in found:
            last[f] = wave
        if wave == len(waves):
            waves.append([])
        waves[wave].append(ref)
    return waves
