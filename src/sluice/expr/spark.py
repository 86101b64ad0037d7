"""The expression language compiled for Spark SQL (Spark 4): VARIANT for JSON
bodies, higher-order functions for array functions, xpath_* for XML.

The SQL reads a row with the columns of a stored message (``{alias}.body``,
``properties``, ``content_type``, ``priority``, ``enqueued_at``, ...; see
``Source``) and is meant for ``spark.sql(text, args=compiled.params)``, where
``:name`` markers are Spark's named parameters. Spark accepts them everywhere
this module puts them, including lambda bodies and the arguments that must be
constant (JSON paths, LIKE and RLIKE patterns, XPath, round's scale): a bound
parameter is a literal by the time the analyzer checks foldability. Where no
parameters can be passed (``DataFrame.filter``/``selectExpr``), compile with
``inline=True``: every value is then rendered by ``spark_literal``, which
spells strings as hex (``X'...'``), so neither quotes nor the session's
string-escaping setting can change their meaning.

Spark 4 runs with ANSI mode on, where a cast that does not fit, a division by
zero or an invalid date raises and fails the whole query. Nothing here raises
on any row but a rule's run-time errors (``raise_error``: see
``sluice.expr.failing``; the rules engine then evaluates the message alone):
``/`` is ``try_divide``, text becomes a number only after the same decimal
grammar as Python's check and then ``try_cast``, dates are validated field by
field before ``make_date``, floor/ceil/trunc never convert
a double that does not fit a BIGINT, substr clamps its integers, and XPath only
reads bodies whose content type is XML (which enqueue checked to be well-formed:
Spark's xpath raises on anything else). All numbers are DOUBLE, so no integer
arithmetic can overflow. The SQL does not depend on the session time zone.

Values computed once and used several times (a date's fields, a number being
printed or rounded) are bound with a one-element ``aggregate`` (Spark SQL has
no ``LET``): lambda variables are never constant-folded, so even the branches
a CASE does not take cannot raise while the plan is optimized.

JSON typing is strict, as in ``sluice.expr.python``: Spark's own casts turn
the string ``"12"`` into 12, so a value is read as a number only when
``schema_of_variant`` says it is not a string or boolean (objects, arrays and
JSON null fail the cast to DOUBLE and give NULL).

Known differences from the Python evaluator, all at the edges of the data:

* a body with a duplicate object key does not parse as VARIANT unless the
  session sets ``spark.sql.variant.allowDuplicateKeys=true`` (then the last one
  wins, as in Python); otherwise every path into such a body is NULL;
* number-to-text takes its digits from Java's ``Double.toString``, which on
  JDK 17 is, for a few doubles, one digit longer than the shortest;
* XPath is Java's (javax.xml), not libxml2's: an XPath that lxml accepts but
  cannot evaluate (an undeclared namespace prefix) is NULL in Python and may
  fail the query or read as no node here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from sluice.expr.nodes import ArrayAgg, Func, Lit, Node, Path, Type, Var
from sluice.expr.sql import Source, SqlCompiler

__all__ = ["SparkCompiler", "spark_literal"]

_SQL_TYPES: Final[dict[str, str]] = {"number": "DOUBLE", "text": "STRING", "boolean": "BOOLEAN"}

# Content types, as ``sluice.message.is_json``/``is_xml`` read them (NULL: JSON).
# \z, not $: Java's $ also matches before a final line break.
_JSON_TYPE: Final = r"(?s)^\s*(application/json|[^;]*\+json)\s*(;.*)?\z"
_XML_TYPE: Final = r"(?s)^\s*(application/xml|text/xml|[^;]*\+xml)\s*(;.*)?\z"
# Text that converts to a number (python._NUMBER), and the dates of python._DATETIME.
_NUMBER: Final = r"^ *[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)? *\z"
_DATETIME: Final = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?Z?)?\z"

_TWO_52: Final = "4503599627370496D"  # doubles this large are whole numbers
_INT_MAX: Final = "2147483647D"
# round's places, clamped as python._round does: beyond them a double has no digits.
_LEAST_PLACES: Final = -310
_MOST_PLACES: Final = 340


def spark_literal(value: Any) -> str:  # noqa: PLR0911  (one case per kind of value)
    """``value`` as a Spark SQL literal that means exactly it, whatever the session.

    Strings are hex-encoded UTF-8 (no quote or backslash can end or bend them),
    numbers go through a cast from their decimal text, so this is safe to
    splice wherever a parameter marker cannot go.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return f"CAST('{value:d}' AS BIGINT)"
        return f"CAST('{value:d}' AS DOUBLE)"
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return "CAST('Infinity' AS DOUBLE)" if value > 0 else "CAST('-Infinity' AS DOUBLE)"
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if isinstance(value, str):
        if not value:
            return "''"
        return f"CAST(X'{value.encode('utf-8').hex().upper()}' AS STRING)"
    raise TypeError(f"no Spark SQL literal for {type(value).__name__}")


