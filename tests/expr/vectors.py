"""The expression language's test vectors (vectors.json), shared by every engine's tests.

A vector is an expression, a message and the value the language defines for
it, or an expression and a fragment of the ExpressionError it must raise. A rule
vector (``"rule"``) is the expression of a rule's new body, a message, and the body
as JSON text or the run-time error the rule must raise (docs/expressions.md,
"Numbers" and "Run-time errors").
The Python evaluator, SQLite, PostgreSQL and Spark all run the same file;
this module turns a vector's message into what each engine reads and decides
whether an engine's answer is the expected one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from sluice.expr import Type
from sluice.message import encode_json, is_json

__all__ = [
    "MESSAGE_DEFAULTS",
    "VECTORS_FILE",
    "RuleVector",
    "Stored",
    "Vector",
    "load_rule_vectors",
    "load_vectors",
    "normalise",
    "python_row",
    "same_json",
    "same_value",
    "stored",
]

VECTORS_FILE: Final = Path(__file__).with_name("vectors.json")

JSON: Final = "application/json"

MESSAGE_DEFAULTS: Final[Mapping[str, Any]] = {
    "body": {},
    "content_type": JSON,
    "props": {},
    "priority": 0,
    "type": None,
    "enqueued_at": 1_700_000_000.0,
    "available_at": 1_700_000_000.0,
    "expires_at": None,
    "attempts": 0,
    "correlation_id": None,
    "reply_to": None,
}
"""What a vector's message has where it says nothing."""

_VALUE_KEYS: Final = frozenset({"id", "message", "expr", "expected", "want", "note"})
_ERROR_KEYS: Final = frozenset({"id", "expr", "error", "note"})
_RULE_KEYS: Final = frozenset({"id", "message", "rule", "body", "raises", "note"})
_TYPES: Final = ("boolean", "number", "text")


@dataclass(frozen=True, slots=True)
class Vector:
    id: str
    expr: str
    message: Mapping[str, Any]
    """The whole message: the vector's fields over MESSAGE_DEFAULTS (empty for errors)."""
    expected: Any = None
    error: str | None = None
    """For an error vector: a fragment of the ExpressionError's message."""
    want: Type | None = None
    """The type the expression is parsed as (``parse(..., want=)``), if the vector says."""


