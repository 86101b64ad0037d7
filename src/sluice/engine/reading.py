"""Reading queues: backend rows turned into Messages, and browsing without taking."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

from sluice.backends.base import MessageRow, TxStore
from sluice.engine import topics
from sluice.errors import ConfigurationError
from sluice.message import (
    JSON,
    Holder,
    Message,
    MessageState,
    Position,
    StoredJSON,
    decode_body,
    decode_json,
)

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["BrowseState", "browse", "to_message"]

BrowseState = Literal["ready", "delayed", "claimed", "expired", "failed", "done"]
_BROWSE_STATES: tuple[str, ...] = get_args(BrowseState)


def to_message(
    queue: str,
    row: MessageRow,
    holder: Holder | None,
    models: Mapping[str, Any],
    refused: list[tuple[Message, str]] | None = None,
) -> Message:
    """A Message from a backend row (columns in MESSAGE_COLUMNS order).

    A typed body comes back as its bound Pydantic model where one is bound. A body the
    model refuses (stored by a process that had not bound it: its validators beyond the
    type's JSON Schema never ran) stays as stored, and the message and why go into
    ``refused`` where one is given: a reader rejects it (Transaction._hold), a browse
    shows it as stored.
    """
    (ref, state, priority, p_session, p_tx, p_num, body, content_type, properties,
     correlation_id, reply_to, enqueued_at, available_at, expires_at, attempts,
     error, origin_queue, type_name, group, _) = row  # fmt: skip
    problem = None
    if type_name is not None and models and (model := models.get(type_name)) is not None:
        value = decode_body(body, content_type)
        try:
            value = model.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError
            problem = _refusal(type_name, model, exc)
    elif content_type == JSON and body is not None:
        value = StoredJSON(body)  # decoded when read (Message.body), if ever
    else:
        value = decode_body(body, content_type)
    # Positional, in Message's field order: this runs for every message dequeued.
    message = Message(
        f"{p_session}/{p_tx}/{p_num}",
        queue,
        value,
        content_type,
        priority,
        decode_json(properties) if properties else {},
        correlation_id,
        reply_to,
        enqueued_at,
        available_at,
        expires_at,
        attempts,
        _STATES[state],
        error,
        origin_queue,
        type_name,
        group,
        ref,
        holder,
    )
    if problem is not None and refused is not None:
        refused.append((message, problem))
    return message


def _refusal(type_name: str, model: type, exc: ValueError) -> str:
    """Why a bound model refused a stored body, as text any database stores (the
    model's message quotes the body: NUL and lone surrogates escaped)."""
    reason = (
        f"the body does not conform to type {type_name!r}'s bound model {model.__name__}: {exc}"
    )
    reason = reason.encode("utf-8", "backslashreplace").decode("utf-8")
    return reason.replace("\x00", "\\x00")


# A message waiting behind its lane's head is ready, to its reader.
_STATES = tuple(MessageState.READY if s is MessageState.WAITING else s for s in MessageState)


def browse(
    context: EngineContext,
    queue: str,
    *,
    limit: int,
    state: str,
    tx: tuple[int, int] | None,
    backend: TxStore | None = None,
    where: str | None = None,
    order_by: Sequence[str] | None = None,
    after: Position | str | tuple[int, int] | None = None,
) -> list[Message]:
    """Messages of a queue in delivery order (or ``order_by``), without taking them.

    As transaction ``tx`` (session, number) sees them; None: as anyone does.
    ``after``: a message's position; the page starts after it, in delivery order.
    """
    start = None if after is None else Position.parse(after)
    if start is not None and (order_by or state == "done"):
        raise ConfigurationError(
            "after= pages through delivery order; it cannot be combined with order_by "
            "or with state='done' (which browses in settle order)"
        )
    if state not in _BROWSE_STATES:
        raise ConfigurationError(f"state must be one of {', '.join(_BROWSE_STATES)}, not {state!r}")
    if not isinstance(limit, int) or limit < 1:
        raise ConfigurationError(f"limit must be a positive integer, not {limit!r}")
    session, number = tx or (0, 0)
    content = context.content(queue)
    if content.spec.kind == "subscription":  # what its topic holds for it is its too
        topics.before_take(context, content.spec, everything=True)
    select = content.selection(where, order_by)
    rows = (backend or context.backend).browse(
        queue, state, limit, session, number, select=select, after=start
    )
    models = context.types.models
    return [to_message(queue, row, None, models) for row in rows]
