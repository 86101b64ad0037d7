"""What is wrong with a text that does not parse, said in sluice's words.

Quotes, comments and brackets are checked here before sqlglot reads the text, so
an unclosed one is reported where it opens. sqlglot's own parse errors are read
for their place and the node it could not complete, and said again as what the
operator or keyword there needs: its messages name its classes, never shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from sqlglot.errors import ParseError

if TYPE_CHECKING:
    from sqlglot.tokenizer_core import Token

from sluice.errors import ExpressionError
from sluice.expr.located import located

__all__ = ["parse_error", "unbalanced"]

_CLOSERS: Final = {"(": ")", "[": "]"}

_TYPOS: Final[Mapping[str, str]] = {
    "==": "=",
    "===": "=",
    ">==": ">=",
    "<==": "<=",
    "=<": "<=",
    "=>": ">=",
    "!==": "<>",
    "!=<": "<>",
    "<>=": "<>",
    "=!": "<>",
    "&&": "AND",
    "||=": "=",
}
"""Operators written as other languages write them, and what sluice spells them."""

_BINARY: Final = frozenset({
    "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "PLUS", "DASH", "STAR", "SLASH", "MOD", "DPIPE",
    "AND", "OR", "LIKE", "ILIKE",
})  # fmt: skip
_PREFIX: Final = frozenset({"DASH", "PLUS", "NOT"})
"""Operators that may also start a value (-1, NOT x)."""
_CLOSING: Final = frozenset({"R_PAREN", "R_BRACKET", "COMMA", "THEN", "ELSE", "END"})

_OPERATORS: Final = "=, <>, <, <=, >, >=, +, -, *, /, ||, AND, OR, LIKE, IN, IS NULL, BETWEEN"

# The token that stands for each node sqlglot could not complete, and whether what is
# missing comes after it (else: an operand on its left).
_NODES: Final[Mapping[str, tuple[str, str]]] = {
    "EQ": ("EQ", "binary"),
    "NEQ": ("NEQ", "binary"),
    "GT": ("GT", "binary"),
    "GTE": ("GTE", "binary"),
    "LT": ("LT", "binary"),
    "LTE": ("LTE", "binary"),
    "Add": ("PLUS", "binary"),
    "Sub": ("DASH", "binary"),
    "Mul": ("STAR", "binary"),
    "Div": ("SLASH", "binary"),
    "Mod": ("MOD", "binary"),
    "DPipe": ("DPIPE", "binary"),
    "And": ("AND", "condition"),
    "Or": ("OR", "condition"),
    "Like": ("LIKE", "like"),
    "ILike": ("ILIKE", "like"),
    "Between": ("BETWEEN", "between"),
    "Not": ("NOT", "not"),
    "Neg": ("DASH", "negative"),
    "Paren": ("L_PAREN", "paren"),
    "Column": ("DOT", "step"),
    "Dot": ("DOT", "step"),
    "Lambda": ("ARROW", "lambda"),
    "JSONExtract": ("ARROW", "lambda"),
    "JSONExtractScalar": ("DARROW", "arrow"),
    "Parameter": ("PARAMETER", "parameter"),
    "Case": ("CASE", "case"),
    "If": ("WHEN", "case"),
    "Is": ("IS", "is"),
    "In": ("IN", "in"),
}

_AFTER: Final[Mapping[str, str]] = {
    "condition": "a condition on its right",
    "like": "a quoted pattern after it, e.g. LIKE 'Sm%'",
    "between": "a lower and an upper bound: x BETWEEN 1 AND 10",
    "not": "a condition after it",
    "negative": "a number after it",
    "paren": "an expression inside",
    "step": "a name after it, e.g. body.total",
    "lambda": "an array function's variable before it and a value after it, e.g. "
    "sum(body.lines, l -> l.price)",
    "case": "WHEN condition THEN value ... [ELSE value] END",
    "is": "NULL or NOT NULL after it",
    "in": "a list of values in parentheses after it, e.g. IN (1, 2)",
}

_REFUSED: Final[Mapping[str, str]] = {
    "arrow": "'->>' is not part of the expression language: read JSON with paths, body.a.b",
    "parameter": "parameters (@x, ?, :x) are not part of the expression language: write the "
    "value itself",
}

_NOT_HERE: Final[Mapping[str, str]] = {
    "BY": "ORDER BY is not part of an expression: give ordering keys as order_by",
    "ORDER": "ORDER BY is not part of an expression: give ordering keys as order_by",
    "LIMIT": "LIMIT is not part of an expression: browse and take say how many",
    "GROUP": "GROUP BY is not part of an expression",
    "HAVING": "HAVING is not part of an expression",
    "FROM": "FROM belongs to statements, which cannot be used in an expression",
    "WHERE": "WHERE is not part of an expression: give the condition alone",
    "AS": "AS names nothing in an expression (it is written only in CAST(x AS type))",
}


def unbalanced(text: str) -> ExpressionError | None:
    """The first quote, comment or bracket of ``text`` that is not closed, or a
    closing bracket that closes nothing; None when all are balanced."""
    opened: list[tuple[str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            end = _closing_quote(text, i)
            if end < 0:
                what = "text" if c == "'" else "quoted name"
                return located(f"the {what} starting here has no closing {c}", text, i,
                               length=n - i, expected=(c,))  # fmt: skip
            i = end + 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return located("the comment starting here has no closing */", text, i,
                               length=2, expected=("*/",))  # fmt: skip
            i = end + 2
            continue
        if c in _CLOSERS:
            opened.append((c, i))
        elif c in ")]":
            if not opened:
                opener = "(" if c == ")" else "["
                return located(f"{c!r} closes nothing: there is no {opener!r} before it",
                               text, i, expected=())  # fmt: skip
            opener, at = opened.pop()
            if _CLOSERS[opener] != c:
                return located(
                    f"{c!r} cannot close the {opener!r} at column {_column(text, at)}: "
                    f"expected {_CLOSERS[opener]!r}",
                    text, i, expected=(_CLOSERS[opener],),
                )  # fmt: skip
        i += 1
    if opened:
        opener, at = opened[-1]
        closer = _CLOSERS[opener]
        return located(f"this {opener!r} is not closed: expected {closer!r} after what it holds",
                       text, at, expected=(closer,))  # fmt: skip
    return None


def parse_error(  # noqa: PLR0911  (one case per kind of sqlglot error)
    text: str, exc: ParseError, tokens: Sequence[Token] | None
) -> ExpressionError:
    """``exc``, sqlglot's error for ``text`` (whose quotes and brackets balance), said
    as what was expected where; ``tokens`` are ``text``'s, None if it did not tokenize."""
    errors: list[dict[str, Any]] = list(exc.errors or [])
    error = errors[0] if errors else {}
    at = _offset(text, error)
    if not tokens or at is None:
        return located("this is not a valid expression", text, at or 0)
    i = next((k for k, t in enumerate(tokens) if t.end >= at), len(tokens) - 1)
    description = str(error.get("description", ""))
    missing = re.match(r"Required keyword: '(\w+)' missing for <class '[\w.]+\.(\w+)'>",
                       description)  # fmt: skip
    if missing and missing.group(2) in _NODES:
        token_type, kind = _NODES[missing.group(2)]
        return _incomplete(text, tokens, i, token_type=token_type, kind=kind, arg=missing.group(1))
    if description.startswith(("Expecting )", "Expected )")):
        return _expected(text, tokens, i, "',' or ')'", (",", ")"))
    if description.startswith("Expected ]"):
        return _expected(text, tokens, i, "']'", ("]",))
    if description.startswith("Expected END"):
        return _expected(text, tokens, i, "END to close the CASE", ("END",))
    if "after CAST" in description:
        return _expected(text, tokens, i, "AS and a type: CAST(x AS DOUBLE)", ("AS",))
    return _unexpected(text, tokens, i)


