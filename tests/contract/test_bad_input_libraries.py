"""Hostile input that reaches a library (lxml, jsonschema, fastjsonschema, Pydantic,
zoneinfo) gets a sluice error saying what to do, reads no file, and stores nothing."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.jobs.cron import Cron
from sluice.jobs.profiles import Entry, Profile

pytest.importorskip("lxml")

XSD = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="x" type="xs:string"/>
</xs:schema>"""

LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "lol">'
    + "".join(
        f'<!ENTITY {b} "{f"&{a};" * 10}">' for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "]><x>&i;</x>"
)


def nothing_stored(q: sluice.Queue) -> None:
    assert q.stats()["ready"] == 0
    assert q.browse() == []


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("top-secret")
    return path


def hostile_xml(secret: Path) -> dict[str, str]:
    return {
        "external entity": f'<!DOCTYPE x [<!ENTITY e SYSTEM "file://{secret}">]><x>&e;</x>',
        "internal entity": '<!DOCTYPE x [<!ENTITY e "hi">]><x>&e;</x>',
        "parameter entity": f'<!DOCTYPE x [<!ENTITY % p SYSTEM "file://{secret}"> %p;]><x>a</x>',
        "billion laughs": LAUGHS,
        # An external DTD is never loaded, so &e; stays an undeclared reference.
        "entity of an external DTD": f'<!DOCTYPE x SYSTEM "file://{secret}"><x>&e;</x>',
    }


@pytest.mark.parametrize(
    "case",
    [
        "external entity",
        "internal entity",
        "parameter entity",
        "billion laughs",
        "entity of an external DTD",
    ],
)
def test_xml_with_entities_is_refused_by_an_xml_type(
    db: sluice.Database, secret: Path, case: str
) -> None:
    db.create_type("X", xml_schema=XSD)
    q = db.create_queue("xml", types=["X"])
    # libxml2 itself stops the laughs (amplification); the others parse and are refused.
    refusal = "expands no entities" if case == "billion laughs" else "neither expands nor fetches"
    with pytest.raises(sluice.InvalidBody, match=refusal) as caught:
        q.put(hostile_xml(secret)[case])
    assert "top-secret" not in str(caught.value)
    nothing_stored(q)
    q.put("<x>fine</x>")  # the type still takes a plain document
    assert q.stats()["ready"] == 1


def test_xml_with_entities_is_refused_by_a_queue_that_reads_content(
    db: sluice.Database, secret: Path
) -> None:
    # No type, but a priority function: the queue parses the XML it is given.
    q = db.create_queue("xml", priority={"*": "1"})
    for body in hostile_xml(secret).values():
        with pytest.raises(sluice.InvalidBody, match="entit"):
            q.put(body, content_type="application/xml")
    nothing_stored(q)


def test_xml_nested_past_the_limit_is_refused(db: sluice.Database) -> None:
    db.create_type("X", xml_schema=XSD)
    q = db.create_queue("xml", types=["X"])
    with pytest.raises(sluice.InvalidBody, match="at most 256 levels of nesting") as caught:
        q.put("<x>" + "<a>" * 300 + "</a>" * 300 + "</x>")
    assert "XML_PARSE_HUGE" not in str(caught.value)  # not an option sluice has
    nothing_stored(q)


