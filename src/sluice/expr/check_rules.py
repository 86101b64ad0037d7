"""What rules (sluice.rules) may write beyond a selection: the triggering message's
rule properties, the engine clock, the relations ``queue('q')`` and ``slice()`` read
in EXISTS, aggregates and subqueries of one value, and constructors of new bodies
(JSON objects and arrays, XML elements and nodes selected by XPath).

``sluice.expr.check`` admits these only when its Scope has ``relations``; outside
rules each is refused, saying so.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from sqlglot import exp

from sluice.errors import ExpressionError
from sluice.expr import syntax
from sluice.expr.coercion import as_type, cast_to, text_of
from sluice.expr.nodes import (
    COLUMNS,
    Coerce,
    Column,
    IsNull,
    JsonArray,
    JsonObject,
    Lit,
    Logic,
    Node,
    Param,
    Path,
    Relation,
    Step,
    Subquery,
    Type,
    XmlConcat,
    XmlElement,
    XmlForest,
    XmlNodes,
    builds_xml,
)
from sluice.expr.scope import Relations
from sluice.expr.syntax import quoted

__all__ = ["RULE_CALLS", "Relations", "RulesChecker", "slice_key"]


def slice_key(property: str, type: Type) -> Node:
    """The slice key of the message an expression is about, as text: its rule property
    ``property`` of ``type`` read from ``props`` and written as CAST(... AS TEXT)
    writes it, so that 1 and 1.0 are one key (``'1'``) on every engine. The storage
    compiles this one node when it files a message into a slice and when a rule
    looks its slice up, so both always agree."""
    if type not in ("text", "number", "boolean"):
        raise ExpressionError(f"a slicing's property is text, a number or a boolean, not {type}")
    return cast_to(Coerce(Path("props", (property,)), type), "text")


RULE_CALLS: Final = frozenset(
    {
        "property",
        "slicekey",
        "queue",
        "slice",
        "json_array",
        "xmlforest",
        "xmlconcat",
        "xmlattributes",
        "xpath_nodes",
    }
)
"""Functions only rules have (and json_object, xmlelement, which sqlglot parses itself)."""

_ROW_FIELDS: Final[Mapping[str, Type]] = {**COLUMNS, "id": "number", "queue": "text"}
_ROW_AGGREGATES: Final = ("count", "sum", "min", "max", "avg")
_SELECT_PARTS: Final = frozenset({"expressions", "from", "from_", "where", "order", "limit"})
_CLAUSES: Final[Mapping[str, str]] = {
    "group": "GROUP BY",
    "having": "HAVING",
    "joins": "a second relation (JOIN or a comma)",
    "distinct": "DISTINCT",
    "with": "WITH",
    "with_": "WITH",
    "offset": "OFFSET",
    "windows": "WINDOW",
    "qualify": "QUALIFY",
    "laterals": "LATERAL",
}
_MAX_KEYS: Final = 50  # PostgreSQL's functions take at most 100 arguments
_MAX_ITEMS: Final = 100
# An XML name without a namespace prefix (XML 1.0, fifth edition: NCName).
_NAME_START: Final = (
    "A-Z_a-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_XML_NAME: Final = re.compile(
    f"[{_NAME_START}][{_NAME_START}\\-.0-9\u00b7\u0300-\u036f\u203f-\u2040]*"
)


class RulesChecker(ABC):
    """The rules' part of the checker (``sluice.expr.check._Checker`` is one)."""

    def __init__(self, relations: Relations | None, properties: Mapping[str, Type]) -> None:
        self.relations = relations
        self.declared = properties
        self.vars: list[str] = []
        """The variables of the enclosing lambdas."""
        self.rows: dict[str, str] = {}
        """The aliases of the enclosing subqueries' relations -> their ``Relation.row``."""
        self._relations_made = 0

    @abstractmethod
    def node(self, e: exp.Expression, depth: int) -> Node: ...

    @abstractmethod
    def typed(self, e: exp.Expression, want: Type, depth: int) -> Node: ...

    def rules(self, e: exp.Expression, what: str) -> Relations:
        """The rule's relations; ExpressionError saying ``what`` is for rules outside them."""
        if self.relations is None:
            raise ExpressionError(
                f"{quoted(e)!r}: {what} can only be used in rules (sluice.rules), "
                "not in selections, orderings, priority functions or declared properties"
            )
        return self.relations

    # --- the triggering message --------------------------------------------------------
    def rule_call(
        self, name: str, args: list[exp.Expression], e: exp.Expression, depth: int
    ) -> Node:
        relations = self.rules(e, f"{name}()")
        if name == "property":
            prop = _text_argument(args, e, "property('name')")
            if prop not in relations.properties:
                declared = ", ".join(sorted(relations.properties)) or "none"
                raise ExpressionError(
                    f"{quoted(e)!r}: property {prop!r} is not declared (declared: {declared})"
                )
            return Coerce(Path("props", (prop,)), relations.properties[prop])
        if name == "slicekey":
            if args:
                raise ExpressionError(f"{quoted(e)!r}: slicekey takes no arguments")
            prop, kind = self.slicing(e)
            return Coerce(Path("props", (prop,)), kind)
        if name in ("queue", "slice"):
            raise ExpressionError(
                f"{quoted(e)!r} is a relation, not a value: read it in EXISTS (SELECT 1 FROM "
                f"{quoted(e)} AS a WHERE ...), in (SELECT count(*) FROM {quoted(e)} AS a ...) "
                f"or as count({quoted(e)})"
            )
        if name == "json_array":
            return self.json_array(args, e, depth)
        if name == "xmlforest":
            return XmlForest(self.xml_named(args, e, "xmlforest", depth, attribute=False))
        if name == "xmlconcat":
            self.constructing(e)
            if not args:
                raise ExpressionError(f"{quoted(e)!r}: xmlconcat needs at least one argument")
            return XmlConcat(tuple(self.xml_content(a, depth) for a in args))
        if name == "xmlattributes":
            raise ExpressionError(
                f"{quoted(e)!r}: xmlattributes is written inside xmlelement, right after "
                "the name: xmlelement(name e, xmlattributes(v AS a), ...)"
            )
        return self.xpath_nodes(args, e)

    def trigger_name(self, head: str) -> Node | None:
        """A name rules give the triggering message besides a message's own (``queue``),
        or None."""
        queue = None if self.relations is None else self.relations.trigger_queue
        return Lit(queue, "text") if head == "queue" and queue is not None else None

    def trigger_names(self) -> tuple[str, ...]:
        """The names ``trigger_name`` knows here (for a mistyped name's hint)."""
        return ("queue",) if self.relations and self.relations.trigger_queue else ()

    def now(self) -> Node:
        """now() in rules: the engine clock, bound as the parameter ``now``."""
        return Param("now", "number")

    def slicing(self, e: exp.Expression) -> tuple[str, Type]:
        relations = self.rules(e, "slice() and slicekey()")
        if relations.slicing is None:
            raise ExpressionError(
                f"{quoted(e)!r}: slice() and slicekey() are only for rules FOR a slicing; "
                "this rule is for a queue"
            )
        assert relations.slice_property is not None
        assert relations.slice_type is not None
        return relations.slice_property, relations.slice_type

    def props(self, path: Path) -> Node:
        """``props.p`` of a declared rule property, read as its declared type."""
        declared = self.relations.properties if self.relations is not None else {}
        if path.root == "props" and len(path.steps) == 1 and path.steps[0] in declared:
            return Coerce(path, declared[path.steps[0]])  # type: ignore[index]
        return path

    # --- relations ---------------------------------------------------------------------
    def row_reference(self, e: exp.Expression, alias: str, steps: tuple[Step, ...]) -> Node:
        """``a.body...``, ``a.props...`` or ``a.<field>`` of a relation's row ``a``."""
        row = self.rows[alias]
        if steps and steps[0] in ("body", "props"):
            check_keys(e, steps[1:])
            return self.props(Path(steps[0], steps[1:], row=row))  # type: ignore[arg-type]
        if len(steps) == 1 and steps[0] in _ROW_FIELDS:
            return Column(str(steps[0]), _ROW_FIELDS[steps[0]], row)  # type: ignore[index]
        raise ExpressionError(
            f"{quoted(e)!r}: {alias!r} is a row of a relation; read {alias}.body.<path>, "
            f"{alias}.props.<name>, or one of its fields: {', '.join(_ROW_FIELDS)}"
        )

    def body_of(self, arg: exp.Expression) -> tuple[bool, str | None]:
        """Whether ``arg`` is ``body`` or, in a subquery, ``a.body``; and whose (a row)."""
        parts = syntax.parts_or_none(arg)
        if parts == ["body"]:
            return True, None
        if parts and len(parts) == 2 and parts[1] == "body" and parts[0] in self.rows:
            return True, self.rows[str(parts[0])]
        return False, None

    def exists(self, e: exp.Exists, depth: int) -> Node:
        """EXISTS (SELECT ... FROM rel [AS a] [WHERE cond]); the select list is not read."""
        self.rules(e, "EXISTS (SELECT ...) over a relation")
        select = _select(e.this, e)
        _no_order(select, e, "EXISTS")
        with self.relation(select, e) as relation:
            where = self.where(select, depth)
        return Subquery("exists", relation, None, where, (), "boolean")

    def subquery(self, e: exp.Subquery, depth: int) -> Node:
        """(SELECT aggregate FROM rel ...) or (SELECT x FROM rel ... ORDER BY k LIMIT 1)."""
        self.rules(e, "a subquery over a relation")
        select = _select(e.this, e)
        if len(select.expressions) != 1:
            raise ExpressionError(f"{quoted(e)!r}: a subquery gives one value; select one")
        item = select.expressions[0]
        if isinstance(item, exp.Alias):
            item = item.this
        with self.relation(select, e) as relation:
            where = self.where(select, depth)
            if _row_aggregate(item):
                _no_order(select, e, "an aggregate")
                return self.row_aggregate(item, relation, where, depth)
            value = _scalar(self.node(item, depth), e)
            order = self.order(select, e, depth)
        return Subquery("first", relation, value, where, order, value.type)

    def count_of(self, arg: exp.Expression, e: exp.Expression) -> Node | None:
        """count(queue('q')) and count(slice()): how many messages the relation has."""
        if not (isinstance(arg, exp.Anonymous) and arg.name.lower() in ("queue", "slice")):
            return None
        self.rules(e, f"count({arg.name.lower()}())")
        return Subquery("count", self.relation_of(arg, None, e), None, None, (), "number")

    @contextmanager
    def relation(self, select: exp.Select, e: exp.Expression) -> Iterator[Relation]:
        """The relation a subquery reads FROM, its alias naming its rows meanwhile."""
        source = select.args.get("from_") or select.args.get("from")
        table = source.this if isinstance(source, exp.From) else None
        call = table.this if isinstance(table, exp.Table) else None
        if not (
            isinstance(table, exp.Table)
            and isinstance(call, exp.Anonymous)
            and call.name.lower() in ("queue", "slice")
            and all(k in ("this", "alias") for k, v in table.args.items() if v)
        ):
            raise ExpressionError(
                f"{quoted(e)!r}: a subquery reads FROM queue('name') or FROM slice(), "
                "and no other table"
            )
        alias = table.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            raise ExpressionError(f"{quoted(e)!r}: a relation's alias names no columns")
        name = alias.name if alias is not None else None
        if name:
            self.new_name(name, e)
        relation = self.relation_of(call, name, e)
        if name:
            self.rows[name] = relation.row
        try:
            yield relation
        finally:
            if name:
                del self.rows[name]

    def relation_of(self, call: exp.Anonymous, alias: str | None, e: exp.Expression) -> Relation:
        relations = self.rules(e, f"{call.name.lower()}()")
        kind = call.name.lower()
        self._relations_made += 1
        row = f"{alias or kind}#{self._relations_made}"
        if kind == "queue":
            queue = _text_argument(list(call.expressions), call, "queue('name')")
            if queue not in relations.queues:
                raise ExpressionError(f"{quoted(e)!r}: queue {queue!r} is not declared")
            return Relation("queue", row, queue=queue)
        if call.expressions:
            raise ExpressionError(f"{quoted(e)!r}: slice() takes no arguments")
        prop, kind_of_key = self.slicing(e)
        return Relation("slice", row, key=slice_key(prop, kind_of_key))

    def new_name(self, name: str, e: exp.Expression) -> None:
        """Refuse an alias or a lambda variable that would hide another name."""
        if name in ("body", "props") or name in COLUMNS or name in self.declared:
            raise ExpressionError(f"{quoted(e)!r}: the name {name!r} hides a field; rename it")
        if name in self.vars or name in self.rows:
            raise ExpressionError(
                f"{quoted(e)!r}: {name!r} already names a lambda's element or an enclosing "
                "subquery's relation; give this one another name"
            )

    def where(self, select: exp.Select, depth: int) -> Node | None:
        where = select.args.get("where")
        return self.typed(where.this, "boolean", depth) if where is not None else None

    def row_aggregate(
        self, call: exp.Anonymous, relation: Relation, where: Node | None, depth: int
    ) -> Node:
        op = call.name.lower()
        args = list(call.expressions)
        if len(args) != 1 or isinstance(args[0], exp.Distinct):
            raise ExpressionError(
                f"{quoted(call)!r}: {op} takes one value (count also *), without DISTINCT"
            )
        if isinstance(args[0], exp.Star):
            if op != "count":
                raise ExpressionError(f"{quoted(call)!r}: only count takes *")
            return Subquery("count", relation, None, where, (), "number")
        value = _scalar(self.node(args[0], depth), call)
        if op == "count":  # the rows where the value is not NULL
            present = IsNull(value, negated=True)
            kept = present if where is None else Logic("and", (where, present))
            return Subquery("count", relation, None, kept, (), "number")
        kind: Type = "text" if op in ("min", "max") and value.type == "text" else "number"
        return Subquery(op, relation, as_type(value, kind, quoted(call)), where, (), kind)  # type: ignore[arg-type]

    def order(
        self, select: exp.Select, e: exp.Expression, depth: int
    ) -> tuple[tuple[Node, bool], ...]:
        order, limit = select.args.get("order"), select.args.get("limit")
        if order is None or not _is_one(limit):
            raise ExpressionError(
                f"{quoted(e)!r}: a subquery of one value needs ORDER BY ... LIMIT 1, so that "
                "the row it reads is determined (or select count, sum, min, max or avg)"
            )
        keys: list[tuple[Node, bool]] = []
        for ordered in order.expressions:
            if ordered.args.get("nulls_first"):
                raise ExpressionError(
                    f"{quoted(ordered)!r}: NULLS FIRST cannot be used; NULL values come last"
                )
            key = self.node(ordered.this, depth)
            if key.type == "json" or (key.type == "any" and not isinstance(key, Path)):
                raise ExpressionError(f"{quoted(ordered)!r}: order by a number or text; CAST it")
            keys.append((key, bool(ordered.args.get("desc"))))
        return tuple(keys)

    # --- new bodies --------------------------------------------------------------------
    def constructing(self, e: exp.Expression) -> None:
        if self.vars:
            raise ExpressionError(
                f"{quoted(e)!r}: bodies are not built inside an array function's lambda"
            )

    def json_object(self, e: exp.JSONObject, depth: int) -> Node:
        self.rules(e, "json_object()")
        self.constructing(e)
        extra = [k for k, v in e.args.items() if v and k != "expressions"]
        if extra:
            raise ExpressionError(
                f"{quoted(e)!r}: json_object takes keys and values only "
                "(no ABSENT ON NULL, WITH UNIQUE KEYS or RETURNING)"
            )
        items: dict[str, Node] = {}
        for pair in e.expressions:
            key = pair.this if isinstance(pair, exp.JSONKeyValue) else None
            if not (isinstance(key, exp.Literal) and key.is_string):
                raise ExpressionError(
                    f"{quoted(e)!r}: write json_object('key', value, ...) with quoted keys"
                )
            if key.this in items:
                raise ExpressionError(f"{quoted(e)!r}: the key {key.this!r} is given twice")
            items[key.this] = self.json_value(pair.expression, depth)
        if len(items) > _MAX_KEYS:
            raise ExpressionError(
                f"{quoted(e)!r}: json_object takes at most {_MAX_KEYS} keys; nest objects"
            )
        return JsonObject(tuple(items.items()))

    def json_array(self, args: list[exp.Expression], e: exp.Expression, depth: int) -> Node:
        self.constructing(e)
        if len(args) > _MAX_ITEMS:
            raise ExpressionError(
                f"{quoted(e)!r}: json_array takes at most {_MAX_ITEMS} values; nest arrays"
            )
        return JsonArray(tuple(self.json_value(a, depth) for a in args))

    def json_value(self, e: exp.Expression, depth: int) -> Node:
        node = self.node(e, depth)
        # A JSON value of the message goes in as it is (object, array or scalar).
        if node.type == "any" and not isinstance(node, Path | Lit):
            raise ExpressionError(f"{quoted(e)!r}: cannot tell what JSON value this is; CAST it")
        return node

    def xml_element(self, e: exp.XMLElement, depth: int) -> Node:
        self.rules(e, "xmlelement()")
        self.constructing(e)
        if e.args.get("evalname"):
            raise ExpressionError(f"{quoted(e)!r}: the element's name is written, not computed")
        name = _xml_name(e.this.name if isinstance(e.this, exp.Expression) else "", e)
        attributes: tuple[tuple[str, Node], ...] = ()
        content: list[Node] = []
        for i, arg in enumerate(e.expressions or []):
            if isinstance(arg, exp.Anonymous) and arg.name.lower() == "xmlattributes":
                if i:
                    raise ExpressionError(
                        f"{quoted(e)!r}: xmlattributes comes right after the name, once"
                    )
                attributes = self.xml_named(
                    arg.expressions, arg, "xmlattributes", depth, attribute=True
                )
            else:
                content.append(self.xml_content(arg, depth))
        return XmlElement(name, attributes, tuple(content))

    def xml_named(
        self,
        args: list[exp.Expression],
        e: exp.Expression,
        what: str,
        depth: int,
        *,
        attribute: bool,
    ) -> tuple[tuple[str, Node], ...]:
        self.constructing(e)
        if not args:
            raise ExpressionError(f"{quoted(e)!r}: {what} needs at least one value AS name")
        items: dict[str, Node] = {}
        for arg in args:
            if not isinstance(arg, exp.Alias):
                raise ExpressionError(f"{quoted(e)!r}: write {what}(value AS name, ...)")
            name = _xml_name(arg.alias, e)
            if name in items:
                raise ExpressionError(f"{quoted(e)!r}: the name {name!r} is given twice")
            value = self.xml_content(arg.this, depth)
            if attribute and builds_xml(value):
                raise ExpressionError(f"{quoted(arg)!r}: an attribute's value is text, not XML")
            items[name] = value
        return tuple(items.items())

    def xml_content(self, e: exp.Expression, depth: int) -> Node:
        """XML as it is, or any other value as text (escaped when compiled)."""
        node = self.node(e, depth)
        if builds_xml(node):
            return node
        if node.type == "json":
            raise ExpressionError(f"{quoted(e)!r}: an object or array is no XML content")
        return text_of(node)

    def xpath_nodes(self, args: list[exp.Expression], e: exp.Expression) -> Node:
        self.constructing(e)
        from sluice.expr.xml import check_node_xpath  # noqa: PLC0415  (lxml is optional)

        is_body, row = self.body_of(args[0]) if len(args) == 2 else (False, None)
        path = args[1] if is_body else None
        if not (isinstance(path, exp.Literal) and path.is_string):
            raise ExpressionError(
                f"{quoted(e)!r}: write xpath_nodes(body, '/an/xpath') (or a.body for a "
                "relation's row a), with the XPath quoted"
            )
        check_node_xpath(path.this)
        return XmlNodes(path.this, row)