def _incomplete(
    text: str, tokens: Sequence[Token], i: int, *, token_type: str, kind: str, arg: str
) -> ExpressionError:
    """A node sqlglot could not complete: its token, and the operand it lacks."""
    if kind in ("binary", "condition"):
        pair = _operator_pair(text, tokens)
        if pair is not None:
            return pair
    # At the end of the text sqlglot points at the operator itself; else at what follows it.
    last = len(tokens) - 1
    first = i if i == last and tokens[i].token_type.name == token_type else i - 1
    op = next((k for k in range(min(first, last), -1, -1)
               if tokens[k].token_type.name == token_type), None)  # fmt: skip
    if op is None:
        return _unexpected(text, tokens, i)
    sign = tokens[op]
    shown = repr(_source(text, sign))
    if kind in _REFUSED:
        return located(_REFUSED[kind], text, sign.start, length=_length(sign))
    if kind in ("binary", "condition") and arg == "this" and op == 0:
        return located(f"{shown} needs a value on its left", text, sign.start,
                       length=_length(sign))  # fmt: skip
    after = tokens[op + 1] if op + 1 < len(tokens) else None
    needs = _AFTER.get(kind, "a value on its right")
    if after is None:
        return located(f"{shown} needs {needs}, found the end of the expression", text,
                       len(text.rstrip()))  # fmt: skip
    return located(f"{shown} needs {needs}, found {_source(text, after)!r}", text, after.start,
                   length=_length(after))  # fmt: skip


