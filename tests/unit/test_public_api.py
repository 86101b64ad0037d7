"""The public names are exactly those in __all__, and each is documented."""

from __future__ import annotations

import inspect

import sluice
from sluice import errors


def test_all_names_exist_and_are_documented() -> None:
    for name in sluice.__all__:
        obj = getattr(sluice, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_every_public_error_derives_from_the_root() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.SluiceError)
        assert name in sluice.__all__
        assert cls.__doc__
        assert str(cls()) == cls.__doc__.strip()


def test_error_tree_is_drawn_in_the_module_docstring() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc, f"{name} missing from the tree in sluice.errors"


def test_the_asyncio_api_names_exist_and_are_documented() -> None:
    import sluice.aio

    for name in sluice.aio.__all__:
        obj = getattr(sluice.aio, name)
        assert obj.__doc__, f"sluice.aio.{name} has no docstring"
