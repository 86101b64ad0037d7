"""Every statement the code names exists, and the database accepts every statement.

The names are found in the source, where they are used: the keys of the statement
maps (``self._q[...]``, ``queries[...]``, ``self._templates[...]``), the first
argument of the calls that take a statement's name (``_one``, ``_selected``,
``jobs_read``, ``Effect``, ...), and (name, parameters) pairs. A name held in a local
variable is followed to the constants assigned to it; an f-string becomes a pattern
that must match a statement. The SQLite part has the database ``EXPLAIN`` each
statement; tests/postgresql/test_statements.py has PostgreSQL ``PREPARE`` them.
"""

from __future__ import annotations

import ast
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sluice
from sluice import sql

SRC = Path(sluice.__file__).parent
MAPS = {"_q", "_templates", "queries"}
"""Names of the statement maps, indexed by a statement's name."""
TAKERS = {
    "_one",
    "_read_rows",
    "_write_rows",
    "_selected",
    "_selection",
    "selected",
    "jobs_read",
    "Effect",
    "_close_sessions",
    "_with_selector",
    "statement_rows",
    "statement_count",
    "template_rows",
    "rules_read",
    "rules_write",
}
"""Callables whose first argument is a statement's name."""
SAMPLE = {
    "select": " AND priority > 0",
    "order": "priority, ",
    "value": "1",
    "selector": " AND m.priority > 0",
    "columns": ", m.priority",
}
"""What a template's holes get for the database to check it."""

MADE = "SELECT 1 AS queue_id, n.id * 64 + 1 AS p_num, n.body, {body}n.content_type, n.properties"
SAMPLE_FOR = {
    # The rules engine's enqueue by SQL: per action a derived table of new messages (over
    # their triggers), and its rows (backends/rules.py: rules_made).
    ("sqlite", "rules_insert"): {
        "parts": "n1 AS MATERIALIZED (SELECT 1 AS id, '1' AS body, NULL AS content_type,"
        " '{}' AS properties)",
        "rows": MADE.format(body="") + " FROM n1 AS n",
    },
    ("postgresql", "rules_insert"): {
        "parts": "n1 AS MATERIALIZED (SELECT 1::bigint AS id, '1'::text AS body,"
        " NULL::bytea AS body_bytes, NULL::text AS content_type, '{}'::text AS properties)",
        "rows": MADE.format(body="n.body_bytes, ") + " FROM n1 AS n",
        "done": "SELECT 1 AS settled",
    },
}
"""Holes of particular templates, by dialect and name, that need more than SAMPLE."""


def sample(dialect: str, name: str, hole: str) -> str:
    """What ``hole`` of template ``name`` gets for the database to check it."""
    particular = SAMPLE_FOR.get((dialect, name), {})
    return particular[hole] if hole in particular else SAMPLE[hole]


def dialects_of(path: Path) -> tuple[str, ...]:
    """The dialects whose statements a module names: its backend's, or both."""
    if path.name.startswith("sqlite"):
        return ("sqlite",)
    if path.name.startswith("postgres"):
        return ("postgresql",)
    return sql.DIALECTS


@dataclass(frozen=True)
class Use:
    where: str
    dialects: tuple[str, ...]
    pattern: str
    """A regular expression: the name itself, or an f-string's shape."""