@dataclass(frozen=True, slots=True)
class RuleVector:
    id: str
    rule: str
    """A rule's ENQUEUE body expression over the triggering message."""
    message: Mapping[str, Any]
    body: str | None = None
    """The new body as JSON text (XML as a JSON string); None: ``raises``."""
    raises: str | None = None
    """The run-time error's text (the error message's reason)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A message as the SQL engines store it: the columns the compilers read as ``m.*``."""

    body: str
    properties: str | None
    """JSON text; NULL when the message has no properties."""
    content_type: str | None
    """NULL for application/json itself."""
    priority: int
    enqueued_at: float
    available_at: float
    expires_at: float | None
    attempts: int
    type: str | None
    correlation_id: str | None
    reply_to: str | None

    def columns(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_vectors(path: Path = VECTORS_FILE) -> list[Vector]:
    """Every vector of the file, checked for shape (a malformed vector fails loudly)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path.name}: expected a JSON list of vectors")
    return [_vector(case) for case in raw if "rule" not in case]


def load_rule_vectors(path: Path = VECTORS_FILE) -> list[RuleVector]:
    """The file's rule vectors, checked for shape."""
    found = []
    for case in json.loads(path.read_text(encoding="utf-8")):
        if "rule" not in case:
            continue
        ident = case.get("id")
        if set(case) - _RULE_KEYS or ("body" in case) == ("raises" in case):
            raise ValueError(f"rule vector {ident}: id, message, rule, and body or raises")
        json.loads(case.get("body") or "null")  # the body is JSON text
        message = {**MESSAGE_DEFAULTS, **case.get("message", {})}
        found.append(RuleVector(ident, case["rule"], message, case.get("body"), case.get("raises")))
    return found


def _vector(case: Any) -> Vector:
    if not isinstance(case, dict) or not isinstance(case.get("id"), str):
        raise ValueError(f"a vector must be an object with a string id: {case!r}")
    ident = case["id"]
    if not isinstance(case.get("expr"), str):
        raise ValueError(f"vector {ident}: expr must be a string")
    if "error" in case:
        if set(case) - _ERROR_KEYS or not isinstance(case["error"], str):
            raise ValueError(f"vector {ident}: an error vector has id, expr and error only")
        return Vector(ident, case["expr"], {}, error=case["error"])
    if set(case) - _VALUE_KEYS or "expected" not in case:
        raise ValueError(f"vector {ident}: a value vector has id, message, expr and expected")
    message = case.get("message", {})
    if not isinstance(message, dict) or set(message) - set(MESSAGE_DEFAULTS):
        raise ValueError(f"vector {ident}: message fields are {', '.join(MESSAGE_DEFAULTS)}")
    want = case.get("want")
    if want is not None and want not in _TYPES:
        raise ValueError(f"vector {ident}: want is one of {', '.join(_TYPES)}")
    full = {**MESSAGE_DEFAULTS, **message}
    if not is_json(full["content_type"]) and not isinstance(full["body"], str):
        raise ValueError(f"vector {ident}: a body that is not JSON is given as a string")
    return Vector(ident, case["expr"], full, expected=case["expected"], want=want)


def python_row(message: Mapping[str, Any]) -> dict[str, Any]:
    """The row ``compile_python``'s functions read, as enqueue builds it."""
    content_type = message["content_type"]
    json_body = is_json(content_type)
    return {
        "body": message["body"] if json_body else None,
        "raw": encode_json(message["body"]) if json_body else message["body"],
        "props": dict(message["props"]),
        "priority": message["priority"],
        "type": message["type"],
        "enqueued_at": message["enqueued_at"],
        "available_at": message["available_at"],
        "expires_at": message["expires_at"],
        "attempts": message["attempts"],
        "correlation_id": message["correlation_id"],
        "reply_to": message["reply_to"],
        "content_type": content_type,
        "properties": {},
    }


def stored(message: Mapping[str, Any]) -> Stored:
    """The message's row in a SQL table, as sluice stores it."""
    content_type = message["content_type"]
    body = message["body"]
    return Stored(
        body=encode_json(body) if is_json(content_type) else cast(str, body),
        properties=encode_json(message["props"]) if message["props"] else None,
        content_type=None if content_type == JSON else content_type,
        priority=message["priority"],
        enqueued_at=message["enqueued_at"],
        available_at=message["available_at"],
        expires_at=message["expires_at"],
        attempts=message["attempts"],
        type=message["type"],
        correlation_id=message["correlation_id"],
        reply_to=message["reply_to"],
    )


def normalise(value: Any, kind: Type) -> Any:
    """An engine's answer as the JSON value it stands for, read by the static type.

    SQLite answers booleans with 1 and 0, and every engine may answer a number as
    int, float or Decimal; anything that is not of the type is returned as is
    (so that the comparison fails and shows it).
    """
    if value is None:
        return None
    if kind == "boolean" and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if kind == "number" and not isinstance(value, bool | str):
        try:
            return float(value)
        except (TypeError, ValueError):
            return value
    return value


def same_value(actual: Any, expected: Any, *, rel: float = 1e-9) -> bool:
    """Whether a normalised answer is the expected one; numbers to a relative tolerance."""
    if expected is None or actual is None:
        return actual is None and expected is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and math.isclose(
            actual, expected, rel_tol=rel, abs_tol=1e-12
        )
    return type(actual) is type(expected) and bool(actual == expected)


def same_json(actual: Any, expected: Any) -> bool:
    """Whether two decoded JSON values are the same, number by number of the same form (8
    is not 8.0), whatever the order of an object's keys."""
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            same_json(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return len(actual) == len(expected) and all(
            same_json(a, e) for a, e in zip(actual, expected, strict=True)
        )
    return bool(actual == expected)
