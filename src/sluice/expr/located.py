"""ExpressionErrors that say where: the line and column of the mistake, and the
expression's line with a caret under it, as a compiler shows a syntax error.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable
from typing import Final

from sluice.errors import ExpressionError

__all__ = ["located", "nearest", "pointer"]

_WIDTH: Final = 72
"""The most characters of the expression's line shown above the caret."""


def located(
    reason: str,
    text: str,
    position: int,
    *,
    length: int = 1,
    expected: tuple[str, ...] = (),
) -> ExpressionError:
    """An ExpressionError for the mistake ``reason`` at ``position`` of ``text``,
    ``length`` characters long (underlined)."""
    position = max(0, min(position, len(text)))
    line = text.count("\n", 0, position) + 1
    column = position - text.rfind("\n", 0, position)
    at = f"line {line}, column {column}" if "\n" in text else f"column {column}"
    return ExpressionError(
        f"expression error at {at}: {reason}\n{pointer(text, position, length)}",
        expression=text,
        position=position,
        reason=reason,
        expected=expected,
    )


def pointer(text: str, position: int, length: int = 1) -> str:
    """Two lines: ``text``'s line holding ``position``, indented, and a caret under
    ``position`` (``^^^`` under ``length`` characters, up to the line's end)."""
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start : end if end >= 0 else len(text)]
    at = position - start
    width = max(1, min(length, len(line) - at))
    # A long line is shown around the mistake, cut where "..." says so.
    left = max(0, min(at - _WIDTH // 3, len(line) - _WIDTH))
    right = min(len(line), left + _WIDTH)
    shown = ("..." if left else "") + line[left:right] + ("..." if right < len(line) else "")
    before = ("..." if left else "") + line[left:at]
    width = min(width, right - at) if right > at else 1
    caret = " " * _columns(before) + "^" * max(1, _columns(line[at : at + width]))
    return f"  {_visible(shown)}\n  {caret}"


def nearest(name: str, choices: Iterable[str], *, n: int = 3) -> tuple[str, ...]:
    """The ``choices`` spelt most like ``name``, nearest first; none when none is close."""
    options = {c.lower(): c for c in choices}
    found = difflib.get_close_matches(name.lower(), list(options), n=n, cutoff=0.6)
    return tuple(options[f] for f in found)


def _visible(line: str) -> str:
    # A tab would move the caret off its column; other control characters are shown as "?".
    return "".join(
        " " if c == "\t" else "?" if unicodedata.category(c) == "Cc" else c for c in line
    )


def _columns(part: str) -> int:
    """How many terminal columns ``part`` takes: wide (CJK, emoji) characters two."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
        for c in part
    )
