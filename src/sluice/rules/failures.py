"""Why processing one message failed, as its error message says (docs/rules.md, "Errors
as messages"): whatever was raised while the message's rules ran, sluice's own error or
not, becomes a Failure of one of the documented kinds."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.errors import MessageError, QueueNotFound, SluiceError
from sluice.expr.failing import origin_in, reason_in
from sluice.rules.model import RuleDef

__all__ = ["Failure", "failure_of", "rule_of"]


class Failure(SluiceError):
    """Processing one message failed: its actions are undone, an error message is sent."""

    def __init__(self, kind: str, text: str, rule: RuleDef | None) -> None:
        # A rule expression's run-time error (a division by zero, a CAST that does not
        # convert) is said in its own words, whatever the database wrapped them in.
        reason = reason_in(text)
        super().__init__(text if reason is None else reason)
        self.kind = kind
        self.rule = rule
        self.origin = origin_in(text)
        """Which compilation raised the run-time error (see ``rule_of``), or None."""


def rule_of(failure: Failure, rules: Sequence[RuleDef]) -> RuleDef | None:
    """The rule of ``failure``, or the rule of a queue's plan ``rules`` whose expression
    raised its run-time error in the database: plan.py compiles rule n with the prefix
    ``r{n}_``, the origin of the errors its SQL raises (sluice.expr.failing)."""
    origin = failure.origin or ""
    number = origin[1:-1]
    if failure.rule is None and origin.startswith("r") and number.isdigit():
        return rules[int(number)] if int(number) < len(rules) else None
    return failure.rule


def failure_of(exc: Exception, rule: RuleDef | None, *, kind: str | None = None) -> Failure:
    """``exc``, raised while ``rule`` processed a message, as that message's Failure.

    The kind is ``kind`` if given, else ``queue`` (a missing queue), ``message`` (a message
    its target refuses) or ``evaluation`` (anything else). An exception that is not
    sluice's own (a bound model's validator, a bug) is named in the text and kept as the
    Failure's cause, so its traceback can be logged.
    """
    if isinstance(exc, Failure):
        return exc
    if kind is None:
        kind = (
            "queue" if isinstance(exc, QueueNotFound)
            else "message" if isinstance(exc, MessageError)
            else "evaluation"
        )  # fmt: skip
    if isinstance(exc, SluiceError):
        return Failure(kind, str(exc), rule)
    failure = Failure(kind, f"{type(exc).__name__}: {exc}", rule)
    failure.__cause__ = exc
    return failure
