"""XML bodies: parsed safely (no entity expansion, no files, no network) and read with XPath 1.0;
XML Schemas compiled from one self-contained document; text escaped and nodes selected
for the XML that rules build."""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from typing import Any, Final

from sluice.errors import ExpressionError, InvalidBody, TypeDefinitionError
from sluice.extras import load

__all__ = [
    "check_node_xpath",
    "check_xpath",
    "escape_attribute",
    "escape_text",
    "evaluate_xpath",
    "node_selection",
    "parse_xml",
    "parse_xml_schema",
    "select_nodes",
]

_XSD = "{http://www.w3.org/2001/XMLSchema}"
# Schema elements that pull in another document by its schemaLocation.
_SCHEMA_LOADS = tuple(f"{_XSD}{tag}" for tag in ("include", "import", "redefine", "override"))


@lru_cache(maxsize=1)
def _lxml() -> Any:
    # lxml is optional: only XML bodies and XPath need it. Said as every missing extra is
    # (sluice.extras); cached, as every body read asks, and a failure is not cached.
    return load("lxml.etree", "xml", "XML (bodies, XML Schemas, XPath)")


@lru_cache(maxsize=1)
def _parser() -> Any:
    # Entities are left unexpanded and nothing is fetched: a body cannot make the
    # queue read local files or the network, or blow up in memory (billion laughs).
    return _lxml().XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )


def parse_xml(text: str | bytes) -> Any:
    """The document element of an XML body, or InvalidBody saying why it cannot be taken:
    not XML, past the parser's limits, or declaring or using entities."""
    root = _read(text)
    if root.getroottree().docinfo.internalDTD is not None:  # only a DOCTYPE costs more
        _refuse_entities(root)
    return root


def _read(text: str | bytes) -> Any:
    # Entities are left in the tree as references: reading a stored body (XPath in a
    # selection) sees the document around them, as it did when it was stored.
    etree = _lxml()
    if not isinstance(text, str | bytes):
        raise InvalidBody(f"XML is text, str or bytes, not {type(text).__name__}")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        return etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        if exc.code == etree.ErrorTypes.ERR_RESOURCE_LIMIT:
            # libxml2 suggests XML_PARSE_HUGE, which sluice does not offer.
            raise InvalidBody(
                f"the XML goes past the parser's limits ({str(exc).split(',')[0]}): sluice "
                "reads at most 256 levels of nesting and expands no entities; send a flatter "
                "document, with the text of any entity written out"
            ) from None
        raise InvalidBody(f"the body is not well-formed XML ({exc})") from None


def _refuse_entities(root: Any) -> None:
    # An unexpanded reference would be read wrongly: XPath skips it and lxml's XML
    # Schema validation fails with an internal error. Refused before it is stored.
    declared = [entity.name for entity in root.getroottree().docinfo.internalDTD.iterentities()]
    used = sorted({entity.name for entity in root.iter(_lxml().Entity)})
    if declared or used:
        names = ", ".join(dict.fromkeys(declared + used))
        raise InvalidBody(
            f"the XML declares or uses entities ({names}), which sluice neither expands nor "
            "fetches (no files, no network); write their text out in the document and leave "
            "the <!ENTITY> declarations out of its DOCTYPE"
        )


def parse_xml_schema(text: str) -> Any:
    """The compiled XML Schema ``text``; TypeDefinitionError saying why it cannot be used.

    A schema is one self-contained document: xs:include, xs:import, xs:redefine and
    xs:override with a schemaLocation would make libxml2 read files.
    """
    etree = _lxml()
    if not isinstance(text, str):
        raise TypeDefinitionError(
            f"xml_schema takes the XML Schema as a str, not {type(text).__name__}"
        )
    try:
        document = parse_xml(text)
    except InvalidBody as exc:
        raise TypeDefinitionError(f"xml_schema is not a usable XML Schema: {exc}") from None
    for element in document.iter(*_SCHEMA_LOADS):
        location = element.get("schemaLocation")
        if location is not None:
            raise TypeDefinitionError(
                f"xml_schema loads another document (xs:{etree.QName(element).localname} "
                f"schemaLocation={location!r}), and sluice reads no files or network for a "
                "schema; put its definitions into this one schema"
            )
    try:
        return etree.XMLSchema(document)
    except etree.XMLSchemaParseError as exc:
        raise TypeDefinitionError(f"xml_schema is not a usable XML Schema: {exc}") from None


