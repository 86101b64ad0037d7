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


@pytest.mark.parametrize("doc", ["cli.md", "first-hour.md"])
def test_cli_examples_run(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line of the doc's ```sh blocks (```shell ones, such as installing, are not run)."""
    import contextlib
    import io
    import shlex
    import subprocess
    import sys

    from sluice.cli import main

    text = (ROOT / "docs" / doc).read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, f"{doc} has no ```sh block"
    block = "".join(blocks)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_URL", raising=False)
    for line in block.splitlines():
        command = shlex.split(line, comments=True)
        assert command[0] == "sluice"
        if command[1] != "demo":  # in this process: the same parser and commands, and no
            out, err = io.StringIO(), io.StringIO()  # interpreter to start for each line
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(command[1:])
                except SystemExit as exc:  # argparse's own exit
                    code = exc.code if isinstance(exc.code, int) else 2
            assert code == 0, (line, out.getvalue(), err.getvalue())
            continue
        result = subprocess.run(
            [sys.executable, "-m", "sluice.cli", *command[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            # `sluice demo` sends its week of 12,000 mails through a real SMTP sink: 87 s alone
            # on this 2-core machine (69 s of CPU, Python's email package mostly), and over
            # 300 s beside the rest of a loaded suite (2026-12-06). A bound for a hang only.
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, (line, result.stdout, result.stderr)


def test_the_schema_versions_the_docs_show_are_this_releases() -> None:
    """docs/postgresql.md quotes `sluice db version`: its numbers go stale at each migration."""
    from sluice import sql

    text = (ROOT / "docs" / "postgresql.md").read_text()
    postgres, sqlite = (sql.migrations(d)[-1][0] for d in ("postgresql", "sqlite"))
    shown = {int(n) for n in re.findall(r"this sluice: (\d+)", text)}
    assert shown == {postgres}, f"postgresql.md shows {shown}; this release's is {postgres}"
    assert f"this release's is {postgres})" in text
    assert f"migrations ({sqlite} in this release)" in text
