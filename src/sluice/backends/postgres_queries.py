"""The PostgreSQL backend's named statements and templates, loaded once per schema."""

from __future__ import annotations

from sluice import sql
from sluice.backends.postgres_schema import MESSAGES_TABLE, quote_schema
from sluice.backends.records import MESSAGE_COLUMNS
from sluice.expr.postgres import json_body

__all__ = ["load_queries"]


def load_queries(schema: str) -> tuple[dict[str, str], dict[str, sql.Template]]:
    """The statements ready to run, and the templates selections and properties fill."""
    # The schema stores application/json as NULL; rows read back carry it spelled out.
    columns = ", ".join(
        "coalesce(m.content_type, 'application/json') AS content_type"
        if c == "content_type"
        else f"m.{c}"
        for c in (*MESSAGE_COLUMNS, "body_bytes")
    )
    fragments = {
        "message_columns": columns,
        "spool_columns": ", ".join(f"m.{c}" for c, _ in MESSAGES_TABLE),
        "spool_names": ", ".join(c for c, _ in MESSAGES_TABLE),
        "rules_json_body": json_body("m"),
    }
    quoted = quote_schema(schema)
    return (
        sql.statements("postgresql", schema=quoted, fragments=fragments),
        sql.templates("postgresql", schema=quoted, fragments=fragments),
    )