def _values(node: ast.expr, scope: ast.AST) -> list[str] | None:
    """The regular expressions a name expression can take, or None if unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [re.escape(node.value)]
    if isinstance(node, ast.IfExp):
        body, orelse = _values(node.body, scope), _values(node.orelse, scope)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.JoinedStr):
        shapes = [""]
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                options = _values(part.value, scope) or [r"\w*"]
            else:
                options = _values(part, scope) or []
            shapes = [s + o for s in shapes for o in options]
        return shapes
    if isinstance(node, ast.Name):
        found: list[str] = []
        for sub in ast.walk(scope):
            if isinstance(sub, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == node.id for t in sub.targets
            ):
                found += _values(sub.value, scope) or []
            if (
                isinstance(sub, ast.For)
                and isinstance(sub.target, ast.Name)
                and sub.target.id == node.id
                and isinstance(sub.iter, ast.Tuple | ast.List)
            ):
                for elt in sub.iter.elts:
                    found += _values(elt, scope) or []
        return found or None
    return None


def _name_args(tree: ast.Module, *, backend: bool) -> Iterator[tuple[ast.expr, ast.AST]]:
    """Each expression in a statement-name position, with its enclosing function."""
    # A function and what it nests (lambdas, inner functions) are one scope: names are
    # followed across them.
    bodies = [tree.body, *(n.body for n in tree.body if isinstance(n, ast.ClassDef))]
    functions = [
        node
        for body in bodies
        for node in body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]

    def scope_of(target: ast.AST) -> ast.AST:
        return next((f for f in functions if any(n is target for n in ast.walk(f))), tree)

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if name in MAPS:
                yield node.slice, scope_of(node)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in TAKERS:
                yield node.args[0], scope_of(node)
        elif (
            backend
            and isinstance(node, ast.Tuple)
            and len(node.elts) == 2
            and isinstance(node.elts[0], ast.Constant)
            and isinstance(node.elts[0].value, str)
            and isinstance(node.elts[1], ast.Name | ast.Dict | ast.BinOp | ast.Call)
            and re.fullmatch(r"[a-z]+(_[a-z0-9]+)+|[a-z]+", node.elts[0].value)
        ):
            yield node.elts[0], scope_of(node)


def _passed_on(arg: ast.expr, scope: ast.AST) -> bool:
    """Whether a name comes in as a parameter, or unpacked from a (name, params) step."""
    if isinstance(arg, ast.Starred):
        return True  # f(*step): a (name, params) step, checked where it is made
    if not isinstance(arg, ast.Name):
        return False
    for node in ast.walk(scope):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and arg.id in {
            a.arg for a in node.args.args + node.args.kwonlyargs
        }:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.For | ast.comprehension):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Tuple) and any(
                isinstance(e, ast.Name) and e.id == arg.id for e in ast.walk(target)
            ):
                return True
    return False


def used_statements() -> tuple[list[Use], list[str]]:
    """Where the code names statements, and the name positions it could not follow."""
    uses, unknown = [], []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for arg, scope in _name_args(tree, backend=path.parent.name == "backends"):
            where = f"{path.relative_to(SRC.parent)}:{arg.lineno}"
            patterns = _values(arg, scope)
            if patterns is None:
                if not _passed_on(arg, scope):
                    unknown.append(where)
                continue
            uses += [Use(where, dialects_of(path), p) for p in patterns]
    return uses, unknown


def loaded(dialect: str) -> set[str]:
    schema = '"sluice"' if dialect == "postgresql" else None
    given = dict.fromkeys(
        ("message_columns", "claimed_columns", "spool_columns", "spool_names", "rules_json_body"),
        "x",
    )
    return set(sql.statements(dialect, schema=schema, fragments=given)) | set(
        sql.templates(dialect, schema=schema, fragments=given)
    )


def test_every_name_the_code_uses_is_a_statement() -> None:
    uses, _ = used_statements()
    names = {d: loaded(d) for d in sql.DIALECTS}
    missing = [
        f"{u.where}: {u.pattern} in {d}"
        for u in uses
        for d in u.dialects
        if not any(re.fullmatch(u.pattern, n) for n in names[d])
    ]
    assert not missing
    # Enough of the code is read for this to mean something.
    assert len({u.pattern for u in uses}) > 100


def test_every_name_position_is_followed() -> None:
    # A name that comes in as a parameter or a (name, params) step is checked where the
    # call or the step is made; any other name the reader cannot follow would escape.
    _, unknown = used_statements()
    assert not unknown


def test_every_statement_is_used() -> None:
    uses, _ = used_statements()
    for dialect in sql.DIALECTS:
        patterns = [u.pattern for u in uses if dialect in u.dialects]
        unused = [n for n in loaded(dialect) if not any(re.fullmatch(p, n) for p in patterns)]
        assert not unused, dialect


def test_every_statement_is_valid_sqlite(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'migrated.db'}"):
        pass  # migrated from zero
    from sluice.backends.sqlite_statements import load_queries as _load_queries

    ready, templates = _load_queries()
    filled = {
        n: t.fill(**{h: sample("sqlite", n, h) for h in t.holes}) for n, t in templates.items()
    }
    conn = sqlite3.connect(tmp_path / "migrated.db")
    for text in [*ready.values(), *filled.values()]:
        conn.execute("EXPLAIN " + text, _dummy_params(text)).fetchall()
    conn.close()


def _uncommented(text: str) -> str:
    """A statement without its ``--`` comments (their words may hold a ``?``)."""
    return re.sub(r"--[^\n]*", "", text)


def _dummy_params(text: str) -> dict[str, object] | tuple[object, ...]:
    text = _uncommented(text)
    if "?" in text:  # plain ? placeholders, bound in order
        return (0,) * text.count("?")
    return dict.fromkeys(re.findall(r":(\w+)", text), "[]")


def test_no_sqlite_statement_numbers_its_placeholders() -> None:
    # Python 3.12 deprecates numbered ?NNN placeholders bound from a sequence (they are
    # named ones to sqlite3) and 3.14 refuses them; nor may a statement mix ? and :name.
    from sluice.backends.sqlite_statements import load_queries as _load_queries

    ready, templates = _load_queries()
    for name, commented in [*ready.items(), *((n, t.text) for n, t in templates.items())]:
        text = _uncommented(commented)
        assert not re.search(r"\?\d", text), name
        assert not ("?" in text and re.search(r"(?<!:):[a-z_]", text)), name


# --- the loader ---------------------------------------------------------------------


def test_template_refuses_unknown_and_missing_holes() -> None:
    template = sql.Template(
        "t", "SELECT 1 WHERE x{select} ORDER BY {order}id", frozenset({"select", "order"})
    )
    assert template.fill(select=" AND y", order="") == "SELECT 1 WHERE x AND y ORDER BY id"
    with pytest.raises(ValueError, match="holes"):
        template.fill(select="")
    with pytest.raises(ValueError, match="holes"):
        template.fill(select="", order="", value="1")


def test_a_value_is_not_read_for_holes() -> None:
    template = sql.Template("t", "SET t1 = {value}", frozenset({"value"}))
    assert template.fill(value="'{select}'") == "SET t1 = '{select}'"


def _fake_files(monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    monkeypatch.setattr(sql, "_read", lambda folder, name: files.get(f"{folder}/{name}", ""))
    sql._sections.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    yield
    sql._sections.cache_clear()


def test_common_statements_are_translated_for_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_files(
        monkeypatch,
        {
            "common/queries.sql": "-- name: a\n-- by :id (%)\n"
            "SELECT x::bigint, {message_columns} FROM {schema}.t AS m WHERE id = :id AND x % 2 = 0"
            "{select};\n-- fragment: f\n-- comment\n{schema}.u\n-- name: b\nSELECT 1 FROM {f};",
            "postgresql/queries.sql": "-- name: c\nSELECT %(id)s FROM {schema}.t;",
        },
    )
    given = {"message_columns": "m.a"}
    ready = sql.statements("postgresql", schema='"s"', fragments=given)
    assert ready["a"] == (
        '-- by :id (%%)\nSELECT x::bigint, m.a FROM "s".t AS m WHERE id = %(id)s AND x %% 2 = 0;'
    )
    assert ready["b"] == 'SELECT 1 FROM "s".u;'
    assert ready["c"] == 'SELECT %(id)s FROM "s".t;'
    sqlite = sql.statements("sqlite", fragments=given)
    assert (
        sqlite["a"]
        == "-- by :id (%)\nSELECT x::bigint, m.a FROM t AS m WHERE id = :id AND x % 2 = 0;"
    )
    assert sqlite["b"] == "SELECT 1 FROM u;"
    assert sql.templates("sqlite", fragments=given)["a"].holes == {"select"}


def test_a_name_defined_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_files(
        monkeypatch,
        {"common/jobs.sql": "-- name: a\nSELECT 1;", "sqlite/jobs.sql": "-- name: a\nSELECT 2;"},
    )
    with pytest.raises(
        ValueError, match=r"common/jobs\.sql and again in sluice/sql/sqlite/jobs\.sql"
    ):
        sql.statements("sqlite")


def test_an_unknown_brace_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_files(monkeypatch, {"sqlite/queries.sql": "-- name: a\nSELECT {colour} FROM t;"})
    with pytest.raises(ValueError, match=r"\{colour\} in 'a'"):
        sql.statements("sqlite")


def _words(text: str) -> str:
    """A statement without its comments, its whitespace reduced to single spaces."""
    lines = (line for line in text.split("\n") if not line.strip().startswith("--"))
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def test_the_postgresql_claim_variants_stay_in_step_with_the_claim() -> None:
    # The variants are written out in full so that each file shows what runs; this pins
    # them to the claim they vary: the transaction's own enqueues in place of the first
    # "state = 1", and (in a caller's transaction) no relaxing of the caller's commit.
    given = dict.fromkeys(
        ("message_columns", "claimed_columns", "spool_columns", "spool_names", "rules_json_body"),
        "x",
    )
    found = sql.statements("postgresql", schema='"s"', fragments=given)
    own = "(state = 1 OR (state = 0 AND p_session = %(session)s AND p_tx = %(tx)s))"
    relax = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"
    for base in ("claim", "claim_lanes"):
        text = _words(found[base])
        assert relax in text
        with_own = text.replace("AND state = 1 AND", f"AND {own} AND", 1)
        assert _words(found[base.replace("claim", "claim_with_own")]) == with_own
        assert _words(found[f"{base}_in_caller_tx"]) == text.replace(relax, "")
        in_caller = with_own.replace(relax, "")
        assert _words(found[f"{base.replace('claim', 'claim_with_own')}_in_caller_tx"]) == in_caller
    # The stream take moves what the claim would pick: the same subquery, unrelaxed.
    pick = re.compile(r"ANY\(ARRAY\( SELECT id FROM .*? FOR UPDATE SKIP LOCKED\)\)")
    claim_pick = pick.search(_words(found["claim"]))
    take_pick = pick.search(_words(found["stream_take"]))
    assert claim_pick is not None
    assert take_pick is not None
    assert take_pick[0] == claim_pick[0].replace(relax, "")
