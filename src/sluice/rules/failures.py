"""Why processing one message failed, as its error message says (docs/rules.md, "Errors
as messages"): whatever was raised while the message's rules ran, sluice's own error or
not, becomes a Failure of one of the documented kinds."""

from __future__ import annotations

from sluice.errors import MessageError, QueueNotFound, SluiceError
from sluice.rules.model import RuleDef

__all__ = ["Failure", "failure_of"]


class Failure(SluiceError):
    """Processing one message failed: its actions are undone, an error message is sent."""

    def __init__(self, kind: str, text: str, rule: RuleDef | None) -> None:
        super().__init__(text)
        self.kind = kind
        self.rule = rule


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
