"""The rules definition language: text to statements (``sluice.rules.model``).

::

    CREATE QUEUE name [KIND basic | echo | gateway IN|OUT TRANSPORT t [WITH (s = v, ...)]]
        [MODE persistent | transient] [PRIORITY n] [TYPE t [, t ...]] [ERRORQUEUE q]
        [RETENTION duration]
    CREATE PROPERTY name AS text | integer | real | boolean | timestamp [FIXED | INHERITED]
        QUEUE q [, q ...] [VALUE expr] [QUEUE q [, q ...] [VALUE expr] ...]
    CREATE SLICING name ON property
    CREATE RULE name FOR queue-or-slicing [ERRORQUEUE q]
        IF condition THEN action [, action ...]
        [ELSE IF condition THEN action [, action ...] ...] [ELSE action [, action ...]]
    CREATE RULE name FOR queue-or-slicing [ERRORQUEUE q] action [, action ...]
    action := ENQUEUE expr INTO queue [WITH property = expr [, property = expr ...]]
            | RESET [slicing [KEY expr]]
    DROP RULE | SLICING | PROPERTY | QUEUE [IF EXISTS] name
    SET ERRORQUEUE q

- Statements end with ``;``; the last one may go without. Keywords are
  case-insensitive. Names are identifiers (``[A-Za-z_][A-Za-z0-9_]*``) and
  case-sensitive, or "double-quoted" (``""`` for a quote inside). ``--`` comments
  run to the end of the line, ``/* ... */`` ones may span lines.
- A rule without IF runs its actions for every message; a rule's branches are
  tried in order and the first whose condition holds runs.
- Durations: a number of seconds (``30``), or a number and a unit: ``s``,
  ``sec``, ``second(s)``; ``m``, ``min``, ``minute(s)``; ``h``, ``hour(s)``; ``d``,
  ``day(s)``; ``w``, ``week(s)``, with or without a space (``30s``, ``5 minutes``).
  ``forever`` (``math.inf`` in ``QueueDef.retention``) keeps processed messages
  until purged, as a queue's ``retention="forever"`` does.
- Expressions are sluice's SQL expressions (docs/expressions.md). The parser does
  not read them: it takes the text up to the keyword that may follow in that
  place, outside parentheses, brackets, strings, quoted names and
  ``CASE ... END``: ``THEN`` after an IF condition, ``INTO`` after an ENQUEUE body,
  ``,``, ``ELSE`` or the statement's end after a WITH value or a RESET key, ``QUEUE``
  or the end after a VALUE. A word after ``.`` (``body.end``) or before ``(``
  (``queue('q')``) is never such a keyword. ``;`` ends an expression anywhere, and
  so do CREATE and DROP outside brackets (a ';' was forgotten), and ENQUEUE or
  RESET in an IF condition (THEN was). Each expression is kept as its text,
  blanks and comments folded to one space, with the line it starts on and its
  place in the file (``Expr``), so that the checks (``sluice.rules.check``), which
  parse it, show a mistake at the file's line and column.
- In a WITH list, ``, ENQUEUE`` or ``, RESET`` starts the next action (unless ``=``
  follows: ``WITH reset = 1`` sets a property named reset).
"""

from __future__ import annotations

import math
from typing import Final, Literal, cast

from sluice.errors import RuleDefinitionError
from sluice.message import lone_surrogate
from sluice.rules.model import (
    PROPERTY_TYPES,
    Action,
    Branch,
    Drop,
    Enqueue,
    ErrorQueueDef,
    Expr,
    GatewayDef,
    PropertyDef,
    PropertyType,
    QueueDef,
    Reset,
    RuleDef,
    SlicingDef,
    Statement,
)
from sluice.rules.tokens import Token, Tokens, cut_expression, unexpected

__all__ = ["parse_statements"]

_UNITS: Final = {
    **dict.fromkeys(("S", "SEC", "SECS", "SECOND", "SECONDS"), 1),
    **dict.fromkeys(("M", "MIN", "MINS", "MINUTE", "MINUTES"), 60),
    **dict.fromkeys(("H", "HR", "HRS", "HOUR", "HOURS"), 3600),
    **dict.fromkeys(("D", "DAY", "DAYS"), 86400),
    **dict.fromkeys(("W", "WEEK", "WEEKS"), 604800),
}
_QUEUE_OPTIONS: Final = ("KIND", "MODE", "PRIORITY", "TYPE", "ERRORQUEUE", "RETENTION")
_DROPPABLE: Final = ("RULE", "SLICING", "PROPERTY", "QUEUE")
_STATEMENT_STARTS: Final = ("CREATE", "DROP", "SET")
_ACTION_END: Final = (",", "ELSE")
_MAX_PRIORITY: Final = 2**31 - 1


