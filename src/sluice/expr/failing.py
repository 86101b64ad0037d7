"""Run-time errors of rule expressions (docs/expressions.md, "Run-time errors"): in rules a
division by zero and a CAST whose text does not convert are errors, as Demaq makes every
run-time failure one, not the NULL they are in selections.

The checker puts the error's text on the node that can fail (``Binary.fails``,
``Cast.fails``); each engine raises it through an error of its own (a JSON path error on
SQLite, a failed cast on PostgreSQL, ``raise_error`` on Spark, ``RunTimeError`` in
Python) whose message carries it between ``START`` and ``END``, so that ``reason_in`` finds
the same text in whatever the driver made of it.
"""

from __future__ import annotations

from typing import Final

from sluice.errors import ExpressionError
from sluice.expr.nodes import Type

__all__ = [
    "END",
    "SHOWN",
    "START",
    "RunTimeError",
    "cast_reason",
    "cast_suffix",
    "division_reason",
    "opening",
    "origin_in",
    "reason_in",
]

START: Final = "<<sluice: "
END: Final = ">>"
SHOWN: Final = 40
"""How many characters of a value that does not convert its error shows."""


class RunTimeError(ExpressionError):
    """A rule's expression failed on a message: a division by zero, a CAST that does not
    convert. The rules engine makes the message's error message of it."""


def division_reason(written: str) -> str:
    return f"division by zero in {written}"


def cast_reason(written: str) -> str:
    """The text before the value of a CAST that does not convert (``cast_suffix`` after)."""
    return f'{written}: the text "'


def cast_suffix(target: Type) -> str:
    return '" is not a number' if target == "number" else '" is not true or false'


def opening(origin: str) -> str:
    """What a compiled run-time error's text starts with: START and the compilation's
    ``origin`` (its parameters' prefix: the rules engine tells its rules apart by it)."""
    return f"{START}[{origin}] "


def reason_in(text: str) -> str | None:
    """The run-time error's text in a driver's error message ``text``, or None."""
    found = _marked(text)
    return None if found is None else found[1]


def origin_in(text: str) -> str | None:
    """The origin (see ``opening``) of the run-time error in ``text``, or None."""
    found = _marked(text)
    return None if found is None else found[0]


def _marked(text: str) -> tuple[str | None, str] | None:
    start = text.find(START)
    end = text.rfind(END)
    if start < 0 or end < start:
        return None
    reason = text[start + len(START) : end]
    if start > 0 and text[start - 1] == "'":
        # SQLite quotes the path of its JSON path error with ' doubled inside.
        reason = reason.replace("''", "'")
    origin, bracket, rest = reason[1:].partition("] ")
    if reason.startswith("[") and bracket:
        return origin, rest
    return None, reason