def _path_segment(step: str | int) -> str | None:  # noqa: PLR0911  (one case per spelling)
    """``step`` in Spark's variant path syntax, or None where it has no spelling.

    Spark's path grammar is ``.key`` (no ``.`` or ``[``), ``['key']`` (no ``'``
    or ``?``), ``["key"]`` (no ``"`` or ``?``) and ``[index]``; it skips
    whitespace before a key, and has no escapes.
    """
    if isinstance(step, int):
        return f"[{step:d}]"
    if not step or step[0].isspace():
        return None
    if "." not in step and "[" not in step:
        return f".{step}"
    if "?" in step:
        return None
    if "'" not in step:
        return f"['{step}']"
    if '"' not in step:
        return f'["{step}"]'
    return None


class SparkCompiler(SqlCompiler):
    """Spark SQL; ``inline=True`` renders values as literals instead of ``:name`` markers."""

    def __init__(
        self, source: Source | None = None, *, prefix: str = "x", inline: bool = False
    ) -> None:
        super().__init__(source, prefix=prefix)
        self.inline = inline
        self._constants: dict[str, str] = {}
        self._lambdas = 0

    # --- values ----------------------------------------------------------------------
    def placeholder(self, name: str) -> str:
        return f":{name}"

    def bind(self, value: Any) -> str:
        if self.inline:
            return spark_literal(value)
        return super().bind(value)

    def constant(self, text: str) -> str:
        """One of this module's own patterns, bound once per compilation."""
        if text not in self._constants:
            self._constants[text] = self.bind(text)
        return self._constants[text]

    def literal(self, value: Any, kind: Type) -> str:
        if value is None:
            return f"CAST(NULL AS {_SQL_TYPES[kind]})" if kind in _SQL_TYPES else "NULL"
        if kind == "number":
            return f"CAST({self.bind(value)} AS DOUBLE)"
        return self.bind(value)

    def _name(self, stem: str) -> str:
        """A lambda variable no other lambda of this compilation uses."""
        self._lambdas += 1
        return f"_{stem}{self._lambdas}"

    def _let(self, value: str, sql_type: str, body: Callable[[str], str]) -> str:
        """``body`` over ``value`` computed once (a one-element aggregate is Spark's let)."""
        acc, var = self._name("l"), self._name("v")
        return f"aggregate(array({value}), CAST(NULL AS {sql_type}), ({acc}, {var}) -> {body(var)})"

    # --- the message -----------------------------------------------------------------
    def column(self, name: str, alias: str) -> str:
        a = alias
        if name == "content_type":
            return f"coalesce({a}.content_type, 'application/json')"
        if name in ("priority", "attempts"):
            return f"CAST({a}.{name} AS DOUBLE)"
        return f"{a}.{name}"

    def _root(self, path: Path) -> str:
        """The VARIANT a path starts from (NULL for a body that is not JSON)."""
        a = self.alias(path.row)
        if isinstance(path.root, Var):
            return self.var(path.root)
        if path.root == "body":
            is_json = f"lower({a}.content_type) RLIKE {self.constant(_JSON_TYPE)}"
            json = f"{a}.content_type IS NULL OR {is_json}"
            return f"(CASE WHEN {json} THEN try_parse_json({a}.body) END)"
        return f"coalesce(try_parse_json({a}.properties), parse_json('{{}}'))"

    def _locate(self, path: Path) -> tuple[str, str]:
        """(VARIANT, variant path) of the value at ``path``, for ``try_variant_get``."""
        sql = self._root(path)
        segments: list[str] = []
        for step in path.steps:
            segment = _path_segment(step)
            if segment is not None:
                segments.append(segment)
                continue
            # A key the path syntax cannot spell: read the object as a map.
            if segments:
                sql = f"try_variant_get({sql}, {self.constant('$' + ''.join(segments))}, 'variant')"
                segments = []
            members = f"try_variant_get({sql}, '$', 'map<string, variant>')"
            sql = f"try_element_at({members}, {self.bind(step)})"
        return sql, self.constant("$" + "".join(segments)) if segments else "'$'"

    def _get(self, path: Path, sql_type: str) -> str:
        """The value at ``path`` as ``sql_type`` (a Spark cast), NULL where there is none."""
        sql, where = self._locate(path)
        return f"try_variant_get({sql}, {where}, '{sql_type}')"

    def json_typed(self, path: Path, kind: Type) -> str:
        sql, where = self._locate(path)
        value = f"try_variant_get({sql}, {where}, 'variant')"
        if kind == "number":
            test = f"schema_of_variant({value}) NOT IN ('STRING', 'BOOLEAN')"
        elif kind == "text":
            test = f"schema_of_variant({value}) = 'STRING'"
        elif kind == "boolean":
            test = f"schema_of_variant({value}) = 'BOOLEAN'"
        else:
            raise AssertionError(f"a JSON value is not read as {kind}")
        read = f"try_variant_get({sql}, {where}, '{_SQL_TYPES[kind]}')"
        return f"(CASE WHEN {test} THEN {read} END)"

    def json_is_null(self, path: Path) -> str:
        return f"is_variant_null(coalesce({self._get(path, 'variant')}, parse_json('null')))"

    # --- array functions -------------------------------------------------------------
    def aggregate(self, node: ArrayAgg, alias: str) -> str:
        assert isinstance(node.array, Path)
        items = self._get(node.array, "array<variant>")  # NULL unless a JSON array
        where = self.compile(node.where) if node.where is not None else None
        if node.op == "exists":
            test = f"coalesce({where}, false)" if where is not None else "true"
            return f"exists({items}, {alias} -> {test})"
        kept = f"filter({items}, {alias} -> {where})" if where is not None else items
        if node.op == "count":
            return f"CAST(array_size({kept}) AS DOUBLE)"
        assert node.value is not None
        values = f"transform({kept}, {alias} -> {self.compile(node.value)})"
        if node.op == "min":
            return f"array_min({values})"
        if node.op == "max":
            return f"array_max({values})"
        acc, y = self._name("a"), self._name("y")
        if node.op == "sum":
            return f"aggregate({values}, 0D, ({acc}, {y}) -> {acc} + coalesce({y}, 0D))"
        step = f"named_struct('s', {acc}.s + {y}, 'n', {acc}.n + 1D)"
        return (
            f"aggregate({values}, named_struct('s', 0D, 'n', 0D), ({acc}, {y}) -> "
            f"CASE WHEN {y} IS NULL THEN {acc} ELSE {step} END, "
            f"{acc} -> try_divide({acc}.s, {acc}.n))"
        )

    # --- conversions -----------------------------------------------------------------
    def cast(self, sql: str, source: Type, target: Type) -> str:
        if target == "text":
            if source == "boolean":
                return f"CAST({sql} AS STRING)"
            return self._let(sql, "STRING", self._number_text)
        if target == "number":
            if source == "boolean":
                return f"CAST({sql} AS DOUBLE)"
            return self._let(sql, "DOUBLE", self._text_number)
        if source == "number":
            return f"({sql} <> 0)"
        word = f"lower(trim(BOTH ' ' FROM {sql}))"
        return f"(CASE {word} WHEN 'true' THEN true WHEN 'false' THEN false END)"

    def _text_number(self, s: str) -> str:
        number = f"try_cast({s} AS DOUBLE)"
        return (
            f"CASE WHEN {s} RLIKE {self.constant(_NUMBER)} "
            f"AND abs({number}) < CAST('Infinity' AS DOUBLE) THEN {number} END"
        )

    def _number_text(self, x: str) -> str:
        """As ``python._number_text``: the shortest decimal that reads back as the
        number, written out in full (no exponent, no trailing zeros)."""
        return (
            f"CASE WHEN isnan({x}) THEN 'NaN' "
            f"WHEN {x} = CAST('Infinity' AS DOUBLE) THEN 'Infinity' "
            f"WHEN {x} = CAST('-Infinity' AS DOUBLE) THEN '-Infinity' "
            f"WHEN {x} = 0 THEN '0' "
            f"ELSE (CASE WHEN {x} < 0 THEN '-' ELSE '' END) || "
            f"{self._let(f'CAST(abs({x}) AS STRING)', 'STRING', self._positional)} END"
        )

    def _positional(self, j: str) -> str:
        """Java's ``Double.toString`` of a positive number (``123.5``, ``1.5E-7``: the
        same shortest digits as Python's repr) written out in full."""
        mantissa = f"substring_index({j}, 'E', 1)"
        written = f"CASE WHEN instr({j}, 'E') > 0 THEN substring_index({j}, 'E', -1) END"
        exponent = f"coalesce(try_cast({written} AS INT), 0)"
        digits = f"replace({mantissa}, '.', '')"
        leading = f"(char_length({digits}) - char_length(TRIM(LEADING '0' FROM {digits})))"
        significant = f"TRIM(TRAILING '0' FROM TRIM(LEADING '0' FROM {digits}))"
        # The decimal exponent of the first significant digit.
        power = f"({exponent} + instr({mantissa}, '.') - 2 - {leading})"
        parts = f"named_struct('d', {significant}, 'e', {power})"

        def spell(w: str) -> str:
            d, e = f"{w}.d", f"{w}.e"
            return (
                f"CASE WHEN char_length({d}) <= {e} + 1 "
                f"THEN {d} || repeat('0', {e} + 1 - char_length({d})) "
                f"WHEN {e} < 0 THEN '0.' || repeat('0', -{e} - 1) || {d} "
                f"ELSE substr({d}, 1, {e} + 1) || '.' || substr({d}, {e} + 2) END"
            )

        return self._let(parts, "STRING", spell)

    # --- functions -------------------------------------------------------------------
    def compile(self, node: Node) -> str:
        if isinstance(node, Func) and node.name == "round":
            return self._round(node)
        return super().compile(node)

    def _round(self, node: Func) -> str:
        """Half away from zero on the number's shortest decimal form, as ``python._round``.

        A constant scale uses Spark's round (HALF_UP on ``BigDecimal(Double.toString)``),
        which requires a constant. A scale computed per row: ``%.{n}f`` of Java's
        Formatter rounds the same digits half up; to the left of the point the
        fraction cannot decide (a whole remainder of at least half does), so an exact
        ``%`` on the whole part does.
        """
        x = self.compile(node.args[0])
        digits = node.args[1] if len(node.args) == 2 else Lit(0, "number")
        not_finite = "isnan({v}) OR abs({v}) = CAST('Infinity' AS DOUBLE)"
        if isinstance(digits, Lit):
            if digits.value is None:
                return "CAST(NULL AS DOUBLE)"
            assert isinstance(digits.value, int | float)
            places = max(_LEAST_PLACES, min(_MOST_PLACES, int(digits.value)))
            scale = f"CAST({self.bind(places)} AS INT)"
            return self._let(
                x,
                "DOUBLE",
                lambda v: (
                    f"CASE WHEN {not_finite.format(v=v)} THEN NULL ELSE round({v}, {scale}) END"
                ),
            )
        pair = f"named_struct('x', {x}, 'd', {self.compile(digits)})"

        def per_row(w: str) -> str:
            v = f"{w}.x"
            places = f"CAST(least(greatest({w}.d, {_LEAST_PLACES}D), {_MOST_PLACES}D) AS INT)"
            right = (
                f"try_cast(format_string('%.' || CAST({places} AS STRING) || 'f', {v}) AS DOUBLE)"
            )
            unit = f"power(10D, -{places})"
            whole = f"(abs({v}) - abs({v}) % 1D)"
            left = (
                f"sign({v}) * ({whole} - {whole} % {unit} "
                f"+ CASE WHEN {whole} % {unit} >= {unit} / 2 THEN {unit} ELSE 0D END)"
            )
            return (
                f"CASE WHEN {w}.d IS NULL OR {not_finite.format(v=v)} THEN NULL "
                f"WHEN {places} >= 0 THEN {right} ELSE {left} END"
            )

        return self._let(pair, "DOUBLE", per_row)

    def function(self, name: str, args: list[str]) -> str:
        x = args[0] if args else ""
        simple = {
            "lower": f"lower({x})",
            "upper": f"upper({x})",
            "length": f"CAST(char_length({x}) AS DOUBLE)",
            "trim": f"trim(BOTH ' ' FROM {x})",
            "abs": f"abs({x})",
            "now": "(unix_micros(current_timestamp()) / 1000000D)",
        }
        if name in simple:
            return simple[name]
        if name in ("floor", "ceil", "trunc"):
            whole = f"CAST({x} AS BIGINT)" if name == "trunc" else f"{name}({x})"
            return f"(CASE WHEN abs({x}) < {_TWO_52} THEN CAST({whole} AS DOUBLE) ELSE {x} END)"
        if name == "replace":  # an empty needle leaves the text as it is, as in Python
            return f"replace({', '.join(args)})"
        if name == "substr":
            start = f"CAST(least({args[1]}, {_INT_MAX}) AS INT)"
            guard = f"{args[1]} >= 1"
            length = ""
            if len(args) == 3:
                guard += f" AND {args[2]} >= 0"
                length = f", CAST(least({args[2]}, {_INT_MAX}) AS INT)"
            return f"(CASE WHEN {guard} THEN substring({x}, {start}{length}) END)"
        if name in ("epoch", "year", "month", "day"):
            return self._let(x, "DOUBLE", lambda s: self._date(s, name))
        raise AssertionError(f"no Spark SQL form for {name}")

    def _date(self, s: str, part: str) -> str:
        """A part of 'YYYY-MM-DD' or 'YYYY-MM-DDTHH:MM:SS[.ffffff][Z]' read as UTC, or NULL."""

        def field(start: int, size: int) -> str:
            return f"try_cast(substr({s}, {start}, {size}) AS INT)"

        year, month, day = field(1, 4), field(6, 2), field(9, 2)
        timed = f"char_length({s}) >= 19"
        hour, minute, second = (
            f"(CASE WHEN {timed} THEN {field(i, 2)} ELSE 0 END)" for i in (12, 15, 18)
        )
        fraction = f"rpad(TRIM(TRAILING 'Z' FROM substr({s}, 21)), 6, '0')"
        micros = f"(CASE WHEN substr({s}, 20, 1) = '.' THEN try_cast({fraction} AS INT) ELSE 0 END)"
        leap = f"(({year} % 4 = 0 AND {year} % 100 <> 0) OR {year} % 400 = 0)"
        days_in_month = (
            f"(CASE WHEN {month} = 2 THEN (CASE WHEN {leap} THEN 29 ELSE 28 END) "
            f"WHEN {month} IN (4, 6, 9, 11) THEN 30 ELSE 31 END)"
        )
        valid = (
            f"{year} >= 1 AND {month} BETWEEN 1 AND 12 "
            f"AND {day} BETWEEN 1 AND {days_in_month} AND {hour} <= 23 AND {minute} <= 59 "
            f"AND {second} <= 59"
        )
        if part == "epoch":
            # Whole seconds and microseconds are exact in a double (below 2**53), so
            # the one division rounds once, like Python's timestamp().
            seconds = (
                f"(CAST(unix_date(make_date({year}, {month}, {day})) AS DOUBLE) * 86400D "
                f"+ {hour} * 3600 + {minute} * 60 + {second})"
            )
            value = f"(({seconds} * 1000000D + {micros}) / 1000000D)"
        else:
            fields = {"year": year, "month": month, "day": day}
            value = f"CAST({fields[part]} AS DOUBLE)"
        # Nested CASEs: the fields are only read once the text is known to match.
        matches = f"{s} RLIKE {self.constant(_DATETIME)}"
        return f"CASE WHEN {matches} THEN (CASE WHEN {valid} THEN {value} END) END"

    def divide(self, left: str, right: str) -> str:
        return f"try_divide({left}, {right})"

    # --- run-time errors (in rules) ----------------------------------------------------
    def fail(self, reason: str, kind: Type, like: str) -> str:
        return f"raise_error({reason})"  # never folded: raised only where it is evaluated

    def let(self, values: list[str], kind: Type, body: Callable[[list[str]], str]) -> str:
        if len(values) == 1:
            return self._let(values[0], _SQL_TYPES[kind], lambda v: body([v]))
        fields = ", ".join(f"'v{n}', {v}" for n, v in enumerate(values))
        return self._let(
            f"named_struct({fields})",
            _SQL_TYPES[kind],
            lambda w: body([f"{w}.v{n}" for n in range(len(values))]),
        )

    def like(self, sql: str, pattern: str) -> str:
        # Spark's LIKE escapes with a backslash; the language has no escape character.
        return f"({sql} LIKE {self.bind(pattern.replace(chr(92), chr(92) * 2))})"

    def xpath(self, path: str, kind: Type, alias: str) -> str:
        a = alias
        wrapped = {"text": "string", "number": "number", "boolean": "boolean"}[kind]
        function = {"text": "xpath_string", "number": "xpath_double"}.get(kind, "xpath_boolean")
        # Spark's xpath raises on text that is not XML: only XML bodies are read
        # (they were checked to be well-formed at enqueue).
        is_xml = f"lower({a}.content_type) RLIKE {self.constant(_XML_TYPE)}"
        value = f"{function}({a}.body, {self.bind(f'{wrapped}({path})')})"
        if kind == "number":  # NaN (no number there) and 1 div 0 are no numbers
            infinite = "abs({v}) = CAST('Infinity' AS DOUBLE)"
            value = self._let(
                value,
                "DOUBLE",
                lambda v: f"CASE WHEN isnan({v}) OR {infinite.format(v=v)} THEN NULL ELSE {v} END",
            )
        return f"(CASE WHEN {is_xml} THEN {value} END)"