def _operator_pair(text: str, tokens: Sequence[Token]) -> ExpressionError | None:
    """The first operator with no value on its left (at the start) or on its right
    (before another operator, a closing bracket, a comma or the end)."""
    if tokens and tokens[0].token_type.name in _BINARY and tokens[0].token_type.name not in _PREFIX:
        return located(f"{_source(text, tokens[0])!r} needs a value on its left", text,
                       tokens[0].start, length=_length(tokens[0]))  # fmt: skip
    for k, sign in enumerate(tokens):
        if sign.token_type.name not in _BINARY:
            continue
        after = tokens[k + 1] if k + 1 < len(tokens) else None
        op = _source(text, sign)
        if after is None:
            return located(f"{op!r} needs a value on its right, found the end of the "
                           "expression", text, len(text.rstrip()))  # fmt: skip
        kind = after.token_type.name
        if kind in _PREFIX or (kind not in _BINARY and kind not in _CLOSING):
            continue
        written = op + _source(text, after)
        if after.start == sign.end + 1 and written == "*/":
            return located("'*/' closes a comment that was never opened with /*", text,
                           sign.start, length=2, expected=())  # fmt: skip
        typo = _TYPOS.get(written) if after.start == sign.end + 1 else None
        if typo is not None:
            return located(f"{written!r} is not an operator: did you mean {typo!r}?", text,
                           sign.start, length=len(written), expected=(typo,))  # fmt: skip
        return located(f"{op!r} needs a value on its right, found {_source(text, after)!r}",
                       text, after.start, length=_length(after))  # fmt: skip
    return None


def _expected(
    text: str, tokens: Sequence[Token], i: int, what: str, expected: tuple[str, ...]
) -> ExpressionError:
    token = tokens[i] if i < len(tokens) else None
    if token is None or (i == len(tokens) - 1 and token.end + 1 >= len(text.rstrip())
                         and what.startswith("END")):  # fmt: skip
        return located(f"expected {what}, found the end of the expression", text,
                       len(text.rstrip()), expected=expected)  # fmt: skip
    return located(f"expected {what}, found {_source(text, token)!r}", text, token.start,
                   length=_length(token), expected=expected)  # fmt: skip


