"""Every ```python example in the README and docs/ runs as written."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from tests.conftest import postgres_base_url

ROOT = Path(__file__).resolve().parents[2]
# django.md's examples configure Django, once per process: tests/contrib/test_django_docs.py
# runs them as a script of their own.
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "django.md"),
]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _param(doc: Path) -> object:
    # spark.md alone, in make test's serial run: its streaming queries start Python
    # source runners that Spark gives 10 s to connect back, which ran out beside the
    # parallel run's workers on two cores (as procurement on Spark did).
    if doc.name == "spark.md":
        return pytest.param(doc, marks=pytest.mark.serial, id=doc.name)
    return pytest.param(doc, id=doc.name)


@pytest.mark.parametrize("doc", [_param(doc) for doc in DOCS])
def test_examples_run(
    doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if doc.name == "postgresql.md":
        server = request.getfixturevalue("postgres_server")
        url = postgres_base_url(server)
        monkeypatch.setenv("SLUICE_POSTGRES_URL", url)
        request.addfinalizer(lambda: _drop_example_objects(url))
    if doc.name == "spark.md":
        request.getfixturevalue("spark")  # the shared session: skipped without Spark locally
    blocks = BLOCK.findall(doc.read_text())
    if doc.name != "cli.md":
        assert blocks, f"{doc.name} has no runnable example"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # spark.md's mkdtemp, cleaned up
    namespace: dict[str, object] = {"__name__": f"docs_{doc.stem}"}
    for n, block in enumerate(blocks):
        code = compile(block, f"{doc.name}[{n}]", "exec")
        exec(code, namespace)
    db = namespace.get("db")
    close = getattr(db, "close", None)
    if close is not None:
        close()


def _drop_example_objects(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS sluice CASCADE")
        conn.execute("DROP TABLE IF EXISTS shop_orders")


def _sh_lines(doc: str) -> list[list[str]]:
    """The commands of the doc's ```sh blocks (```shell ones, such as installing, are not
    run), each split as the shell splits it, comments dropped."""
    import shlex

    text = (ROOT / "docs" / doc).read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, f"{doc} has no ```sh block"
    return [shlex.split(line, comments=True) for line in "".join(blocks).splitlines()]


@pytest.mark.parametrize("doc", ["cli.md", "first-hour.md"])
def test_cli_examples_run(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line of the doc's ```sh blocks, in this process: the same parser and commands,
    and no interpreter to start for each line."""
    import contextlib
    import io

    from sluice.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_URL", raising=False)
    for command in _sh_lines(doc):
        assert command[0] == "sluice"
        if command[1] == "demo":
            # `make run` runs this line as written, on every commit (.ci/run; the next test
            # holds the two to one command), and test_cli.py checks the demo's report. Run
            # here too it took 87 s alone and 427 s in a loaded suite (2026-12-07).
            continue
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(command[1:])
            except SystemExit as exc:  # argparse's own exit
                code = exc.code if isinstance(exc.code, int) else 2
        assert code == 0, (command, out.getvalue(), err.getvalue())


def test_make_run_is_the_demo_cli_md_shows() -> None:
    """cli.md's `sluice demo` line is the command `make run` (and so CI) runs, but for the
    file it names."""
    import shlex

    shown = [c for c in _sh_lines("cli.md") if c[:2] == ["sluice", "demo"]]
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe is not None, "the Makefile has no run target"
    runs = [shlex.split(line.strip()) for line in recipe.group(1).splitlines()]
    made = [c[1:] for c in runs if c[:2] == ["$(BIN)/sluice", "demo"]]
    assert len(shown) == 1, shown
    assert len(made) == 1, made

    def but_the_file(args: list[str]) -> list[str]:
        return ["FILE" if n and args[n - 1] == "--db" else a for n, a in enumerate(args)]

    assert but_the_file(shown[0][1:]) == but_the_file(made[0])


def test_the_schema_versions_the_docs_show_are_this_releases() -> None:
    """docs/postgresql.md quotes `sluice db version`: its numbers go stale at each migration."""
    from sluice import sql

    text = (ROOT / "docs" / "postgresql.md").read_text()
    postgres, sqlite = (sql.migrations(d)[-1][0] for d in ("postgresql", "sqlite"))
    shown = {int(n) for n in re.findall(r"this sluice: (\d+)", text)}
    assert shown == {postgres}, f"postgresql.md shows {shown}; this release's is {postgres}"
    assert f"this release's is {postgres})" in text
    assert f"migrations ({sqlite} in this release)" in text
