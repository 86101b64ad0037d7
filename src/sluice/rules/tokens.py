"""The rules language's tokens (words, quoted names, strings, numbers and single
symbols), and the cutting of embedded expressions out of them.

Tokens are produced on demand, so a long file costs the lookahead the parser
uses, not a list of every token, and garbage stops at its first token. The
tokenizer knows SQL's quoting and comments but not the expression language:
the parser cuts expressions out of the text by their tokens, so a ``;`` or a
keyword inside a string or a quoted key never ends one.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Final, NamedTuple

from sluice.errors import RuleDefinitionError
from sluice.expr.check import MAX_LENGTH
from sluice.rules.model import Expr

__all__ = ["Token", "Tokens", "cut_expression", "unexpected"]

_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<comment>--[^\n]*)
    | (?P<block>/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<symbol>.)
    """,
    re.VERBOSE | re.DOTALL,
)


class Token(NamedTuple):
    """One token: its kind, its text as written, its line and where it is in the text.

    ``kind`` is ``word``, ``quoted`` (a "double-quoted" name), ``string``
    ('single-quoted'), ``number``, ``symbol`` (any other single character) or ``eof``.
    """

    kind: str
    text: str
    line: int
    start: int
    end: int

    @property
    def keyword(self) -> str:
        """The word in upper case, as keywords compare; '' for anything but a word."""
        return self.text.upper() if self.kind == "word" else ""

    def shown(self) -> str:
        """The token as an error message quotes it."""
        if self.kind == "eof":
            return "the end of the text"
        return repr(self.text if len(self.text) <= 30 else self.text[:27] + "...")


class Tokens:
    """A stream of tokens with lookahead; ``eof`` repeats at the end, so reading past
    the end is safe."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._source = _scan(text)
        self._ahead: deque[Token] = deque()

    def peek(self, ahead: int = 0) -> Token:
        while len(self._ahead) <= ahead:
            self._ahead.append(next(self._source))
        return self._ahead[ahead]

    def next(self) -> Token:
        token = self.peek()
        if token.kind != "eof":
            self._ahead.popleft()
        return token


def _scan(text: str) -> Iterator[Token]:
    pos, line = 0, 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        assert match is not None  # the last alternative takes any character
        kind = match.lastgroup or "symbol"
        end = match.end()
        if kind == "symbol":
            _refuse_unterminated(text, pos, line)
        if kind not in ("space", "comment", "block"):
            yield Token(kind, match.group(), line, pos, end)
        line += text.count("\n", pos, end)
        pos = end
    while True:
        yield Token("eof", "", line, len(text), len(text))


def _refuse_unterminated(text: str, pos: int, line: int) -> None:
    """A quote or comment opener that the patterns could not close runs to the end."""
    what = {"'": "string", '"': "quoted name"}.get(text[pos])
    if text.startswith("/*", pos):
        what = "comment"
    if what is not None:
        closer = "*/" if what == "comment" else text[pos]
        raise RuleDefinitionError(
            f"unterminated {what}: {text[pos : pos + 20]!r}... has no closing {closer}", line=line
        )


def unexpected(token: Token, expected: str) -> RuleDefinitionError:
    """``line N: expected <expected>, found <token>``."""
    return RuleDefinitionError(f"expected {expected}, found {token.shown()}", line=token.line)


_ENDS_STATEMENTS: Final = ("CREATE", "DROP")
"""Words that start a statement and never occur in an expression: a ';' was forgotten."""


def cut_expression(tokens: Tokens, stops: tuple[str, ...], what: str) -> Expr:
    """The expression that starts at the next token, up to one of ``stops`` (keywords
    or symbols) outside brackets and ``CASE ... END``; the tokens are consumed.

    The statement's end (a ``;`` anywhere, the end of the text, or CREATE or DROP at
    the top, where a ';' was forgotten) always ends it. ``what`` names the
    expression in errors ("the IF condition").
    """
    first = tokens.peek()
    depth = cases = 0
    taken: list[Token] = []
    previous: Token | None = None
    while True:
        token = tokens.peek()
        if token.kind == "eof" or (token.kind == "symbol" and token.text == ";"):
            break
        # A word after '.' is a path step (body.end), not a keyword; one before '('
        # is a function's name (queue('q')), not the keyword that ends the expression.
        step = previous is not None and previous.kind == "symbol" and previous.text == "."
        word = "" if step else token.keyword
        called = tokens.peek(1).kind == "symbol" and tokens.peek(1).text == "("
        if depth == cases == 0 and (
            (not called and (word in stops or word in _ENDS_STATEMENTS))
            or (token.kind == "symbol" and token.text in stops)
        ):
            break
        if token.kind == "symbol" and token.text in ("(", "["):
            depth += 1
        elif token.kind == "symbol" and token.text in (")", "]"):
            depth = max(depth - 1, 0)
        elif word == "CASE":
            cases += 1
        elif word == "END" and cases:
            cases -= 1
        if token.end - first.start > MAX_LENGTH:
            raise RuleDefinitionError(
                f"{what} is longer than {MAX_LENGTH} characters", line=first.line
            )
        previous = tokens.next()
        taken.append(previous)
    if previous is None:
        raise unexpected(first, what)
    if depth:
        raise RuleDefinitionError(f"{what} has a '(' or '[' that is not closed", line=first.line)
    if cases:
        raise RuleDefinitionError(f"{what} has a CASE without END", line=first.line)
    return _placed(taken, tokens.text)


_CONTEXT: Final = 80
"""The most characters kept of the file's text before and after an expression."""


def _placed(taken: list[Token], file: str) -> Expr:
    """The expression of the tokens ``taken`` from ``file``, blanks and comments between
    them folded to one space, with its place: the lines it is on (the parts around it
    cut) and where each part of its text copied as written comes from."""
    parts: list[str] = []
    runs: list[tuple[int, int]] = []
    length = 0
    for n, token in enumerate(taken):
        if n == 0 or taken[n - 1].end < token.start:
            if n:
                parts.append(" ")
                length += 1
            runs.append((length, token.start))
        parts.append(token.text)
        length += len(token.text)
    first, end = taken[0], taken[-1].end
    line_start = file.rfind("\n", 0, first.start) + 1
    line_end = file.find("\n", end)
    before = file[line_start : first.start]
    after = file[end : len(file) if line_end < 0 else line_end]
    if len(before) > _CONTEXT:
        before = "..." + before[-_CONTEXT:]
    if len(after) > _CONTEXT:
        after = after[:_CONTEXT] + "..."
    shift = len(before) - first.start
    return Expr(
        "".join(parts),
        first.line,
        column=first.start - line_start + 1,
        source=before + file[first.start : end] + after,
        runs=tuple((at, start + shift) for at, start in runs),
    )
