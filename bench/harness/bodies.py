"""The message bodies every benchmark enqueues: made before timing starts, encoded one way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["body_size", "chunks", "encode", "make_bodies"]

T = TypeVar("T")


def make_bodies(n: int) -> list[dict[str, object]]:
    """N small JSON objects of about 100 bytes once encoded, built before timing starts."""
    return [
        {
            "n": i,
            "kind": "order.created",
            "customer": f"cust-{i % 9973:05d}",
            "amount_cents": (i * 7919) % 100_000,
            "currency": "EUR",
        }
        for i in range(n)
    ]


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """Split items into consecutive slices of at most size elements."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def encode(body: dict[str, object]) -> str:
    """The JSON text contenders that store text or bytes are given (json.dumps defaults)."""
    return json.dumps(body)


def body_size() -> int:
    """Encoded size of a typical body, for the report."""
    return len(encode(make_bodies(20_000)[12_345]))
