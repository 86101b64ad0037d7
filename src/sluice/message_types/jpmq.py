"""Parse JPMQ message type definitions into JSON Schema (draft 2020-12) to validate bodies with."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn

from sluice.errors import TypeDefinitionError

__all__ = ["JpmqType", "parse_jpmq"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words are lexed loosely (any \w run) and checked against _NAME where a name is expected,
# so "9lives" or "größe" is reported as a bad name rather than as a stray character.
_TOKEN = re.compile(r"(?P<skip>\s+|--[^\n]*)|(?P<word>\w+)|(?P<punct>[;:])")
_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$"
_SCALARS: dict[str, dict[str, Any]] = {
    # JPMQ identifiers are opaque keys that producers send as numbers or strings.
    "IDENT": {"type": ["string", "integer"]},
    "INTEGER": {"type": "integer"},
    "REAL": {"type": "number"},
    "STRING": {"type": "string"},
    "BOOLEAN": {"type": "boolean"},
    "DATE": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
    "TIMESTAMP": {"type": "string", "pattern": _TIMESTAMP},
}
_TYPES = ", ".join(_SCALARS) + " or REFERENCE TO <node>"
_CLOSERS = ("END", "NODE", "ROOT")  # words that end a node's attribute list


@dataclass(frozen=True, slots=True)
class JpmqType:
    """A parsed JPMQ message type: its name, its root node and the JSON Schema of its bodies."""

    name: str
    root: str
    # Excluded from the hash so a JpmqType stays hashable although the schema is a dict.
    schema: dict[str, Any] = field(hash=False)


class _Token(NamedTuple):
    kind: str  # "word", ";", ":" or "eof" ("char" only for error positions)
    text: str
    line: int
    column: int


def _fail(tok: _Token, problem: str, expected: str) -> NoReturn:
    raise TypeDefinitionError(f"line {tok.line}, column {tok.column}: {problem}; {expected}")


def _shown(tok: _Token) -> str:
    if tok.kind == "eof":
        return "end of input"
    return repr(tok.text if len(tok.text) <= 30 else tok.text[:27] + "...")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            here = _Token("char", text[pos], line, pos - line_start + 1)
            _fail(here, f"unexpected character {text[pos]!r}", "expected a name, ';' or ':'")
        chunk = match.group()
        if match.lastgroup != "skip":
            kind = "word" if match.lastgroup == "word" else chunk
            tokens.append(_Token(kind, chunk, line, pos - line_start + 1))
        elif "\n" in chunk:
            line += chunk.count("\n")
            line_start = pos + chunk.rindex("\n") + 1
        pos = match.end()
    tokens.append(_Token("eof", "", line, pos - line_start + 1))
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def next(self) -> _Token:
        tok = self.peek()
        self.pos += tok.kind != "eof"  # eof is never consumed: reading past the end stays safe
        return tok

    def keyword(self, tok: _Token) -> str:
        # ASCII only: str.upper() maps some non-ASCII letters (dotless i) onto keyword letters.
        return tok.text.upper() if tok.kind == "word" and tok.text.isascii() else ""

    def expect(self, kind: str, expected: str, problem: str = "") -> _Token:
        # kind is a token kind ("word", ";", ":") or an upper-case keyword; they never clash.
        tok = self.next()
        if kind not in (tok.kind, self.keyword(tok)):
            _fail(tok, f"{problem}found {_shown(tok)}", f"expected {expected}")
        return tok

    def name(self, expected: str) -> _Token:
        tok = self.expect("word", expected)
        if not _NAME.fullmatch(tok.text):
            _fail(tok, f"invalid name {_shown(tok)}", "names match [A-Za-z_][A-Za-z0-9_]*")
        return tok

    def parse(self) -> JpmqType:
        missing = "missing the DEFINE MESSAGETYPE header, "
        self.expect("DEFINE", "DEFINE MESSAGETYPE <name>; first", missing)
        self.expect("MESSAGETYPE", "MESSAGETYPE after DEFINE", missing)
        title = self.name("the message type name after DEFINE MESSAGETYPE").text
        self.expect(";", "';' after the message type name")
        nodes: dict[str, dict[str, Any]] = {}
        refs: list[_Token] = []
        root: _Token | None = None
        while True:
            tok = self.next()
            word = self.keyword(tok)
            if word == "NODE":
                self.node(nodes, refs)
            elif word == "ROOT":
                target = self.name("the root node name after ROOT")
                self.expect(";", "';' after the root node name")
                if root is not None:
                    _fail(tok, "more than one ROOT", f"keep one (ROOT {root.text}; came first)")
                root = target
            elif word == "END":
                self.expect(";", "';' after the final END")
                break
            else:
                _fail(tok, f"found {_shown(tok)}", "expected NODE <name>;, ROOT <node>; or END;")
        tail = self.next()
        if tail.kind != "eof":
            _fail(tail, f"text after the final END;: {_shown(tail)}", "the definition ends there")
        if root is None:
            _fail(tok, "missing ROOT", "add ROOT <node>; before the final END;")
        # Checked only now because a reference or ROOT may name a node defined further down.
        for ref in [*refs, root]:
            if ref.text not in nodes:
                known = ", ".join(nodes) or "none yet"
                _fail(ref, f"undefined node {ref.text!r}", f"define it or use one of: {known}")
        entry = f"#/$defs/{root.text}"
        schema = {"$schema": _DIALECT, "title": title, "$ref": entry, "$defs": nodes}
        return JpmqType(name=title, root=root.text, schema=schema)

    def node(self, nodes: dict[str, dict[str, Any]], refs: list[_Token]) -> None:
        node = self.name("the node name after NODE")
        self.expect(";", "';' after the node name")
        if node.text in nodes:
            _fail(node, f"duplicate node {node.text!r}", "give each NODE a distinct name")
        properties: dict[str, Any] = {}
        while True:
            # A keyword followed by ':' is an attribute of that name, so "end: INTEGER;" is allowed.
            nxt = self.peek()
            if nxt.kind == "eof" or (self.keyword(nxt) in _CLOSERS and self.peek(1).kind != ":"):
                self.expect("END", f"END; to close node {node.text!r}")
                self.expect(";", "';' after END")
                break
            attr = self.name(f"an attribute name or END; in node {node.text!r}")
            self.expect(":", f"':' after attribute {attr.text!r}")
            if attr.text in properties:
                _fail(attr, f"duplicate attribute {attr.text!r} in node {node.text!r}", "rename it")
            properties[attr.text] = self.attribute_type(refs)
            self.expect(";", f"';' after the type of attribute {attr.text!r}")
        # No additionalProperties: content is open, producers may send fields the type omits.
        nodes[node.text] = {"type": "object", "properties": properties, "required": [*properties]}

    def attribute_type(self, refs: list[_Token]) -> dict[str, Any]:
        tok = self.next()
        word = self.keyword(tok)
        if word in _SCALARS:
            return copy.deepcopy(_SCALARS[word])
        if word == "REFERENCE":
            self.expect("TO", "TO after REFERENCE")
            target = self.name("the referenced node name after REFERENCE TO")
            refs.append(target)
            # A reference is set-valued: any number of nested objects of the target node.
            return {"type": "array", "items": {"$ref": f"#/$defs/{target.text}"}}
        what = "unknown attribute type" if tok.kind == "word" else "missing attribute type, found"
        _fail(tok, f"{what} {_shown(tok)}", f"use one of {_TYPES}")


def parse_jpmq(text: str) -> JpmqType:
    """Parse one JPMQ definition; raise TypeDefinitionError saying where and what is wrong."""
    if not isinstance(text, str):
        raise TypeDefinitionError(f"a JPMQ definition must be a str, not {type(text).__name__}")
    return _Parser(_tokenize(text)).parse()