def check_keys(e: exp.Expression, steps: tuple[Step, ...]) -> None:
    for step in steps:
        # SQLite matches a key as written in the stored JSON, where such a key
        # can be spelt neither quoted nor bare (see sluice.expr.sqlite._label).
        if isinstance(step, str) and '"' in step and ("." in step or "[" in step):
            raise ExpressionError(
                f"{quoted(e)!r}: a key holding both a double quote and '.' or '[' "
                "cannot be used in a path"
            )


def _text_argument(args: list[exp.Expression], e: exp.Expression, form: str) -> str:
    if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise ExpressionError(f"{quoted(e)!r}: write {form}, with the name quoted")
    return str(args[0].this)


def _select(query: exp.Expression, e: exp.Expression) -> exp.Select:
    if not isinstance(query, exp.Select):
        raise ExpressionError(
            f"{quoted(e)!r}: a subquery is one SELECT ... FROM queue('name') or slice()"
        )
    for key, value in query.args.items():
        if value and key not in _SELECT_PARTS:
            clause = _CLAUSES.get(key, key.upper())
            raise ExpressionError(
                f"{quoted(e)!r}: {clause} cannot be used in a subquery over a relation"
            )
    return query


def _no_order(select: exp.Select, e: exp.Expression, what: str) -> None:
    if select.args.get("order") or select.args.get("limit"):
        raise ExpressionError(
            f"{quoted(e)!r}: ORDER BY and LIMIT choose the row of a subquery of one value; "
            f"{what} reads every row"
        )


def _is_one(limit: exp.Expression | None) -> bool:
    if not isinstance(limit, exp.Limit) or any(
        v for k, v in limit.args.items() if k != "expression"
    ):
        return False
    value = limit.expression
    return isinstance(value, exp.Literal) and not value.is_string and value.this == "1"


def _row_aggregate(item: exp.Expression) -> bool:
    """Whether a subquery selects an aggregate over its rows (count(queue('q')) is a value)."""
    if not (isinstance(item, exp.Anonymous) and item.name.lower() in _ROW_AGGREGATES):
        return False
    args = item.expressions
    return not (
        len(args) == 1
        and isinstance(args[0], exp.Anonymous)
        and args[0].name.lower() in ("queue", "slice")
    )


def _scalar(node: Node, e: exp.Expression) -> Node:
    if node.type == "json":
        raise ExpressionError(f"{quoted(e)!r}: a subquery's value is a number, text or boolean")
    return node


def _xml_name(name: str, e: exp.Expression) -> str:
    if not _XML_NAME.fullmatch(name):
        raise ExpressionError(
            f"{quoted(e)!r}: {name!r} is not an XML name: a letter or '_' first, then "
            "letters, digits, '_', '-' or '.' (no ':': namespaces are not supported)"
        )
    return name
