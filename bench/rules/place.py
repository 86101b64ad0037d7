"""Where one case of ``bench.rules`` runs: a fresh database, removed after the case.

A SQLite file in a new temporary directory (sluice's default durability, group commit), or a
PostgreSQL schema of its own (``bench_rules_<case>``), dropped before and after the case.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sluice
from bench.harness import PG_CONNINFO, drop_schema, pg_conninfo

__all__ = ["SYSTEMS", "Place", "fresh"]

SYSTEMS = ("sqlite", "postgresql")


@dataclass(frozen=True)
class Place:
    """A database made for one case, open."""

    system: str
    url: str
    db: sluice.Database
    schema: str = ""

    def analyze(self) -> None:
        """Refresh PostgreSQL's statistics of the messages just loaded (SQLite: nothing).

        A schema made seconds ago has none until autovacuum's next look (a minute by
        default); the bench runs each PostgreSQL case both ways (docstring of bench.rules).
        """
        if not self.schema:
            return
        import psycopg  # only the PostgreSQL cases need it

        with psycopg.connect(pg_conninfo(self.url), autocommit=True) as conn:
            conn.execute(f'ANALYZE "{self.schema}".messages')


@contextlib.contextmanager
def fresh(system: str, case: str, tmp_root: Path) -> Iterator[Place]:
    """A new, empty database for ``case`` on ``system``; removed when the block ends."""
    if system == "sqlite":
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-rules-{case}-", dir=tmp_root))
        url = f"sqlite:///{tmp / 'rules.db'}"
        try:
            with sluice.connect(url) as db:
                yield Place(system, url, db)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if system != "postgresql":
        raise ValueError(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    schema = f"bench_rules_{case}"
    url = f"{PG_CONNINFO}?schema={schema}"
    drop_schema(PG_CONNINFO, schema)
    try:
        with sluice.connect(url) as db:
            yield Place(system, url, db, schema)
    finally:
        drop_schema(PG_CONNINFO, schema)