def test_xml_schema_that_loads_other_documents_is_refused(
    db: sluice.Database, tmp_path: Path
) -> None:
    part = tmp_path / "part.xsd"
    part.write_text(
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
        '<xs:simpleType name="T"><xs:restriction base="xs:string"/></xs:simpleType>'
        "</xs:schema>"
    )
    ns = 'xmlns:xs="http://www.w3.org/2001/XMLSchema"'
    for load in (
        f'<xs:include schemaLocation="{part}"/>',
        f'<xs:import namespace="urn:a" schemaLocation="file://{part}"/>',
        f'<xs:redefine schemaLocation="{part}"/>',
    ):
        schema = f'<xs:schema {ns}>{load}<xs:element name="x" type="T"/></xs:schema>'
        with pytest.raises(sluice.TypeDefinitionError, match=r"schemaLocation=.*one schema"):
            db.create_type("X", xml_schema=schema)
    entity = f'<!DOCTYPE s [<!ENTITY e SYSTEM "file://{part}">]><xs:schema {ns}>&e;</xs:schema>'
    with pytest.raises(sluice.TypeDefinitionError, match="entities"):
        db.create_type("X", xml_schema=entity)
    with pytest.raises(sluice.TypeDefinitionError, match="as a str, not bytes"):
        db.create_type("X", xml_schema=XSD.encode())  # type: ignore[arg-type]
    assert db.message_types() == {}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$id": "http://127.0.0.1:9/", "$ref": "other.json"}, "does not resolve"),
        ({"maximum": float("nan")}, "cannot be stored as JSON"),
        ({"minimum": float("-inf")}, "cannot be stored as JSON"),
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "refers back to itself"),
        ({"allOf": [{"$ref": "#"}]}, "refers back to itself"),
    ],
)
def test_json_schemas_that_cannot_work_are_refused(
    db: sluice.Database, schema: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(sluice.TypeDefinitionError, match=fragment):
        db.create_type("J", schema=schema)
    assert db.message_types() == {}


def test_json_schema_refs_are_never_fetched(db: sluice.Database, tmp_path: Path) -> None:
    # Were the file read, bodies would have to be strings; nothing of it must count.
    remote = tmp_path / "string.json"
    remote.write_text('{"type": "string"}')
    with pytest.raises(sluice.TypeDefinitionError, match="fetches no files or URLs"):
        db.create_type("J", schema={"$ref": remote.as_uri()})
    assert db.message_types() == {}


def test_json_schema_nested_too_deeply_is_refused(db: sluice.Database) -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(5000):
        inner["not"] = {}
        inner = inner["not"]
    with pytest.raises(sluice.TypeDefinitionError, match="nests too deeply"):
        db.create_type("J", schema=schema)
    assert db.message_types() == {}


def test_a_check_that_recurses_without_end_is_a_type_violation(db: sluice.Database) -> None:
    # The loop is only entered for the value 7, so the type can be defined.
    db.create_type("J", schema={"if": {"const": 7}, "then": {"$ref": "#"}})
    q = db.create_queue("j", types=["J"])
    with pytest.raises(sluice.TypeViolation, match="could not be checked against type 'J'"):
        q.put(7)
    nothing_stored(q)
    q.put(8)
    assert q.stats()["ready"] == 1


def test_pydantic_models_that_give_no_schema_are_refused(db: sluice.Database) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        id: int

    class Opaque:
        pass

    class Holder(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        thing: Opaque

    with pytest.raises(sluice.TypeDefinitionError, match="takes a Pydantic model class"):
        db.create_type(model=Order(id=1))
    with pytest.raises(sluice.TypeDefinitionError, match="model Holder gives no JSON Schema"):
        db.create_type(model=Holder)
    assert db.message_types() == {}


@pytest.mark.parametrize(
    "entries",
    [
        [{"days": [0], "start": "09:00", "end": "17:00"}],
        ["mon-fri 09:00-17:00"],
        [None],
        "mon-fri",
        5,
        None,
    ],
)
def test_profile_entries_that_are_not_entries_are_refused(
    db: sluice.Database, entries: Any
) -> None:
    db.jobs.define("mail")
    with pytest.raises(sluice.ConfigurationError, match=r"Entry\.parse\('mon-fri'"):
        db.jobs.set_profile(Profile("mail", entries=entries))
    assert db.jobs.profile("mail") is None


NINE, FIVE = datetime.time(9), datetime.time(17)


@pytest.mark.parametrize(
    ("days", "extra", "fragment"),
    [
        (5, {}, "not days of the week"),
        (None, {}, "not days of the week"),
        ([[1]], {}, "not days of the week"),
        ("mon", {}, "not days of the week"),
        ({0}, {"max_per_hour": 5, "follow": {"signal": "cpu"}}, "give a Follow"),
    ],
)
def test_entries_check_their_parts(days: Any, extra: dict[str, Any], fragment: str) -> None:
    with pytest.raises(sluice.ConfigurationError, match=fragment):
        Entry(days, NINE, FIVE, **extra)


@pytest.mark.parametrize(("days", "window"), [(None, "*"), ("*", 9), (["mon"], "*")])
def test_entry_parse_takes_text(days: Any, window: Any) -> None:
    with pytest.raises(sluice.ConfigurationError, match="as text"):
        Entry.parse(days, window)


@pytest.mark.parametrize("tz", ["../etc", "/etc/passwd", "Europe", "Nope/Zone", "", "UTC\x00", 5])
def test_unknown_time_zones_are_refused(db: sluice.Database, tz: Any) -> None:
    db.jobs.define("mail")
    with pytest.raises(sluice.ConfigurationError, match="unknown time zone"):
        Profile("mail", tz=tz)
    with pytest.raises(sluice.ConfigurationError, match="unknown time zone"):
        Cron.parse("0 9 * * *", tz)
    with pytest.raises(sluice.ConfigurationError, match="unknown time zone"):
        db.jobs.schedule("daily", "mail", "0 9 * * *", tz=tz)
    assert db.jobs.schedules() == []


# --- found while closing the above: arguments that reached a driver or the json module ---


def test_priority_must_be_a_mapping(db: sluice.Database) -> None:
    with pytest.raises(sluice.ConfigurationError, match="mapping of message type"):
        db.create_queue("q", priority="body.urgency")  # type: ignore[arg-type]
    assert [spec.name for spec in db.queues()] == []


@pytest.mark.parametrize(
    ("option", "value"), [("max_size", 10**30), ("max_attempts", 10**30), ("max_size", 0)]
)
def test_queue_settings_out_of_range(db: sluice.Database, option: str, value: int) -> None:
    with pytest.raises(sluice.ConfigurationError, match=option):
        db.create_queue("q", **{option: value})  # type: ignore[arg-type]
    assert [spec.name for spec in db.queues()] == []


@pytest.mark.parametrize("field", ["correlation_id", "reply_to", "content_type"])
def test_nul_in_a_header_is_refused_on_every_backend(db: sluice.Database, field: str) -> None:
    q = db.create_queue("q")
    with pytest.raises(sluice.MessageError, match="NUL"):
        q.put("x", **{field: "a\x00b"})  # type: ignore[arg-type]
    assert q.stats()["ready"] == 0


def test_a_schedule_body_must_be_json(db: sluice.Database) -> None:
    db.jobs.define("t")
    for body in ({1, 2}, float("nan")):
        with pytest.raises(sluice.InvalidBody, match="not a JSON value"):
            db.jobs.schedule("s", "t", "* * * * *", body=body)
    assert db.jobs.schedules() == []


def test_set_profile_takes_a_profile(db: sluice.Database) -> None:
    with pytest.raises(sluice.ConfigurationError, match="Profile"):
        db.jobs.set_profile({"task_type": "t"})  # type: ignore[arg-type]
