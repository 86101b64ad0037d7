"""SQL for the forms only rules have: subqueries over ``queue('q')`` and ``slice()``,
now() of the engine clock, and new bodies built from JSON and XML constructors.

Relations come from the storage (``Source.relations``), so no table is named here.
XML is built as text by concatenation, with every name and value escaped the way
canonical XML (C14N) writes them, so SQLite, PostgreSQL and Python build the same
text; only nodes selected by XPath are serialised by each engine's own XML library.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Final, Literal

from sluice.errors import ExpressionError
from sluice.expr.nodes import (
    JsonArray,
    JsonObject,
    Node,
    Param,
    Path,
    Subquery,
    Type,
    XmlConcat,
    XmlElement,
    XmlForest,
    XmlNodes,
    builds_xml,
)
from sluice.expr.sql import RelationSource, SqlCompiler

__all__ = ["RulesSqlCompiler"]

# What canonical XML escapes: in text & < > and CR; in an attribute's value (always
# in double quotes) & < " and the white space a parser would otherwise normalise.
_TEXT_ESCAPES: Final = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), (13, "&#xD;"))
_ATTRIBUTE_ESCAPES: Final = (
    ("&", "&amp;"),
    ("<", "&lt;"),
    ('"', "&quot;"),
    (9, "&#x9;"),
    (10, "&#xA;"),
    (13, "&#xD;"),
)


class RulesSqlCompiler(SqlCompiler):
    """A SQL compiler that also compiles rules: the dialect says how it builds JSON,
    aggregates rows, selects XML nodes and spells a character."""

    # --- what each dialect provides --------------------------------------------------
    @abstractmethod
    def json_build(self, kind: Literal["object", "array"], args: list[str]) -> str:
        """A new JSON object (``args``: key, value, ...) or array, as JSON text."""

    @abstractmethod
    def json_item(self, sql: str, kind: Type) -> str:
        """A value of ``kind`` as ``json_build`` takes it (``json``: JSON text)."""

    @abstractmethod
    def json_raw(self, path: Path) -> str:
        """The JSON value at ``path`` as ``json_build`` takes it, whatever its JSON type."""

    @abstractmethod
    def json_text(self, path: Path) -> str:
        """The JSON value at ``path`` as JSON text (``'null'`` for JSON null, NULL where
        there is none): what a JSON value of a message, taken as it is, compiles to."""

    @abstractmethod
    def rows_aggregate(self, op: str, value: str) -> str:
        """count(*) (``value`` unused), or sum (0 over no rows), min, max, avg of ``value``."""

    @abstractmethod
    def xml_nodes(self, path: str, alias: str) -> str:
        """``xpath_nodes``: the nodes ``path`` selects in the XML body of ``alias``."""

    @abstractmethod
    def char(self, code: int) -> str:
        """The one-character text of the code point ``code``."""

    def parameter(self, name: str, kind: Type) -> str:
        """A value the runner binds by name (``now``)."""
        return self.placeholder(name)

    def row_id(self, alias: str) -> str:
        return f"{alias}.id"

    # --- the walk --------------------------------------------------------------------
    def rules_node(self, node: Node) -> str:
        if isinstance(node, Param):
            return self.parameter(node.name, node.type)
        if isinstance(node, Subquery):
            return self.subquery(node)
        if isinstance(node, JsonObject):
            args = [s for k, v in node.items for s in (self.literal(k, "text"), self.json_value(v))]
            return self.json_build("object", args)
        if isinstance(node, JsonArray):
            return self.json_build("array", [self.json_value(v) for v in node.items])
        if isinstance(node, XmlNodes):
            return self.xml_nodes(node.path, self.alias(node.row))
        return self.xml(node)

    def row_field(self, name: str, alias: str) -> str:
        return self.relations().queue_name(alias) if name == "queue" else self.row_id(alias)

    def relations(self) -> RelationSource:
        if self.source.relations is None:
            raise ExpressionError(
                "the expression reads queue() or slice(), which this compilation has no "
                "Source.relations for"
            )
        return self.source.relations

    def subquery(self, node: Subquery) -> str:
        relation = node.relation
        # The slice's key is the triggering message's: compiled outside the subquery.
        key = self.compile(relation.key) if relation.key is not None else None
        alias = self.new_alias("r")
        items, condition = self.relations().relation(
            relation.kind, relation.queue, alias, key, self.bind
        )
        self._rows[relation.row] = alias
        try:
            where = f"({condition})"
            if node.where is not None:
                where += f" AND {self.compile(node.where)}"
            rows = f"FROM {items} WHERE {where}"
            if node.op == "exists":
                return f"(EXISTS (SELECT 1 {rows}))"
            if node.op == "count":
                return f"(SELECT {self.rows_aggregate('count', '*')} {rows})"
            assert node.value is not None
            value = self.compile(node.value)
            if node.op == "first":
                return self.first(node, value, rows, alias)
            # The values are computed in a subquery of their own: an aggregate over a
            # value naming only the triggering message would otherwise belong to the
            # enclosing query, as SQL has it.
            x = f"{alias}_v.x"
            total = self.rows_aggregate(node.op, self.text_order(x) if node.type == "text" else x)
            return f"(SELECT {total} FROM (SELECT {value} AS x {rows}) AS {alias}_v)"
        finally:
            del self._rows[relation.row]

    def first(self, node: Subquery, value: str, rows: str, alias: str) -> str:
        """The value of the first row by the keys, then by message id (so that rows that
        tie on every key still give one answer); NULL keys last.

        The keys are computed in a subquery of their own: SQLite cannot resolve a
        name of the enclosing query (the triggering message) in ORDER BY.
        """
        columns = [f"{value} AS v"]
        terms = []
        for key, descending in node.order:
            for sql, is_text in self.sort_keys(key):
                name = f"k{len(columns)}"
                columns.append(f"{sql} AS {name}")
                ref = f"{alias}_o.{name}"
                direction = " DESC" if descending else ""
                terms.append(f"{self.text_order(ref) if is_text else ref}{direction} NULLS LAST")
        columns.append(f"{alias}.id AS id")
        terms.append(f"{alias}_o.id")
        return (
            f"(SELECT {alias}_o.v FROM (SELECT {', '.join(columns)} {rows}) AS {alias}_o "
            f"ORDER BY {', '.join(terms)} LIMIT 1)"
        )

    def sort_keys(self, key: Node) -> list[tuple[str, bool]]:
        """(SQL, whether text) of what a key sorts by: a JSON value of unknown type
        by number, then by text, as ``order_key`` sorts."""
        if key.type == "any":
            assert isinstance(key, Path)
            return [(self.json_typed(key, "number"), False), (self.json_typed(key, "text"), True)]
        return [(self.compile(key), key.type == "text")]

    def json_value(self, node: Node) -> str:
        if isinstance(node, Path):
            return self.json_raw(node)
        return self.json_item(self.compile(node), node.type)

    def xml(self, node: Node) -> str:
        """XML built as text: never NULL (a NULL value leaves its part out)."""
        if isinstance(node, XmlElement):
            parts = [self.literal(f"<{node.name}", "text")]
            for name, value in node.attributes:
                opening = self.literal(f' {name}="', "text")
                escaped = self.escape(self.compile(value), _ATTRIBUTE_ESCAPES)
                parts.append(f"coalesce({opening} || {escaped} || '\"', '')")
            parts.append("'>'")
            parts.extend(f"coalesce({self.xml_part(c)}, '')" for c in node.content)
            parts.append(self.literal(f"</{node.name}>", "text"))
            return "(" + " || ".join(parts) + ")"
        if isinstance(node, XmlForest):
            elements = [
                f"coalesce({self.literal(f'<{name}>', 'text')} || {self.xml_part(value)} "
                f"|| {self.literal(f'</{name}>', 'text')}, '')"
                for name, value in node.items
            ]
            return "(" + " || ".join(elements) + ")"
        assert isinstance(node, XmlConcat)
        return "(" + " || ".join(f"coalesce({self.xml_part(c)}, '')" for c in node.items) + ")"

    def xml_part(self, node: Node) -> str:
        """Content: XML as it is, text escaped (NULL stays NULL)."""
        sql = self.compile(node)
        return sql if builds_xml(node) else self.escape(sql, _TEXT_ESCAPES)

    def escape(self, sql: str, escapes: tuple[tuple[str | int, str], ...]) -> str:
        for char, escaped in escapes:
            spelt = self.char(char) if isinstance(char, int) else f"'{char}'"
            sql = f"replace({sql}, {spelt}, '{escaped}')"
        return sql
