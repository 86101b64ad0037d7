"""A selective or ordering dequeue compiled into the pieces a backend's claim and
browse queries take: a condition and ordering keys in the backend's dialect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.backends.base import Selection
from sluice.expr.sql import Source, SqlCompiler

__all__ = ["compile_selection"]


def compile_selection(
    select: Selection, compiler: Callable[[Source], SqlCompiler], alias: str = "m"
) -> tuple[str, str, dict[str, Any]]:
    """(" AND condition" or "", "key, ... , " or "", parameters) for ``select``.

    The ordering keys come before the delivery order, which breaks their ties.
    """
    sql = compiler(Source(alias=alias, properties=select.slots))
    where = f" AND {sql.compile(select.where)}" if select.where is not None else ""
    keys = [term for node, descending in select.order for term in sql.order_key(node, descending)]
    order = "".join(f"{k}, " for k in keys)
    return where, order, sql.params
