"""Message types: JSON Schema (given, from a Pydantic model, or from JPMQ's type
definition language) or XML Schema, and the check a body must pass at enqueue."""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import fastjsonschema

if TYPE_CHECKING:
    import referencing

from sluice.errors import TypeDefinitionError, TypeViolation

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


# jsonschema (and referencing, its registry) load with the first JSON type that is
# defined or checked, not with sluice: about a tenth of `import sluice` otherwise.


@functools.cache
def _offline() -> referencing.Registry[Any]:
    """Refs resolve inside the schema itself or to the meta-schemas, never by fetching a
    URL: jsonschema's default registry would download http(s) and file: references."""
    import referencing  # noqa: PLC0415  (see above)

    return referencing.Registry()


def _keywords(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = set(schema)
        for value in schema.values():
            found |= _keywords(value)
        return found
    if isinstance(schema, list):
        return set().union(*(_keywords(v) for v in schema)) if schema else set()
    return set()


def _only_local_refs(schema: Any) -> bool:
    """No $id and every $ref a fragment of this document: what fastjsonschema may compile.

    fastjsonschema fetches any other reference with urlopen and caches ids across schemas.
    """
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if "$id" in schema or (isinstance(ref, str) and not ref.startswith("#")):
            return False
        return all(_only_local_refs(v) for v in schema.values())
    if isinstance(schema, list):
        return all(_only_local_refs(v) for v in schema)
    return True


def _validator(schema: Any) -> Any:
    import jsonschema  # noqa: PLC0415  (see _offline)

    return jsonschema.Draft202012Validator(schema, registry=_offline())


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
            try:
                self._check_json(body)
            except RecursionError:
                raise TypeViolation(
                    f"the message could not be checked against type {self.name!r}: the check "
                    "nested too deeply (a body nested very deeply, or a type whose $ref "
                    "refers back to itself); nothing was stored"
                ) from None
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

    def _check_json(self, body: Any) -> None:
        validator = self._validator or self._compile()
        if self._fast is not None:
            # jsonschema takes ~0.4 ms for an order; the generated check ~25 µs.
            # It only decides; a refusal is spelled out by jsonschema below.
            try:
                self._fast(body)
                return
            except fastjsonschema.JsonSchemaException:
                pass
        import jsonschema  # noqa: PLC0415  (see _offline; loaded by _compile already)

        error = jsonschema.exceptions.best_match(validator.iter_errors(body))
        if error is not None:
            where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the body"
            raise TypeViolation(
                f"the message does not conform to type {self.name!r}: at {where}, "
                f"{error.message}; nothing was stored"
            )

    def _compile(self) -> Any:
        if self.kind == "json":
            schema = json.loads(self.definition)
            self._validator = _validator(schema)
            if not _keywords(schema) & _NEWER_KEYWORDS and _only_local_refs(schema):
                try:
                    self._fast = fastjsonschema.compile(schema)
                except fastjsonschema.JsonSchemaDefinitionException:
                    self._fast = None  # jsonschema alone, then
        else:
            from sluice.expr.xml import parse_xml_schema  # noqa: PLC0415  (lxml is optional)

            self._validator = parse_xml_schema(self.definition)
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
        definition = _json_schema(_model_schema(model))
        return model.__name__, "json", definition
    if schema is not None:
        return None, "json", _json_schema(schema)
    from sluice.expr.xml import parse_xml_schema  # noqa: PLC0415  (lxml is optional)

    parse_xml_schema(xml_schema)  # type: ignore[arg-type]
    return None, "xml", str(xml_schema)


def _model_schema(model: Any) -> Any:
    if not isinstance(model, type) or not hasattr(model, "model_json_schema"):
        raise TypeDefinitionError(f"model= takes a Pydantic model class, not {model!r}")
    try:
        return model.model_json_schema()
    # Pydantic raises its own errors (a field of a type JSON Schema cannot describe),
    # and a model may override model_json_schema with code of its own.
    except Exception as exc:
        raise TypeDefinitionError(
            f"model {model.__name__} gives no JSON Schema ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else exc!r}); use field types that "
            "JSON Schema can describe, or pass schema= instead"
        ) from exc


def _json_schema(schema: Any) -> str:
    if not isinstance(schema, dict):
        raise TypeDefinitionError(f"a JSON Schema is a dict, not {type(schema).__name__}")
    import jsonschema  # noqa: PLC0415  (see _offline)

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        # No NaN or Infinity: they are not JSON, and fastjsonschema cannot compile them.
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
        _check_refs(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise TypeDefinitionError(f"not a valid JSON Schema: {exc.message}") from None
    except (TypeError, ValueError) as exc:
        raise TypeDefinitionError(f"the JSON Schema cannot be stored as JSON: {exc}") from None
    except RecursionError:
        raise TypeDefinitionError(
            "the JSON Schema nests too deeply, or its $ref refers back to itself without "
            "reading into the message; flatten it or break the loop"
        ) from None
    return text


def _check_refs(schema: dict[str, Any]) -> None:
    """TypeDefinitionError unless every $ref points into ``schema`` (or at a meta-schema)
    and the refs do not loop back on themselves with nothing read in between."""
    import referencing.exceptions  # noqa: PLC0415  (see _offline)
    import referencing.jsonschema  # noqa: PLC0415
    from jsonschema_specifications import (  # type: ignore[import-untyped]  # noqa: PLC0415
        REGISTRY as META_SCHEMAS,
    )

    resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
    resolver = META_SCHEMAS.combine(_offline()).resolver_with_root(resource)
    try:
        _lookup_refs(resource, resolver)
    except referencing.exceptions.Unresolvable as exc:
        raise TypeDefinitionError(
            f"the JSON Schema has a $ref that does not resolve ({exc}); sluice fetches no "
            "files or URLs for a schema: put the definition under $defs and refer to it "
            "as '#/$defs/<name>'"
        ) from None
    # A loop of $refs that reads nothing shows on any value: try one of each JSON type.
    validator = _validator(schema)
    probes: tuple[object, ...] = (None, True, 0, "", [], {})
    for probe in probes:
        for _ in validator.iter_errors(probe):
            pass


def _lookup_refs(resource: Any, resolver: Any) -> None:
    resolver = resolver.in_subresource(resource)
    contents = resource.contents
    if isinstance(contents, dict):
        for keyword in ("$ref", "$dynamicRef"):
            if isinstance(contents.get(keyword), str):
                resolver.lookup(contents[keyword])
    for subresource in resource.subresources():
        _lookup_refs(subresource, resolver)


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
