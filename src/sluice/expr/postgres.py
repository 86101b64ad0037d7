"""The expression language compiled for PostgreSQL: jsonb for bodies, native xpath
for XML, and the helper functions of sluice's schema where a cast could fail."""

from __future__ import annotations

from typing import Final, Literal

from sluice.expr.nodes import ArrayAgg, Path, Type
from sluice.expr.sql import Source
from sluice.expr.sql_rules import RulesSqlCompiler
from sluice.expr.xml import node_selection

__all__ = ["PostgresCompiler", "json_body"]

_JSON_TYPES: Final[dict[str, str]] = {"number": "number", "text": "string", "boolean": "boolean"}
_READ: Final[dict[str, str]] = {
    "number": "({v})::float8",
    "text": "({v}) #>> '{{}}'",
    "boolean": "({v})::boolean",
}
# What sluice.message.is_json and is_xml say of a content type (before any ';',
# stripped, in any case); NULL is application/json itself.
_IS_JSON: Final = (
    r"({a}.content_type IS NULL "
    r"OR {a}.content_type ~* '^\s*(application/json|[^;]*\+json)\s*(;|$)')"
)
_IS_XML: Final = r"({a}.content_type ~* '^\s*(application/xml|text/xml|[^;]*\+xml)\s*(;|$)')"
_ICU: Final = '"und-x-icu"'  # full Unicode case mapping, whatever the database's locale
# The dates and times the language reads: 'YYYY-MM-DD' or 'YYYY-MM-DDTHH:MM:SS[.f][Z]'.
# The schema's functions take more (a space for T, 24:00:00 as the next midnight,
# :60 as a leap second); they are guarded here rather than changed, so that
# existing schemas agree too. They still refuse impossible dates (2023-02-29).
_ISO_TIME: Final = (
    r"'^([0-9]{4}-[0-9]{2}-[0-9]{2}(T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?Z?)?)$'"
)
_INT_MAX: Final = 2_147_483_647
_XML_ESCAPES: Final = (("&lt;", "'<'"), ("&gt;", "'>'"), ("&#x0d;", "chr(13)"), ("&amp;", "'&'"))


def json_body(alias: str) -> str:
    """SQL of message ``alias``'s body parsed as JSON (NULL if it is not JSON): what every
    path into the body reads."""
    return f"(CASE WHEN {_IS_JSON.format(a=alias)} THEN {alias}.body::jsonb END)"


