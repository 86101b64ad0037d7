"""An extra that is not installed is named where the part that needs it is declared or
started, with exit 2 and nothing stored: never as a traceback at the first message.

Each test runs sluice in a subprocess with the extra's module blocked
(``sys.modules[name] = None`` before sluice is imported), as an installation without
the extra would have it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sluice
from sluice.extras import install_hint

XML_RULES = """
CREATE QUEUE offers;
CREATE QUEUE quotes;
CREATE RULE quote FOR offers IF true THEN
  ENQUEUE xmlelement(name quote, xmlattributes(body.id AS id)) INTO quotes;
"""

SCHEMA = '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="a"/></xs:schema>'


def without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a Python in which ``module`` cannot be imported."""
    blocked = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", blocked + code], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def cli_without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``sluice`` command with ``args``, ``module`` blocked."""
    code = f"from sluice.cli import main; sys.exit(main({list(args)!r}))"
    return without(module, code)


def refused(done: subprocess.CompletedProcess[str], extra: str) -> str:
    """Exit 2, no traceback, and an error line naming ``extra`` and its install command;
    that line."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("sluice: error: "), line
    assert f"the '{extra}' extra" in line, line
    assert install_hint(extra) in line, line
    return line


def test_applying_a_rule_that_builds_xml_without_lxml_names_the_extra(tmp_path: Path) -> None:
    rules = tmp_path / "offers.rules"
    rules.write_text(XML_RULES)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    line = refused(cli_without("lxml", "apply", str(rules), "--db", url), "xml")
    assert "line 5: rule 'quote'" in line
    with sluice.connect(url) as db:
        assert db.queues() == []  # nothing stored
        assert db.rules.application.rules == {}


def test_applying_a_rule_that_reads_xpath_without_lxml_names_the_line(tmp_path: Path) -> None:
    rules = tmp_path / "offers.rules"
    rules.write_text(
        "CREATE QUEUE offers;\nCREATE QUEUE big;\nCREATE RULE big FOR offers\n"
        "  IF xpath_number(body, '/offer/@qty') > 9 THEN ENQUEUE body INTO big;\n"
    )
    url = f"sqlite:///{tmp_path / 'q.db'}"
    done = cli_without("lxml", "apply", str(rules), "--db", url)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("sluice: error: line 4: rule 'big' IF condition: "), line
    assert install_hint("xml") in line
    with sluice.connect(url) as db:
        assert db.queues() == []


def test_running_rules_that_build_xml_without_lxml_stops_at_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:  # applied where lxml is installed
        db.apply(XML_RULES)
        db.queue("offers").put({"id": 7})
    line = refused(cli_without("lxml", "run", "--db", url), "xml")
    assert "rule 'quote'" in line
    with sluice.connect(url) as db:  # the message waits for a host that can process it
        assert [m.body for m in db.queue("offers").browse()] == [{"id": 7}]
        assert db.queue("quotes").browse() == []
        assert db.queue("sluice_rule_errors").browse() == []


def test_a_queue_of_an_xml_type_without_lxml_names_the_extra(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:  # the type was defined where lxml is installed
        db.create_type("quote", xml_schema=SCHEMA)
    rules = tmp_path / "typed.rules"
    rules.write_text("CREATE QUEUE offers;\nCREATE QUEUE quotes TYPE quote;\n")
    line = refused(cli_without("lxml", "apply", str(rules), "--db", url), "xml")
    assert "line 2: queue 'quotes' (XML type 'quote')" in line
    with sluice.connect(url) as db:
        assert [q.name for q in db.queues()] == []


def test_creating_an_xml_type_without_lxml_names_the_extra_and_stores_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    done = without(
        "lxml",
        "import sluice\n"
        f"db = sluice.connect({url!r})\n"
        "try:\n"
        f"    db.create_type('quote', xml_schema={SCHEMA!r})\n"
        "except sluice.MissingDependency as exc:\n"
        "    print(exc)\n",
    )
    assert install_hint("xml") in done.stdout, done.stderr
    with sluice.connect(url) as db:
        assert db.message_types() == {}


def test_importing_sluice_spark_without_pyarrow_names_the_extra() -> None:
    done = without(
        "pyarrow",
        "import sluice\n"
        "try:\n"
        "    import sluice.spark\n"
        "except sluice.MissingDependency as exc:\n"
        "    print(exc)\n",
    )
    assert "sluice.spark needs the 'spark' extra" in done.stdout, done.stderr
    assert install_hint("spark") in done.stdout


def test_sluice_pipeline_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    args = ("pipeline", "orders", "--name", "p", "--checkpoint", str(tmp_path / "cp"))
    refused(cli_without("pyarrow", *args, "--sql", "SELECT body FROM messages", "--db", url),
            "spark")  # fmt: skip
    assert not (tmp_path / "cp").exists()


def test_sluice_run_on_spark_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    rules = tmp_path / "copy.rules"
    rules.write_text("CREATE QUEUE a; CREATE QUEUE b;\n"
                     "CREATE RULE copy FOR a IF true THEN ENQUEUE body INTO b;\n")  # fmt: skip
    url = f"sqlite:///{tmp_path / 'q.db'}"
    args = ("run", str(rules), "--engine", "spark", "--checkpoint", str(tmp_path / "cp"))
    refused(cli_without("pyarrow", *args, "--db", url), "spark")
    with sluice.connect(url) as db:
        assert db.queues() == []  # the file was not applied
