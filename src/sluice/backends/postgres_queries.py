"""The PostgreSQL backend's named statements, loaded once per schema."""

from __future__ import annotations

from sluice import sql
from sluice.backends.postgres_schema import MESSAGES_TABLE, quote_schema
from sluice.backends.records import MESSAGE_COLUMNS, SLOTS

__all__ = ["DELIVERY_ORDER", "load_queries", "plain"]

_DB_NOW = "extract(epoch FROM clock_timestamp())"
_RELAX = "AND set_config('synchronous_commit', 'off', true) IS NOT NULL"
_READY_OR_OWN = "(state = 1 OR (state = 0 AND p_session = %(session)s AND p_tx = %(tx)s))"


DELIVERY_ORDER = "priority DESC, id"
_MAX_SELECTIONS = 256


def load_queries(schema: str) -> dict[str, str]:
    """The named queries, ready to run; claims also come as ``<name>_in_caller_tx``.

    Those leave out the relax clause: inside a caller's transaction (the outbox)
    sluice must not change how the caller's commit is flushed. Claims and browse
    keep ``{select}`` and ``{order}`` for selections (see ``PostgresBackend.selected``).
    """
    # The schema stores application/json as NULL; rows read back carry it spelled out.
    columns = ", ".join(
        "coalesce(m.content_type, 'application/json') AS content_type"
        if c == "content_type"
        else f"m.{c}"
        for c in (*MESSAGE_COLUMNS, "body_bytes")
    )
    named = dict(sql.queries("postgresql"))
    # A Spark stream's take (postgres_spool.py) moves what a claim would pick: the same
    # conditions, order and locks; the rows are deleted and sent out as CSV, every
    # column. Its transaction relaxes its own commit.
    claim = named["claim"]
    pick = claim[claim.index("FROM (\n") + len("FROM (") : claim.index(") AS pick")]
    named["stream_take"] = (
        "COPY (DELETE FROM {schema}.messages AS m USING ("
        + pick.replace("{claimable}", "state = 1").replace(" {relax}", "")
        + ") AS pick WHERE m.id = pick.id RETURNING {spool_columns}) TO STDOUT (FORMAT csv);"
    )
    for name in ("claim", "claim_lanes"):
        claim = named.pop(name)
        named[name] = claim.replace("{claimable}", "state = 1")
        named[name.replace("claim", "claim_with_own")] = claim.replace("{claimable}", _READY_OR_OWN)
    queries: dict[str, str] = {}
    for name, raw in named.items():
        text = (
            raw.replace("{message_columns}", columns)
            .replace("{spool_columns}", ", ".join(f"m.{c}" for c, _ in MESSAGES_TABLE))
            .replace("{spool_names}", ", ".join(c for c, _ in MESSAGES_TABLE))
            .replace("{schema}", quote_schema(schema))
            .replace("{db_now}", _DB_NOW)
        )
        if "{relax}" in text:
            queries[f"{name}_in_caller_tx"] = text.replace(" {relax}", "")
        queries[name] = text.replace("{relax}", _RELAX)
    index = queries.pop("slot_index")
    for slot in SLOTS:  # one statement per slot: nothing fills a column name in at run time
        queries[f"slot_index_{slot}"] = index.replace("{slot}", slot)
    return queries


def plain(template: str) -> str:
    return template.replace("{select}", "").replace("{order}", DELIVERY_ORDER)
