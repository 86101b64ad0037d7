"""An expression's mistake placed in the rules definition file: the file's line and
column, and the file's own line with a caret under the mistake."""

from __future__ import annotations

from sluice.errors import ExpressionError, RuleDefinitionError
from sluice.expr.located import pointer
from sluice.rules.model import Expr

__all__ = ["RuleExpressionError", "expression_error"]


class RuleExpressionError(RuleDefinitionError):
    """An expression of the rules definition does not parse or is not allowed; fix it
    where the caret points."""

    column: int
    """The column of ``line`` the mistake is at, from 1 (where the expression starts,
    for a mistake in the expression as a whole)."""
    reason: str
    """What is wrong and what to do, without where (the ExpressionError's reason)."""
    expected: tuple[str, ...]
    """What is allowed there, the nearest first (the ExpressionError's expected)."""

    def __init__(
        self, message: str, *, line: int, column: int, reason: str, expected: tuple[str, ...]
    ) -> None:
        super().__init__(message)  # placed already: no "line N: " before it
        self.line, self.column, self.reason, self.expected = line, column, reason, expected


def expression_error(
    expr: Expr, exc: ExpressionError, where: str, *, offset: int = 0
) -> RuleDefinitionError:
    """``exc``, raised for ``expr`` (parsed with ``offset`` characters of sluice's own
    before its text), at the file's line and column; ``where`` names the expression
    ("rule 'r' IF condition"). The ExpressionError is the caller's ``__cause__``.

    An expression that was not read from a file keeps the ExpressionError's own place
    (a column in the expression) after the line it starts on.
    """
    if not expr.runs:
        return RuleDefinitionError(f"{where}: {exc}", line=expr.line)
    if exc.position is None:  # the expression as a whole: underlined from its start
        position, length = 0, len(expr.text)
    else:
        position = max(0, min(exc.position - offset, len(expr.text)))
        length = _underlined(exc)
    start = _in_source(expr, position)
    end = _in_source(expr, position + length - 1) + 1 if length else start + 1
    first_line = expr.source.rfind("\n", 0, start) < 0
    line = expr.line + expr.source.count("\n", 0, start)
    column = (
        expr.column + start - expr.runs[0][1]
        if first_line
        else start - expr.source.rfind("\n", 0, start)
    )
    return RuleExpressionError(
        f"line {line}, column {column}: {where}: {exc.reason}\n{_shown(expr.source, start, end)}",
        line=line,
        column=column,
        reason=exc.reason,
        expected=exc.expected,
    )


def _in_source(expr: Expr, position: int) -> int:
    """Where ``expr.text[position]`` was written in ``expr.source``; a space that stands
    for blanks or a comment is where they begin, the end of the text just after it."""
    at, start = next((run for run in reversed(expr.runs) if run[0] <= position), expr.runs[0])
    return start + position - at


def _underlined(exc: ExpressionError) -> int:
    """How many characters ``exc``'s caret line underlines (1 when it has none).

    The ExpressionError keeps the mistake's start, not its length; its message ends with
    the caret line that shows it.
    """
    last = str(exc).rsplit("\n", 1)[-1]
    carets = last.strip()
    return len(carets) if carets and set(carets) == {"^"} else 1


def _shown(source: str, start: int, end: int) -> str:
    """The file's line that holds ``start`` without its indentation, and a caret under
    ``start`` to ``end`` (up to the line's end)."""
    line_start = source.rfind("\n", 0, start) + 1
    line_end = source.find("\n", start)
    if line_end < 0:
        line_end = len(source)
    line = source[line_start:line_end].rstrip("\r")
    text = line.lstrip()
    at = max(0, start - line_start - (len(line) - len(text)))
    return pointer(text, min(at, len(text)), max(1, min(end, line_end) - start))