class PostgresCompiler(RulesSqlCompiler):
    def __init__(self, source: Source | None = None, *, schema: str, prefix: str = "x") -> None:
        super().__init__(source, prefix=prefix)
        self.schema = schema

    def placeholder(self, name: str) -> str:
        return f"%({name})s"

    def literal(self, value: object, kind: Type) -> str:
        if value is None:
            return {"number": "NULL::float8", "boolean": "NULL::boolean"}.get(kind, "NULL::text")
        cast = {"number": "float8", "boolean": "boolean"}.get(kind, "text")
        return f"{self.bind(value)}::{cast}"

    def column(self, name: str, alias: str) -> str:
        a = alias
        if name == "content_type":
            return f"coalesce({a}.content_type, 'application/json')"
        if name in ("priority", "attempts"):
            return f"{a}.{name}::float8"
        return f"{a}.{name}"

    def _value(self, path: Path) -> str:
        """The jsonb value at ``path`` (NULL where there is none)."""
        a = self.alias(path.row)
        if path.root == "body":
            sql = json_body(a)
        elif path.root == "props":
            sql = f"{a}.properties::jsonb"
        else:
            sql = f"{self.var(path.root)}.v"
        for step in path.steps:
            # -> with an integer reads arrays only, with text objects only: as JSON paths do.
            cast = "int" if isinstance(step, int) else "text"
            sql += f" -> {self.bind(step)}::{cast}"
        return f"({sql})"

    def json_typed(self, path: Path, kind: Type) -> str:
        value = self._value(path)
        read = _READ[kind].format(v=value)
        return f"(CASE WHEN jsonb_typeof({value}) = '{_JSON_TYPES[kind]}' THEN {read} END)"

    def json_is_null(self, path: Path) -> str:
        return f"(coalesce(jsonb_typeof({self._value(path)}), 'null') = 'null')"

    def aggregate(self, node: ArrayAgg, alias: str) -> str:
        assert isinstance(node.array, Path)
        array = self._value(node.array)
        kept = f" WHERE {self.compile(node.where)}" if node.where is not None else ""
        elements = f"jsonb_array_elements({array}) AS {alias}(v){kept}"
        if node.value is None:
            result = "count(*) > 0" if node.op == "exists" else "count(*)::float8"
            select = f"SELECT {result} FROM {elements}"
        else:
            # The values are computed in a subquery of their own: an aggregate over a
            # value that names only the message (sum(a, x -> priority)) would otherwise
            # belong to the enclosing query, as SQL has it, and aggregate the messages.
            value = self.compile(node.value)
            result = {
                "sum": f"coalesce(sum({alias}_r.x), 0)",
                "min": f"min({alias}_r.x)",
                "max": f"max({alias}_r.x)",
                "avg": f"avg({alias}_r.x)",
            }[node.op]
            select = f"SELECT {result} FROM (SELECT {value} AS x FROM {elements}) AS {alias}_r"
        return f"(CASE WHEN jsonb_typeof({array}) = 'array' THEN ({select}) END)"

    def cast(self, sql: str, source: Type, target: Type) -> str:
        if target == "text":
            # Each operand appears once in what it compiles to: a nested expression
            # repeated at every level would grow exponentially.
            if source == "boolean":
                return f"(CASE {sql} WHEN true THEN 'true' WHEN false THEN 'false' END)"
            # float8's text is the shortest that reads back (Python's repr); through
            # numeric it loses its exponent, and trim_scale any trailing zeros.
            return f"trim_scale(({sql})::text::numeric)::text"
        if target == "number":
            if source == "boolean":
                return f"({sql})::int::float8"
            return f"{self.schema}.sluice_to_number({sql})"
        if source == "number":
            return f"({sql} <> 0)"
        return f"(CASE lower(btrim({sql}, ' ')) WHEN 'true' THEN true WHEN 'false' THEN false END)"

    def function(self, name: str, args: list[str]) -> str:  # noqa: PLR0911  (one form per name)
        x = args[0] if args else ""
        simple = {
            "lower": f"lower(({x}) COLLATE {_ICU})",
            "upper": f"upper(({x}) COLLATE {_ICU})",
            "length": f"char_length({x})::float8",
            "trim": f"btrim({x}, ' ')",
            "abs": f"abs({x})",
            "floor": f"floor({x})",
            "ceil": f"ceil({x})",
            "trunc": f"trunc({x})",
            "now": "extract(epoch FROM clock_timestamp())::float8",
        }
        if name in simple:
            return simple[name]
        if name in ("epoch", "year", "month", "day"):
            # substring(... from pattern) is the text if it matches, else NULL.
            text = f"substring({x} from {_ISO_TIME})"
            if name == "epoch":
                return f"{self.schema}.sluice_epoch({text})"
            return f"{self.schema}.sluice_date_part('{name}', {text})"
        if name == "replace":
            return f"replace({', '.join(args)})"
        if name == "round":
            # Through text: float8::numeric keeps only 15 digits, which can move a half.
            # round takes at most 2000 places either way itself; int4 must not overflow
            # (and least or greatest would skip a NULL).
            if len(args) == 1:
                return f"round(({x})::text::numeric)::float8"
            n = args[1]
            digits = (
                f"(CASE WHEN {n} > 2000 THEN 2000 WHEN {n} < -2000 THEN -2000 ELSE trunc({n}) END)"
            )
            return f"round(({x})::text::numeric, {digits}::int)::float8"
        if name == "substr":
            # A start below 1 or a negative length is NULL, not an error; past the int
            # range is past the end of any text.
            start, *length = (
                f"(CASE WHEN {n} >= {low} THEN least(floor({n}), {_INT_MAX})::int END)"
                for n, low in zip(args[1:], (1, 0), strict=False)
            )
            return f"substr({', '.join([x, start, *length])})"
        raise AssertionError(f"no PostgreSQL form for {name}")

    def divide(self, left: str, right: str) -> str:
        return f"(({left})::float8 / NULLIF({right}, 0))"

    def fail(self, reason: str, kind: Type, like: str) -> str:
        # A text that is no number is an error that quotes it. The row's value and a
        # stable function (each as no text) keep the planner from computing the error
        # ahead as a constant, in a branch that is not taken.
        target = "boolean" if kind == "boolean" else "float8"
        unfolded = f"left(({like})::text, 0) || left(statement_timestamp()::text, 0)"
        return f"({reason} || {unfolded})::{target}"

    def like(self, sql: str, pattern: str) -> str:
        # No escape character: PostgreSQL's default, backslash, would make 'a\b' match 'ab'.
        return f"({sql} LIKE {self.bind(pattern)} ESCAPE '')"

    def text_order(self, sql: str) -> str:
        return f'({sql} COLLATE "C")'

    def xpath(self, path: str, kind: Type, alias: str) -> str:
        wrapped = {"text": "string", "number": "number", "boolean": "boolean"}[kind]
        xml = _xml(alias)
        value = f"(xpath({self.bind(f'{wrapped}({path})')}::text, {xml}))[1]::text"
        if kind == "number":  # NaN and infinities are no numbers
            number = f"({value})::float8"
            for special in ("NaN", "Infinity", "-Infinity"):
                number = f"NULLIF({number}, '{special}')"
            return number
        if kind == "boolean":
            return f"({value})::boolean"
        # A string result comes back as XML text, with & < > and CR escaped: undone,
        # &amp; last so that an escaped entity is not undone twice.
        for escaped, char in _XML_ESCAPES:
            value = f"replace({value}, '{escaped}', {char})"
        return f"coalesce({value}, CASE WHEN {xml} IS NOT NULL THEN '' END)"

    # --- rules -----------------------------------------------------------------------
    def parameter(self, name: str, kind: Type) -> str:
        return f"({self.placeholder(name)})::float8"

    def row_id(self, alias: str) -> str:
        return f"{alias}.id::float8"

    def json_build(self, kind: Literal["object", "array"], args: list[str]) -> str:
        return f"(jsonb_build_{kind}({', '.join(args)}))::text"

    def json_item(self, sql: str, kind: Type) -> str:
        # Every other value is typed (float8, text, boolean): jsonb_build_* maps the type.
        return f"({sql})::jsonb" if kind == "json" else sql

    def json_raw(self, path: Path) -> str:
        return self._value(path)

    def json_text(self, path: Path) -> str:
        return f"({self._value(path)})::text"

    def rows_aggregate(self, op: str, value: str) -> str:
        if op == "count":
            return "count(*)::float8"
        return f"coalesce(sum({value}), 0)" if op == "sum" else f"{op}({value})"

    def xml_nodes(self, path: str, alias: str) -> str:
        selected = f"xpath({self.bind(node_selection(path))}::text, {_xml(alias)})"
        # Text and attribute nodes come back escaped as XML text, elements serialised.
        return f"array_to_string(({selected})::text[], '')"

    def char(self, code: int) -> str:
        return f"chr({code})"


def _xml(alias: str) -> str:
    """The body of ``alias`` as xml; NULL unless it is an XML body (a text body that
    happens to parse has no nodes)."""
    a = alias
    return (
        f"(CASE WHEN {_IS_XML.format(a=a)} AND xml_is_well_formed_document({a}.body) "
        f"THEN {a}.body::xml END)"
    )
