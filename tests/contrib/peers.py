"""Peers' own test suites, shipped in their sdists, unpacked by ``make peers`` under .peers/."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from types import ModuleType

from tests.conftest import unavailable

PEERS = Path(__file__).resolve().parents[2] / ".peers"


def source(distribution: str) -> Path:
    """The unpacked sdist of the installed version of ``distribution``."""
    version = importlib.metadata.version(distribution)
    root = PEERS / f"{distribution}-{version}"
    if not root.is_dir():
        unavailable(f"{distribution} {version}'s sdist is not under {PEERS}: run `make peers`")
    return root


def load(distribution: str, relative: str, name: str) -> ModuleType:
    """A module of the peer's sdist, imported as it is (never copied into this tree)."""
    path = source(distribution) / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
