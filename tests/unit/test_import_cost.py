"""``import sluice`` loads the queue engine, not its features: the rules language, the
expression parser (sqlglot), JSON Schema, the job scheduler and the gateways load when
first used. Every process that imports sluice pays for what it loads: a CLI command, a
Celery worker's consumer process, each Spark Python worker of a streaming read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_LATER = (
    "sqlglot",
    "jsonschema",
    "referencing",
    "sluice.expr.check",
    "sluice.rules.engine",
    "sluice.jobs.manager",
    "sluice.jobs.worker",
    "sluice.gateways.manager",
)


def _loaded_after(code: str, cwd: Path) -> set[str]:
    """Which of _LATER a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout.splitlines()[-1])) & set(_LATER)


def test_import_sluice_loads_no_feature(tmp_path: Path) -> None:
    assert _loaded_after("import sluice", tmp_path) == set()


def test_a_put_and_get_without_expressions_load_no_parser(tmp_path: Path) -> None:
    code = (
        "import sluice\n"
        "db = sluice.connect('sqlite:///q.db')\n"
        "q = db.create_queue('q')\n"
        "q.put({'n': 1})\n"
        "q.get().ack()\n"
        "db.close()"
    )
    assert _loaded_after(code, tmp_path) == set()


def test_a_cli_command_loads_only_what_it_uses(tmp_path: Path) -> None:
    code = (
        "from sluice.cli.app import main\n"
        "assert main(['--db', 'q.db', 'create', 'q']) == 0\n"
        "assert main(['--db', 'q.db', 'put', 'q', '{}']) == 0\n"
        "assert main(['--db', 'q.db', 'queues']) == 0"
    )
    assert _loaded_after(code, tmp_path) == set()


def test_each_feature_loads_when_first_used(tmp_path: Path) -> None:
    code = (
        "import sluice\n"
        "db = sluice.connect('sqlite:///q.db')\n"
        "q = db.create_queue('q')\n"
        "q.put({'n': 2})\n"
        "assert q.get(where='body.n > 1') is not None\n"
        "db.create_type('order', schema={'type': 'object'})\n"
        "db.jobs\n"
        "sluice.jobs.Worker\n"
        "db.rules\n"
        "db.close()"
    )
    assert _loaded_after(code, tmp_path) == set(_LATER)


def test_the_lazy_names_are_the_ones_documented() -> None:
    import sluice.expr
    import sluice.jobs
    from sluice.expr.check import Relations, Scope, parse

    assert sluice.expr.parse is parse
    assert sluice.expr.Scope is Scope
    assert sluice.expr.Relations is Relations
    assert sluice.jobs.Worker.__name__ == "Worker"
    for package in (sluice.expr, sluice.jobs):
        missing = [n for n in package.__all__ if not hasattr(package, n)]
        assert missing == [], package.__name__