def _unexpected(  # noqa: PLR0911  (one case per kind of token)
    text: str, tokens: Sequence[Token], i: int
) -> ExpressionError:
    pair = _operator_pair(text, tokens)
    if pair is not None:
        return pair
    token = tokens[min(i, len(tokens) - 1)]
    word = _source(text, token)
    previous = tokens[i - 1] if 0 < i <= len(tokens) - 1 else None
    if previous is not None and previous.end + 1 == token.start:
        typo = _TYPOS.get(_source(text, previous) + word)
        if typo is not None:
            return located(
                f"{_source(text, previous) + word!r} is not an operator: did you mean {typo!r}?",
                text, previous.start, length=token.end + 1 - previous.start, expected=(typo,),
            )  # fmt: skip
    if word in _TYPOS:
        return located(f"{word!r} is not an operator: did you mean {_TYPOS[word]!r}?", text,
                       token.start, length=len(word), expected=(_TYPOS[word],))  # fmt: skip
    if word == "!":
        return located("'!' is not an operator: write NOT before a condition, <> for "
                       "'not equal'", text, token.start, expected=("NOT", "<>"))  # fmt: skip
    if word == ",":
        return located("',' separates a function's arguments or the values of IN (...); "
                       "here it is outside both", text, token.start)  # fmt: skip
    if word.split()[0].upper() in _NOT_HERE:
        reason = _NOT_HERE[word.split()[0].upper()]
        return located(reason, text, token.start, length=_length(token))
    if previous is not None and _ends_value(previous) and _starts_value(token):
        return located(
            f"expected an operator ({_OPERATORS}) or the end of the expression before {word!r}",
            text, token.start, length=_length(token), expected=tuple(_OPERATORS.split(", ")),
        )  # fmt: skip
    if token.token_type.name in ("NOT",) and previous is not None:
        return located(
            "NOT goes before a condition (NOT x = 1), or in x NOT IN, x NOT LIKE, "
            "x NOT BETWEEN and x IS NOT NULL",
            text, token.start, length=_length(token),
        )  # fmt: skip
    if len(word) == 1 and not word.isalnum():
        return located(f"{word!r} is not part of the expression language (its operators "
                       f"are {_OPERATORS})", text, token.start)  # fmt: skip
    return located(f"{word!r} is not expected here", text, token.start, length=_length(token))


def _closing_quote(text: str, start: int) -> int:
    """The index of the quote closing the one at ``start`` (a doubled quote is one
    quote character inside), or -1."""
    quote, i = text[start], start + 1
    while True:
        i = text.find(quote, i)
        if i < 0:
            return -1
        if text.startswith(quote * 2, i):
            i += 2
            continue
        return i


def _offset(text: str, error: Mapping[str, Any]) -> int | None:
    line, col, highlight = error.get("line"), error.get("col"), str(error.get("highlight", ""))
    if not isinstance(line, int) or not isinstance(col, int):
        return None
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
    return max(0, min(len(text), start + col - max(len(highlight), 1)))


def _before(tokens: Sequence[Token], k: int) -> Token | None:
    return tokens[k - 1] if k > 0 else None


def _source(text: str, token: Token) -> str:
    return text[token.start : token.end + 1]


def _length(token: Token) -> int:
    return token.end + 1 - token.start


def _ends_value(token: Token) -> bool:
    return token.token_type.name in (
        "VAR", "NUMBER", "STRING", "IDENTIFIER", "R_PAREN", "R_BRACKET", "NULL", "TRUE", "FALSE",
    )  # fmt: skip


def _starts_value(token: Token) -> bool:
    return token.token_type.name in (
        "VAR", "NUMBER", "STRING", "IDENTIFIER", "L_PAREN", "NULL", "TRUE", "FALSE", "CASE",
    )  # fmt: skip


def _column(text: str, position: int) -> int:
    return position - text.rfind("\n", 0, position)