def parse_statements(text: str) -> list[Statement]:
    """The statements of a rules definition, in order.

    Raises RuleDefinitionError, with the line and what was expected, for any text
    that is not a sequence of statements, and nothing else. Names and expressions
    are not checked here: ``sluice.rules.check.apply_statements`` does that.
    """
    if not isinstance(text, str):
        raise RuleDefinitionError(f"a rules definition is text, not {type(text).__name__}")
    if (at := lone_surrogate(text)) is not None:
        # A lone surrogate cannot be stored: refused here, not by the database half-way
        # through applying the text.
        raise RuleDefinitionError(
            "the text has a lone surrogate, which is not a Unicode character; "
            "write the definition in valid Unicode",
            line=text.count("\n", 0, at) + 1,
        )
    # An editor's byte order mark is no statement.
    return _Parser(text.removeprefix("\ufeff")).statements()


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = Tokens(text)

    # --- tokens ------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens.peek(ahead)

    def next(self) -> Token:
        return self.tokens.next()

    def at(self, *keywords: str) -> bool:
        """Whether the next token is one of ``keywords`` (or symbols)."""
        token = self.peek()
        return token.keyword in keywords or (token.kind == "symbol" and token.text in keywords)

    def accept(self, keyword: str) -> bool:
        if self.at(keyword):
            self.next()
            return True
        return False

    def expect(self, keyword: str, expected: str) -> Token:
        if not self.at(keyword):
            raise self.expected(expected)
        return self.next()

    def expected(self, what: str, token: Token | None = None) -> RuleDefinitionError:
        """``expected <what>, found <token>`` at the token's line (the next one's)."""
        return unexpected(token or self.peek(), what)

    def name(self, what: str) -> str:
        token = self.peek()
        if token.kind == "word":
            return self.next().text
        if token.kind == "quoted":
            self.next()
            name = token.text[1:-1].replace('""', '"')
            if not name:
                raise RuleDefinitionError(f'{what} "" is empty', line=token.line)
            return name
        raise self.expected(what)

    def names(self, what: str) -> list[str]:
        names = [self.name(what)]
        while self.accept(","):
            names.append(self.name(what))
        return names

    # --- statements --------------------------------------------------------------------
    def statements(self) -> list[Statement]:
        statements: list[Statement] = []
        while self.peek().kind != "eof":
            if self.accept(";"):
                continue
            statements.append(self.statement())
            if self.peek().kind != "eof":
                missing = " (is a ';' missing?)" if self.at(*_STATEMENT_STARTS) else ""
                self.expect(";", f"';' at the end of the statement{missing}")
        return statements

    def statement(self) -> Statement:
        token = self.next()
        if token.keyword == "CREATE":
            what = self.next()
            if what.keyword == "QUEUE":
                return self.create_queue(token.line)
            if what.keyword == "PROPERTY":
                return self.create_property(token.line)
            if what.keyword == "SLICING":
                return self.create_slicing(token.line)
            if what.keyword == "RULE":
                return self.create_rule(token.line)
            raise self.expected("QUEUE, PROPERTY, SLICING or RULE after CREATE", what)
        if token.keyword == "DROP":
            what = self.next()
            if what.keyword not in _DROPPABLE:
                raise self.expected("RULE, SLICING, PROPERTY or QUEUE after DROP", what)
            if_exists = self.accept("IF")
            if if_exists:
                self.expect("EXISTS", "EXISTS after DROP ... IF")
            kind = cast(Literal["rule", "slicing", "property", "queue"], what.keyword.lower())
            name = self.name(f"the name of the {kind} to drop")
            return Drop(kind, name, token.line, if_exists)
        if token.keyword == "SET":
            self.expect("ERRORQUEUE", "ERRORQUEUE after SET")
            return ErrorQueueDef(self.name("the error queue's name"), token.line)
        raise self.expected("CREATE, DROP or SET at the start of a statement", token)

    def create_queue(self, line: int) -> QueueDef:
        name = self.name("the queue's name after CREATE QUEUE")
        options: dict[str, object] = {}
        while self.at(*_QUEUE_OPTIONS):
            option = self.next()
            if option.keyword in options:
                raise RuleDefinitionError(
                    f"{option.keyword} is given twice for queue {name!r}", line=option.line
                )
            options[option.keyword] = self.queue_option(option.keyword)
        given = options.get("KIND", "basic")
        gateway = given if isinstance(given, GatewayDef) else None
        kind = "gateway" if gateway is not None else given
        return QueueDef(
            name,
            line,
            kind=cast(Literal["basic", "echo", "gateway"], kind),
            gateway=gateway,
            mode=cast(Literal["persistent", "transient"], options.get("MODE", "persistent")),
            priority=cast(int, options.get("PRIORITY", 0)),
            types=cast(tuple[str, ...], options.get("TYPE", ())),
            error_queue=cast("str | None", options.get("ERRORQUEUE")),
            retention=cast(float, options.get("RETENTION", 0.0)),
        )

    def queue_option(self, option: str) -> object:
        if option == "KIND":
            kind = self.choice(("basic", "echo", "gateway"), "after KIND")
            return self.gateway() if kind == "gateway" else kind
        if option == "MODE":
            return self.choice(("persistent", "transient"), "after MODE")
        if option == "PRIORITY":
            return self.priority()
        if option == "TYPE":
            return tuple(self.names("a message type name"))
        if option == "ERRORQUEUE":
            return self.name("the error queue's name after ERRORQUEUE")
        return self.duration()

    def gateway(self) -> GatewayDef:
        """``IN|OUT TRANSPORT t [WITH (name = value, ...)]`` after KIND gateway."""
        direction = self.choice(("in", "out"), "after KIND gateway")
        self.expect("TRANSPORT", "TRANSPORT and the transport's name after the direction")
        transport = self.name("the transport's name after TRANSPORT")
        settings: dict[str, str | int | float | bool] = {}
        if self.accept("WITH"):
            self.expect("(", "( and the transport's settings after WITH")
            while True:
                token = self.peek()
                setting = self.name("a setting's name")
                if setting in settings:
                    raise RuleDefinitionError(f"setting {setting!r} is given twice",
                                              line=token.line)  # fmt: skip
                self.expect("=", f"= and a value after setting {setting!r}")
                settings[setting] = self.literal(setting)
                if not self.accept(","):
                    break
            self.expect(")", "')' or ',' after a setting's value")
        return GatewayDef(cast(Literal["in", "out"], direction), transport,
                          tuple(settings.items()))  # fmt: skip

    def literal(self, setting: str) -> str | int | float | bool:
        """A setting's value: a 'string', a number, true or false."""
        token = self.peek()
        negative = token.kind == "symbol" and token.text == "-"
        if negative:
            self.next()
            token = self.peek()
        if token.kind == "string" and not negative:
            return self.next().text[1:-1].replace("''", "'")
        if token.kind == "number":
            text = self.next().text
            value = float(text) if any(c in text for c in ".eE") else int(text)
            return -value if negative else value
        if token.kind == "word" and token.keyword in ("TRUE", "FALSE") and not negative:
            return self.next().keyword == "TRUE"
        raise self.expected(f"a 'text', a number, true or false for setting {setting!r}")

    def choice(self, words: tuple[str, ...], where: str) -> str:
        token = self.peek()
        if token.kind != "word" or token.text.lower() not in words:
            raise self.expected(f"{' or '.join(words)} {where}")
        return self.next().text.lower()

    def priority(self) -> int:
        sign = -1 if self.accept("-") else 1
        token = self.peek()
        if token.kind != "number" or not token.text.isdigit():
            raise self.expected("a whole number after PRIORITY")
        value = sign * int(self.next().text)
        if abs(value) > _MAX_PRIORITY:
            raise RuleDefinitionError(
                f"PRIORITY must lie within +-{_MAX_PRIORITY}", line=token.line
            )
        return value

    def duration(self) -> float:
        token = self.peek()
        if token.keyword == "FOREVER":
            self.next()
            return math.inf
        if token.kind != "number":
            raise self.expected("a duration after RETENTION: 30s, 5 minutes, 7 days or forever")
        seconds = float(self.next().text)
        unit = self.peek()
        if unit.kind == "word" and unit.keyword not in (*_QUEUE_OPTIONS, *_STATEMENT_STARTS):
            if unit.keyword not in _UNITS:
                raise self.expected("a duration unit: s, min, h, d or w", unit)
            seconds *= _UNITS[self.next().keyword]
        if not math.isfinite(seconds):
            raise RuleDefinitionError(
                "the duration is too long; write forever to keep messages", line=token.line
            )
        return seconds

    def create_property(self, line: int) -> PropertyDef:
        name = self.name("the property's name after CREATE PROPERTY")
        self.expect("AS", f"AS and a type after the property name {name!r}")
        kind = self.choice(tuple(PROPERTY_TYPES), "after AS")
        fixed = inherited = False
        while self.at("FIXED", "INHERITED"):
            flag = self.next()
            if flag.keyword == "FIXED":
                fixed = True
            else:
                inherited = True
        if not self.at("QUEUE"):
            raise self.expected(f"QUEUE and the queues that have property {name!r}")
        values: dict[str, Expr | None] = {}
        while self.accept("QUEUE"):
            first = self.peek()
            queues = self.names("a queue name after QUEUE")
            value = (
                self.expression("QUEUE", what="the VALUE expression")
                if self.accept("VALUE")
                else None
            )
            for queue in queues:
                if queue in values:
                    raise RuleDefinitionError(
                        f"property {name!r} names queue {queue!r} twice", line=first.line
                    )
                values[queue] = value
        return PropertyDef(name, cast(PropertyType, kind), line, values, fixed, inherited)

    def create_slicing(self, line: int) -> SlicingDef:
        name = self.name("the slicing's name after CREATE SLICING")
        self.expect("ON", f"ON and a property after the slicing name {name!r}")
        return SlicingDef(name, self.name("the property the slicing is on"), line)

    def create_rule(self, line: int) -> RuleDef:
        name = self.name("the rule's name after CREATE RULE")
        self.expect("FOR", f"FOR and a queue or slicing after the rule name {name!r}")
        target = self.name("the queue or slicing the rule is for")
        error_queue = self.name("the error queue's name") if self.accept("ERRORQUEUE") else None
        if not self.at("IF"):
            return RuleDef(name, target, line, (Branch(None, self.actions()),), error_queue)
        branches: list[Branch] = []
        while self.accept("IF"):
            # ENQUEUE and RESET are no expression's words: there THEN was forgotten.
            condition = self.expression("THEN", "ENQUEUE", "RESET", what="the IF condition")
            self.expect("THEN", "THEN after the IF condition")
            branches.append(Branch(condition, self.actions()))
            if not self.accept("ELSE"):
                break
            if not self.at("IF"):
                branches.append(Branch(None, self.actions()))
                break
        return RuleDef(name, target, line, tuple(branches), error_queue)

    def actions(self) -> tuple[Action, ...]:
        actions = [self.action()]
        while self.accept(","):
            actions.append(self.action())
        return tuple(actions)

    def action(self) -> Action:
        token = self.next()
        if token.keyword == "ENQUEUE":
            body = self.expression("INTO", what="the ENQUEUE body")
            self.expect("INTO", "INTO after the ENQUEUE body")
            queue = self.name("the queue's name after INTO")
            properties: list[tuple[str, Expr]] = []
            if self.accept("WITH"):
                properties.append(self.assignment(properties))
                while self.at(",") and not self.action_ahead(1):
                    self.next()
                    properties.append(self.assignment(properties))
            return Enqueue(body, queue, tuple(properties))
        if token.keyword == "RESET":
            after = self.peek()
            if after.keyword == "KEY":
                raise self.expected("the slicing's name before KEY: RESET slicing KEY expr")
            named = after.kind == "quoted" or (
                after.kind == "word" and after.keyword not in ("ELSE", *_STATEMENT_STARTS)
            )
            slicing = self.name("a slicing name") if named else None
            key = None
            if slicing is not None and self.accept("KEY"):
                key = self.expression(*_ACTION_END, what="the RESET key")
            return Reset(slicing, key, token.line)
        raise self.expected("an action: ENQUEUE ... INTO ... or RESET", token)

    def action_ahead(self, ahead: int) -> bool:
        """Whether an action starts ``ahead`` tokens on (and not ``reset = ...``)."""
        token, after = self.peek(ahead), self.peek(ahead + 1)
        return token.keyword in ("ENQUEUE", "RESET") and after.text != "="

    def assignment(self, earlier: list[tuple[str, Expr]]) -> tuple[str, Expr]:
        token = self.peek()
        name = self.name("a property name after WITH")
        if any(name == set_ for set_, _ in earlier):
            raise RuleDefinitionError(
                f"property {name!r} is set twice in one ENQUEUE", line=token.line
            )
        self.expect("=", f"'=' after the property name {name!r}")
        return name, self.expression(*_ACTION_END, what=f"the value of {name!r}")

    def expression(self, *stops: str, what: str) -> Expr:
        return cut_expression(self.tokens, stops, what)
