"""Message types: JSON Schema (given, from a Pydantic model, or from JPMQ's type
definition language) or XML Schema, and the check a body must pass at enqueue."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import fastjsonschema
import jsonschema

from sluice.errors import InvalidBody, TypeDefinitionError, TypeViolation

__all__ = ["MessageType", "TypeRegistry", "definition_of"]

Kind = Literal["json", "xml"]

# Keywords of JSON Schema 2019-09/2020-12 that fastjsonschema (draft 7) does not know:
# a schema that uses one is checked by jsonschema alone.
_NEWER_KEYWORDS = frozenset(
    {
        "prefixItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
        "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "dependentSchemas",
        "dependentRequired", "$anchor", "minContains", "maxContains", "$vocabulary",
    }
)  # fmt: skip


def _keywords(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = set(schema)
        for value in schema.values():
            found |= _keywords(value)
        return found
    if isinstance(schema, list):
        return set().union(*(_keywords(v) for v in schema)) if schema else set()
    return set()


@dataclass(slots=True)
class MessageType:
    """A named message type and its compiled validator."""

    name: str
    kind: Kind
    definition: str
    _validator: Any = field(default=None, repr=False)
    _fast: Any = field(default=None, repr=False)

    @property
    def schema(self) -> Any:
        """The JSON Schema (a dict) or the XML Schema text."""
        return json.loads(self.definition) if self.kind == "json" else self.definition

    def check(self, body: Any, raw: str | bytes) -> None:
        """TypeViolation, spelling out the first violation, unless ``body`` conforms."""
        if self.kind == "json":
            validator = self._validator or self._compile()
            if self._fast is not None:
                # jsonschema takes ~0.4 ms for an order; the generated check ~25 µs.
                # It only decides; a refusal is spelled out by jsonschema below.
                try:
                    self._fast(body)
                    return
                except fastjsonschema.JsonSchemaException:
                    pass
            error = jsonschema.exceptions.best_match(validator.iter_errors(body))
            if error is not None:
                where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the body"
                raise TypeViolation(
                    f"the message does not conform to type {self.name!r}: at {where}, "
                    f"{error.message}; nothing was stored"
                )
            return
        from sluice.expr.xml import parse_xml  # noqa: PLC0415  (lxml is optional)

        schema = self._validator or self._compile()
        document = parse_xml(raw)
        if not schema.validate(document):
            problem = schema.error_log.last_error
            raise TypeViolation(
                f"the message does not conform to XML type {self.name!r}: line {problem.line}: "
                f"{problem.message}; nothing was stored"
            )

    def _compile(self) -> Any:
        if self.kind == "json":
            schema = json.loads(self.definition)
            self._validator = jsonschema.Draft202012Validator(schema)
            if not _keywords(schema) & _NEWER_KEYWORDS:
                try:
                    self._fast = fastjsonschema.compile(schema)
                except fastjsonschema.JsonSchemaDefinitionException:
                    self._fast = None  # jsonschema alone, then
        else:
            from lxml import etree  # noqa: PLC0415  (lxml is optional)

            from sluice.expr.xml import parse_xml  # noqa: PLC0415

            self._validator = etree.XMLSchema(parse_xml(self.definition))
        return self._validator


def definition_of(
    *, schema: Any = None, model: Any = None, jpmq: str | None = None, xml_schema: str | None = None
) -> tuple[str | None, Kind, str]:
    """(the name a definition gives itself, kind, stored definition) from one of the forms."""
    given = [x for x in (schema, model, jpmq, xml_schema) if x is not None]
    if len(given) != 1:
        raise TypeDefinitionError(
            "define a message type with exactly one of schema=, model=, jpmq= or xml_schema="
        )
    if jpmq is not None:
        from sluice.message_types.jpmq import parse_jpmq  # noqa: PLC0415

        parsed = parse_jpmq(jpmq)
        return parsed.name, "json", _json_schema(parsed.schema)
    if model is not None:
        if not hasattr(model, "model_json_schema"):
            raise TypeDefinitionError(f"model= takes a Pydantic model class, not {model!r}")
        return model.__name__, "json", _json_schema(model.model_json_schema())
    if schema is not None:
        return None, "json", _json_schema(schema)
    from sluice.expr.xml import parse_xml  # noqa: PLC0415

    try:
        from lxml import etree  # noqa: PLC0415

        etree.XMLSchema(parse_xml(xml_schema))  # type: ignore[arg-type]
    except (InvalidBody, etree.XMLSchemaParseError) as exc:
        raise TypeDefinitionError(f"xml_schema is not a usable XML Schema: {exc}") from None
    return None, "xml", str(xml_schema)


def _json_schema(schema: Any) -> str:
    if not isinstance(schema, dict):
        raise TypeDefinitionError(f"a JSON Schema is a dict, not {type(schema).__name__}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        return json.dumps(schema, sort_keys=True)
    except jsonschema.exceptions.SchemaError as exc:
        raise TypeDefinitionError(f"not a valid JSON Schema: {exc.message}") from None
    except (TypeError, ValueError) as exc:
        raise TypeDefinitionError(f"the JSON Schema cannot be stored as JSON: {exc}") from None


class TypeRegistry:
    """The message types of a database, as this process knows them, plus bound models."""

    def __init__(self, load: Any) -> None:
        self._load = load
        self._types: dict[str, MessageType] = {}
        self._models: dict[str, type] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> MessageType | None:
        found = self._types.get(name)
        if found is None:  # defined by another process since: look again
            with self._lock:
                self._types = {
                    n: self._types.get(n) or MessageType(n, k, d)
                    for n, (k, d) in self._load().items()
                }
            found = self._types.get(name)
        return found

    def bind(self, name: str, model: type) -> None:
        self._models[name] = model

    def model(self, name: str | None) -> type | None:
        return None if name is None else self._models.get(name)

    def name_of(self, model: type) -> str | None:
        for name, bound in self._models.items():
            if bound is model:
                return name
        return None

    @property
    def models(self) -> dict[str, type]:
        return self._models
