"""sluice as a user installs it: the sdist, a wheel built from it, and a clean venv per extra.

One venv for the module holds the wheel. The README's quickstart runs there with no extra;
then each extra is checked on its own: with every extra's packages taken out, using it
fails in one line naming ``sluice-queue[extra]``; installed, its smallest example runs.
Taking the previous extra out (pip uninstall, a second or two) is what keeps one extra's
packages from making another's example pass that would fail for a user who installed
only that one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import drop_schema, fresh_postgres_url, unavailable

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# One of each kind of file a build must carry beside the code (the test compares every file).
DATA = (
    "sluice/py.typed",
    "sluice/demo/procurement.rules",
    "sluice/sql/sqlite/schema.sql",
    "sluice/sql/postgresql/schema.sql",
    "sluice/server/console/templates/base.html",
    "sluice/server/console/static/console.css",
    "sluice/server/console/static/htmx.min.js",
    "pyspark_sluice/__init__.py",
)

# What the parent process's environment must not lend the venv: its interpreter, its
# packages, its databases, its Spark workers' interpreter (set by tests/conftest.py).
FOREIGN = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SLUICE_URL", "SLUICE_DB",
           "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")  # fmt: skip


def run(
    args: list[str | Path], *, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def succeeded(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    """Built from the sdist, not from the checkout."""


# The distributions that provide any extra's modules, as the venv's pip knows them.
EXTRAS_INSTALLED = """
import importlib.metadata, json
from sluice.extras import EXTRAS
modules = {m for ms in EXTRAS.values() for m in ms}
found = importlib.metadata.packages_distributions()
print(json.dumps(sorted({d for m in modules for d in found.get(m, [])})))
"""


@dataclass(frozen=True)
class Venv:
    path: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def sluice(self) -> Path:
        return self.path / "bin" / "sluice"

    def pip(self, *args: str | Path) -> None:
        """pip, with this machine's configured indexes and find-links."""
        succeeded(run([self.python, "-m", "pip", *args], cwd=self.path, timeout=900))

    def install(self, extra: str | None = None) -> None:
        self.pip("install", "--quiet", f"{self.wheel}[{extra}]" if extra else self.wheel)

    def without_extras(self) -> None:
        """Uninstall whatever provides a module of any extra: the wheel as if alone."""
        installed = json.loads(self.script(EXTRAS_INSTALLED, cwd=self.path))
        if installed:
            self.pip("uninstall", "--yes", "--quiet", *installed)

    def script(self, code: str, *, cwd: Path, timeout: float = 300) -> str:
        """Run ``code`` with the venv's interpreter in ``cwd``; its stdout."""
        return succeeded(run([self.python, "-c", textwrap.dedent(code)],
                             cwd=cwd, timeout=timeout)).stdout  # fmt: skip


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """The sdist built from this checkout, and the wheel built from the unpacked sdist."""
    out = tmp_path_factory.mktemp("dist")
    build: list[str | Path] = [sys.executable, "-m", "build", "--outdir", out]
    succeeded(run([*build, "--sdist", ROOT], cwd=out))
    (sdist,) = out.glob("sluice_queue-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(out / "unpacked", filter="data")
    (unpacked,) = (out / "unpacked").iterdir()
    succeeded(run([*build, "--wheel", unpacked], cwd=out))
    (wheel,) = out.glob("sluice_queue-*.whl")
    return Dists(sdist, wheel)


@pytest.fixture(scope="module")
def venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A clean venv holding the wheel and no extra."""
    path = tmp_path_factory.mktemp("venv")
    succeeded(run([sys.executable, "-m", "venv", "--clear", path], cwd=path))
    created = Venv(path, dists.wheel)
    created.install()
    return created


def package_files() -> set[str]:
    """The files of the two packages in this checkout, as paths below src/."""
    src = ROOT / "src"
    if (ROOT / ".git").exists():  # what a clone has, and new files not ignored
        listed = succeeded(run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                                "--", "src"], cwd=ROOT)).stdout.split()  # fmt: skip
        files = [ROOT / name for name in listed]
    else:  # a tree unpacked from the sdist
        files = [p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return {str(p.relative_to(src)) for p in files if p.is_file()}


def test_the_sdist_holds_what_a_build_needs(dists: Dists) -> None:
    files = package_files()
    for needed in DATA:
        assert needed in files, f"{needed} is not in the checkout: this test's list is stale"
    assert any(f.startswith("sluice/sql/sqlite/migrations/") for f in files)
    assert any(f.startswith("sluice/sql/postgresql/migrations/") for f in files)

    with tarfile.open(dists.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = {f"src/{f}" for f in files} - names
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".db"))]


def test_the_wheel_built_from_the_sdist_holds_the_packages(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        (info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    missing = package_files() - names
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/", "examples/"))]
    assert "Name: sluice-queue\n" in metadata
    assert f"Requires-Python: {PYPROJECT['project']['requires-python']}\n" in metadata
    for extra in PYPROJECT["project"]["optional-dependencies"]:
        assert f"Provides-Extra: {extra}\n" in metadata
    assert re.search(r"^sluice = sluice\.cli:main$", entry_points, re.MULTILINE)
    assert any(n.startswith(f"{info}/licenses/LICENSE") for n in names)  # MIT, shipped


def test_the_readme_install_section_names_this_build(dists: Dists) -> None:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^## Install\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert found, "README.md has no ## Install section"
    install = found.group(1)
    assert f"pip install dist/{dists.wheel.name}" in install, "the README names another wheel"
    rows = [line.split("|")[1] for line in install.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([\w-]+)`", row)}
    assert listed == set(PYPROJECT["project"]["optional-dependencies"]), "the extras' table"


def readme_quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^## Quickstart\n.*?^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert found, "README.md has no ## Quickstart section with a ```python block"
    return found.group(1)


def test_the_readme_quickstart_runs_with_no_extra(venv: Venv, tmp_path: Path) -> None:
    venv.without_extras()
    where = venv.script("import sluice; print(sluice.__file__)", cwd=tmp_path)
    assert Path(where.strip()).is_relative_to(venv.path), "sluice came from outside the venv"
    venv.script(readme_quickstart(), cwd=tmp_path)
    assert (tmp_path / "quickstart.db").exists()


def assert_cli_names_extra(result: subprocess.CompletedProcess[str], extra: str) -> None:
    """Exit 2 and one error line naming the distribution's extra, last: no traceback.

    Notes before it are allowed ("sluice: created a new database ...").
    """
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert [n for n, line in enumerate(lines) if "error" in line] == [len(lines) - 1], lines
    assert lines[-1].startswith("sluice: error: "), lines
    assert f"pip install 'sluice-queue[{extra}]'" in lines[-1], lines


def assert_raises_missing(venv: Venv, code: str, extra: str, *, cwd: Path) -> None:
    """``code`` raises sluice.MissingDependency with a one-line message naming ``extra``."""
    wrapped = (
        "import sys\nimport sluice\ntry:\n"
        + textwrap.indent(textwrap.dedent(code), "    ")
        + "\nexcept sluice.MissingDependency as exc:\n    print(exc)\n"
        + "else:\n    sys.exit('no MissingDependency was raised')\n"
    )
    (line,) = venv.script(wrapped, cwd=cwd).strip().splitlines()
    assert f"pip install 'sluice-queue[{extra}]'" in line, line


def test_postgres(venv: Venv, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    venv.without_extras()
    url = "postgresql://postgres@127.0.0.1:5432/test"  # never reached: the import fails first
    assert_cli_names_extra(run([venv.sluice, "queues", "--db", url], cwd=tmp_path), "postgres")

    venv.install("postgres")
    # The suite's server (private, or SLUICE_TEST_POSTGRES_URL): skipped here without one,
    # failed in CI. A schema nobody has used: the venv's sluice creates it from zero.
    url = fresh_postgres_url(request.getfixturevalue("postgres_server"))
    try:
        out = venv.script(
            f"""
            import sluice
            with sluice.connect({url!r}) as db:
                db.create_queue("orders").put({{"order": 1}})
                with db.transaction() as tx:
                    (m,) = tx.dequeue("orders", wait=1.0)
                print(m.body)
            """,
            cwd=tmp_path,
        )
        assert out.strip() == "{'order': 1}"
    finally:
        drop_schema(url)


XSD = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="invoice"><xs:complexType><xs:sequence>
    <xs:element name="customer" type="xs:string"/>
    <xs:element name="amount" type="xs:decimal"/>
  </xs:sequence></xs:complexType></xs:element>
</xs:schema>"""


def test_xml(venv: Venv, tmp_path: Path) -> None:
    venv.without_extras()
    define = f'db = sluice.connect("memory://")\ndb.create_type("Invoice", xml_schema={XSD!r})'
    assert_raises_missing(venv, define, "xml", cwd=tmp_path)

    venv.install("xml")
    use = """
        q = db.create_queue("invoices", types=["Invoice"])
        q.put("<invoice><customer>Smith</customer><amount>12.50</amount></invoice>")
        m = q.get(where="xpath(body, '/invoice/customer') = 'Smith'")
        print(m.content_type)
        m.ack()
        """
    out = venv.script(f"import sluice\n{define}\n{textwrap.dedent(use)}", cwd=tmp_path)
    assert out.strip() == "application/xml"


def test_mail(venv: Venv, tmp_path: Path) -> None:
    venv.without_extras()
    result = run([venv.sluice, "demo", "--db", "sqlite:///demo.db"], cwd=tmp_path)
    assert_cli_names_extra(result, "mail")
    assert not (tmp_path / "demo.db").exists(), "the demo stored something before its check"
    mailing = """
        from sluice.demo.mailing import run_mailing_demo
        with sluice.connect("memory://") as db:
            report = run_mailing_demo(db, readers=20, subscribers=4, threads=1)
        """
    assert_raises_missing(venv, mailing, "mail", cwd=tmp_path)

    venv.install("mail")
    # The mass mailing's smallest form: every mail through SMTP to the local sink, once.
    out = venv.script(
        f"import sluice\n{textwrap.dedent(mailing)}\n"
        "print(report.received, sum(report.submitted.values()), report.received_twice,"
        " report.gateway_errors)",
        cwd=tmp_path,
    )
    assert out.split() == ["24", "24", "0", "0"]


def test_pydantic(venv: Venv, tmp_path: Path) -> None:
    # Nothing of sluice can be asked for without pydantic: a model needs pydantic to exist.
    venv.without_extras()
    venv.install("pydantic")
    out = venv.script(
        """
        import sluice
        from pydantic import BaseModel

        class Invoice(BaseModel):
            number: int
            customer: str

        db = sluice.connect("memory://")
        db.create_type(model=Invoice)
        invoices = db.create_queue("invoices", types=["Invoice"])
        invoices.put(Invoice(number=1, customer="Smith"))
        try:
            invoices.put({"number": "one"})
        except sluice.TypeViolation:
            print("refused")
        m = invoices.get()
        print(type(m.body).__name__, m.body.customer)
        m.ack()
        """,
        cwd=tmp_path,
    )
    assert out.split() == ["refused", "Invoice", "Smith"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def serve(venv: Venv, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``sluice serve`` on a free loopback port, once it answers: its base URL and a key."""
    db = f"sqlite:///{tmp_path / 'server.db'}"
    added = succeeded(run([venv.sluice, "keys", "add", "packaging", "--admin", "--json",
                           "--db", db], cwd=tmp_path))  # fmt: skip
    secret = json.loads(added.stdout)["secret"]
    port = free_port()
    log = tmp_path / "serve.log"
    with (
        log.open("w") as output,
        subprocess.Popen(
            [venv.sluice, "serve", "--db", db, "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k not in FOREIGN},
            stdout=output,
            stderr=subprocess.STDOUT,
        ) as server,
    ):
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/openapi.json", timeout=5):  # no key
                        break
                except (urllib.error.URLError, ConnectionError):
                    if time.monotonic() > deadline:
                        raise AssertionError("sluice serve did not answer within 60 s") from None
                try:  # the pause between tries, which also notices a server that died
                    server.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    continue
                raise AssertionError(
                    f"sluice serve exited ({server.returncode}): {log.read_text()}"
                )
            yield base, secret
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_server(venv: Venv, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    venv.without_extras()
    result = run([venv.sluice, "serve", "--db", "sqlite:///nothing.db"], cwd=tmp_path)
    assert_cli_names_extra(result, "server")
    assert not (tmp_path / "nothing.db").exists()  # refused before the database was made

    venv.install("server")
    base, secret = request.getfixturevalue("serve")
    create = urllib.request.Request(
        f"{base}/api/queues",
        data=json.dumps({"name": "orders"}).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(create, timeout=30) as answer:
        assert answer.status == 201
        assert json.load(answer)["name"] == "orders"


def test_spark_without_its_extra(venv: Venv, tmp_path: Path) -> None:
    venv.without_extras()
    assert_raises_missing(venv, "import sluice.spark", "spark", cwd=tmp_path)
    checkpoint = tmp_path / "checkpoint"
    pipeline: list[str | Path] = [venv.sluice, "pipeline", "orders", "--name", "p",
                                  "--checkpoint", checkpoint, "--sql", "SELECT body FROM messages",
                                  "--target", "out", "--db", "sqlite:///pipeline.db"]  # fmt: skip
    assert_cli_names_extra(run(pipeline, cwd=tmp_path), "spark")


def test_spark(venv: Venv, tmp_path: Path) -> None:
    venv.without_extras()
    venv.install("spark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java, and there is none (no java on PATH, no JAVA_HOME)")
    # docs/spark.md's first example, at its smallest: a batch read through format("sluice").
    example = """
        import sluice
        from sluice.spark import absolute_url, spark_session

        url = absolute_url("sqlite:///shop.db")
        with sluice.connect(url) as db:
            db.create_queue("orders").put_many(
                [{"id": 1, "country": "NL"}, {"id": 2, "country": None}], priority=3
            )
            spark = spark_session("local[1]")
            shipped = (
                spark.read.format("sluice")
                .option("url", url)
                .option("queue", "orders")
                .option("where", "body.country IS NOT NULL")
                .option("body_schema", "id BIGINT, country STRING")
                .load()
            )
            print([(r.body.id, r.priority) for r in shipped.collect()])
            spark.stop()
        """
    result = run([venv.python, "-c", textwrap.dedent(example)], cwd=tmp_path, timeout=600)
    assert succeeded(result).stdout.strip().splitlines()[-1] == "[(1, 3)]"