@lru_cache(maxsize=256)
def check_xpath(path: str) -> Any:
    """The compiled XPath, or ExpressionError if it is not XPath 1.0."""
    etree = _lxml()
    try:
        return etree.XPath(path)
    except (etree.XPathSyntaxError, ValueError) as exc:
        # ValueError: lxml takes no NUL or control characters in an XPath's text.
        raise ExpressionError(f"{path!r} is not a valid XPath: {exc}") from None


def evaluate_xpath(kind: str, path: str, body: str | bytes | None) -> str | float | bool | None:
    """``string(path)``, ``number(path)`` or ``boolean(path)`` over ``body``; None if not XML.

    A number that is NaN or infinite is None: numbers in the language are finite.
    """
    if body is None:
        return None
    try:
        root = _read(body)
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


# What canonical XML (C14N) escapes: in text & < > and CR; in an attribute's value
# (in double quotes) & < " and the white space a parser would otherwise normalise.
# sluice.expr.sql_rules escapes the same characters in SQL.
_TEXT_ESCAPES: Final = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("\r", "&#xD;"))
_ATTRIBUTE_ESCAPES: Final = (
    ("&", "&amp;"),
    ("<", "&lt;"),
    ('"', "&quot;"),
    ("\t", "&#x9;"),
    ("\n", "&#xA;"),
    ("\r", "&#xD;"),
)


def escape_text(text: str) -> str:
    """``text`` as XML character data, escaped as canonical XML writes it."""
    for char, escaped in _TEXT_ESCAPES:
        text = text.replace(char, escaped)
    return text


def escape_attribute(text: str) -> str:
    """``text`` as an attribute value in double quotes, escaped as canonical XML writes it."""
    for char, escaped in _ATTRIBUTE_ESCAPES:
        text = text.replace(char, escaped)
    return text


def node_selection(path: str) -> str:
    """The XPath ``xpath_nodes`` evaluates for ``path``: the same nodes, but the
    document element in place of the root node, so that selecting ``/`` gives an
    element (not a document with its XML declaration) on every engine."""
    return f"({path})[count(.|/) != 1] | ({path})[count(.|/) = 1]/*"


@lru_cache(maxsize=256)
def check_node_xpath(path: str) -> str:
    """``path`` if it is XPath 1.0 that selects nodes, else ExpressionError."""
    etree = _lxml()
    check_xpath(path)
    # XPath 1.0's result type follows from the expression alone: try it on any document.
    try:
        result = check_xpath(path)(etree.fromstring(b"<x/>"))
        check_xpath(node_selection(path))
    except etree.XPathError as exc:
        raise ExpressionError(f"{path!r} cannot select nodes: {exc}") from None
    if not isinstance(result, list):
        kind = {bool: "boolean", float: "number"}.get(type(result), "string")
        raise ExpressionError(
            f"{path!r} gives a {kind}, not nodes: xpath_nodes selects nodes "
            "(read values with xpath, xpath_number or xpath_boolean)"
        )
    return path


def select_nodes(path: str, body: str | bytes | None) -> str | None:
    """The nodes ``path`` selects in the XML ``body``, serialised one after the other
    (text and attribute values escaped as text); '' when none, None if not XML."""
    if body is None:
        return None
    etree = _lxml()
    try:
        root = _read(body)
        nodes = check_xpath(node_selection(path))(root)
    except (InvalidBody, etree.XPathError):
        return None
    return "".join(_serialised(etree, node) for node in nodes)


def _serialised(etree: Any, node: Any) -> str:
    if isinstance(node, str):  # a text node or an attribute's value
        return escape_text(str(node))
    if isinstance(node.tag, str):
        # An element declares the namespaces it and its descendants use, and no
        # others, as PostgreSQL's xpath() writes it.
        node = copy.deepcopy(node)
        etree.cleanup_namespaces(node)
    return etree.tostring(node, encoding="unicode", with_tail=False)  # type: ignore[no-any-return]
