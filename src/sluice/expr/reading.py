"""Reading an expression's text: the guards on the text itself (its length, NUL, lone
surrogates, unclosed brackets) and sqlglot's parse, its errors placed in the text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

if TYPE_CHECKING:
    from sqlglot.tokenizer_core import Token

from sluice.errors import ExpressionError
from sluice.expr import diagnose
from sluice.expr.located import located
from sluice.expr.syntax import Language
from sluice.message import lone_surrogate

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "read_tree", "tokens"]

MAX_LENGTH: Final = 10_000
"""The longest expression text accepted."""

MAX_DEPTH: Final = 64
"""The deepest an expression may nest."""


def read_tree(text: str) -> exp.Expression:
    """``text`` read by sqlglot as one expression; ExpressionError, placed in the text where
    it can be, if it is too long, not Unicode, unbalanced or not one expression."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a str, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters; at most {MAX_LENGTH}")
    if not text.strip():
        raise ExpressionError("the expression is empty")
    if "\x00" in text:
        # PostgreSQL's text cannot hold NUL: a literal of it failed there as a StorageError
        # (after a rules definition had created its queues); refused on every backend.
        raise ExpressionError(f"the expression {text!r} has a NUL character; leave it out")
    if lone_surrogate(text) is not None:
        # A lone surrogate parses, then no database can bind the text or a literal of
        # it: a UnicodeEncodeError at the first dequeue, not an ExpressionError.
        raise ExpressionError(
            f"the expression {text!r} has a lone surrogate, which is not a Unicode "
            "character; write it in valid Unicode"
        )
    unclosed = diagnose.unbalanced(text)
    if unclosed is not None:
        raise unclosed
    found = tokens(text)
    try:
        trees = sqlglot.parse(text, read=Language)
    except ParseError as exc:
        raise diagnose.parse_error(text, exc, found) from exc
    except RecursionError as exc:
        raise ExpressionError(
            f"the expression nests deeper than {MAX_DEPTH} levels", expression=text
        ) from exc
    # sqlglot reports other malformed input with other exception types: to the caller
    # they are all the same mistake, kept as the cause.
    except Exception as exc:
        raise ExpressionError("the expression cannot be read", expression=text) from exc
    if len(trees) != 1 or not isinstance(trees[0], exp.Expression):
        ends = [t for t in found or () if t.token_type.name == "SEMICOLON"]
        if ends:
            raise located(
                "';' ends a statement, and an expression is one condition or value: "
                "leave out the ';' and anything after it",
                text,
                ends[0].start,
            )
        raise located("expected a value here", text, 0, length=len(text.strip()))
    return trees[0]


def tokens(text: str) -> list[Token] | None:
    """``text``'s tokens with their places, for messages; None if it does not tokenize."""
    try:
        return Language().tokenize(text)
    except Exception:  # an unreadable token: the parse below says so
        return None
