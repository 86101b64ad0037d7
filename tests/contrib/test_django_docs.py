"""docs/django.md's ```python examples run as written, as one script in a fresh process.

Django's settings are configured once per process and its tasks must be importable by
their path, so the examples run as a script (their tasks live in ``__main__``) rather
than inside the test process as tests/docs/test_examples.py runs the other pages'.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("django", reason="the 'django' extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_django_page_examples_run(tmp_path: Path) -> None:
    blocks = BLOCK.findall((ROOT / "docs" / "django.md").read_text())
    assert len(blocks) >= 3, "docs/django.md lost its runnable examples"
    script = tmp_path / "example.py"
    script.write_text("\n\n".join(blocks))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.match(r"\d+/\d+/1 READY\n", done.stdout), done.stdout
    assert (tmp_path / "sluice.db").exists()
