"""XML bodies: parsed safely (no entity expansion, no network) and read with XPath 1.0."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from sluice.errors import ExpressionError, InvalidBody

__all__ = ["check_xpath", "evaluate_xpath", "parse_xml"]


def _lxml() -> Any:
    try:
        from lxml import etree  # noqa: PLC0415  (lxml is optional: only XML bodies need it)
    except ImportError:  # pragma: no cover - depends on the installation
        raise ExpressionError("XML needs lxml: pip install 'sluice[xml]'") from None
    return etree


@lru_cache(maxsize=1)
def _parser() -> Any:
    # Entities are left unexpanded and nothing is fetched: a body cannot make the
    # queue read local files or the network, or blow up in memory (billion laughs).
    return _lxml().XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )


def parse_xml(text: str | bytes) -> Any:
    """The document element of an XML body, or InvalidBody saying why it is not XML."""
    etree = _lxml()
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        return etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        raise InvalidBody(f"the body is not well-formed XML ({exc})") from None


@lru_cache(maxsize=256)
def check_xpath(path: str) -> Any:
    """The compiled XPath, or ExpressionError if it is not XPath 1.0."""
    etree = _lxml()
    try:
        return etree.XPath(path)
    except etree.XPathSyntaxError as exc:
        raise ExpressionError(f"{path!r} is not a valid XPath: {exc}") from None


def evaluate_xpath(kind: str, path: str, body: str | bytes | None) -> str | float | bool | None:
    """``string(path)``, ``number(path)`` or ``boolean(path)`` over ``body``; None if not XML.

    A number that is NaN or infinite is None: numbers in the language are finite.
    """
    if body is None:
        return None
    try:
        root = parse_xml(body)
    except InvalidBody:
        return None
    wrapped = {"text": "string", "number": "number", "boolean": "boolean"}[kind]
    try:
        value = check_xpath(f"{wrapped}({path})")(root)
    except _lxml().XPathError:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN (no number there) and infinities (1 div 0) are no numbers
    if isinstance(value, str):
        # lxml's string results are str subclasses that keep the whole parsed
        # document alive; the caller gets the text only.
        return str(value)
    return value  # type: ignore[no-any-return]
