"""The file-name codec of sluice.dropbox against DropboxMQ's format (its source where
it differs from its documentation)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.dropbox.names import MessageName, encode_value, fit_name, parse_name
from sluice.errors import MessageError

ID = "1140429201295000-1234567890"


def test_the_three_required_fields() -> None:
    meta = parse_name(f"4.{ID}.T")
    assert (meta.priority, meta.id, meta.kind, meta.parsed) == (4, ID, "T", True)
    assert meta.expiration is None
    assert meta.properties == {}
    assert meta.timestamp == 1140429201295000  # timestamp 1140429201295 ms, sequence 0


def test_every_field() -> None:
    meta = parse_name(f"9.{ID}.B.1140429261295.corr1283.QTestQueue1.Order.colorS=red&countI=3")
    assert meta.priority == 9
    assert meta.kind == "B"
    assert meta.expiration == 1140429261295
    assert meta.correlation == "corr1283"
    assert meta.reply_to == "QTestQueue1"
    assert meta.reply_destination == "TestQueue1"
    assert meta.type == "Order"
    assert meta.properties == {"color": "red", "count": 3}


def test_the_documented_reply_to_is_read_as_the_source_does() -> None:
    # The docs' example "...corr1283.TestQueue1..." has no Q/T letter: DropboxMQ's code
    # takes its first letter as one, so it names the topic "estQueue1".
    meta = parse_name(f"4.{ID}.T..corr1283.TestQueue1")
    assert meta.reply_to == "TestQueue1"
    assert meta.reply_destination == "estQueue1"


def test_interior_empty_fields_stay_empty() -> None:
    meta = parse_name(f"4.{ID}.T...QReplies")
    assert meta.expiration is None
    assert meta.correlation is None
    assert meta.reply_to == "QReplies"
    assert MessageName(id=ID, reply_to="QReplies").format() == f"4.{ID}.T...QReplies"


def test_trailing_empty_fields_are_left_out() -> None:
    assert MessageName(priority=7, id=ID, kind="B").format() == f"7.{ID}.B"
    assert MessageName(id=ID, correlation="c").format() == f"4.{ID}.T..c"


@pytest.mark.parametrize(
    ("letter", "text", "value"),
    [
        ("B", "true", True),
        ("B", "TRUE", True),
        ("B", "yes", False),  # Java's Boolean.valueOf
        ("Y", "-128", -128),
        ("H", "32767", 32767),
        ("I", "-7", -7),
        ("L", "9007199254740993", 9007199254740993),
        ("F", "1.5", 1.5),
        ("D", "-2.25", -2.25),
        ("S", "a+b%2Ec", "a b.c"),
        ("Q", "unknown letter", "unknown letter"),
    ],
)
def test_property_types(letter: str, text: str, value: object) -> None:
    assert parse_name(f"4.{ID}.T.....p{letter}={text}").properties == {"p": value}


@pytest.mark.parametrize("pair", ["bY=128", "cI=x", "dD=", "noletter", "=3", "jJ=[1"])
def test_a_property_its_type_refuses_is_an_error(pair: str) -> None:
    with pytest.raises(MessageError):
        parse_name(f"4.{ID}.T.....{pair}")


@pytest.mark.parametrize(
    "name",
    [
        "order.txt",
        "report",
        "a.b",
        "x.1140429201295000-1.T",  # priority not a number
        f"4.{ID}.T.tomorrow",  # expiration not a number
        "4.not-an-id.T",
        "4.12345.T",  # an id without its random part
        f"99999999999.{ID}.T",  # priority past 32 bits
        "",
        "....",
    ],
)
def test_a_name_that_does_not_parse_is_the_whole_id(name: str) -> None:
    meta = parse_name(name)
    assert (meta.id, meta.parsed, meta.priority, meta.kind) == (name, False, 4, "T")
    assert meta.expiration is None
    assert meta.timestamp == 0


@pytest.mark.parametrize(("letter", "kind"), [("T", "T"), ("B", "B"), ("M", "M"), ("O", "O"),
                                              ("S", "S"), ("", "T"), ("X", "T")])  # fmt: skip
def test_a_missing_or_unknown_class_is_text(letter: str, kind: str) -> None:
    assert parse_name(f"4.{ID}.{letter}").kind == kind


def test_values_are_url_encoded_with_dots_as_2e() -> None:
    assert encode_value("a.b c/d~e*f") == "a%2Eb+c%2Fd%7Ee*f"
    meta = MessageName(id=ID, correlation="x.y/z", properties={"k.1": "v&w=1"})
    name = meta.format()
    assert "/" not in name
    assert name.count(".") == 7
    assert parse_name(name).correlation == "x.y/z"
    assert parse_name(name).properties == {"k.1": "v&w=1"}


def test_property_values_take_their_type_letter() -> None:
    meta = MessageName(id=ID, properties={"b": True, "i": 3, "l": 2**40, "d": 0.5, "s": "x"})
    assert meta.format().endswith(".bB=true&dD=0%2E5&iI=3&lL=1099511627776&sS=x")  # by name
    assert parse_name(meta.format()).properties == meta.properties


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_scalar = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), _text,
                    st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip


@given(
    priority=st.integers(-(2**31), 2**31 - 1),
    expiration=st.none() | st.integers(1, 2**50),
    correlation=st.none() | _text.filter(bool),
    reply=st.none() | _text.map(lambda s: "Q" + s),
    type_=st.none() | _text.filter(bool),
    properties=st.dictionaries(_text.filter(bool), _scalar, max_size=3),
)
def test_names_round_trip(  # noqa: PLR0917 (hypothesis gives each drawn field)
    priority: int,
    expiration: int | None,
    correlation: str | None,
    reply: str | None,
    type_: str | None,
    properties: dict[str, object],
) -> None:
    meta = MessageName(priority, ID, "M", expiration, correlation, reply, type_, properties)
    back = parse_name(meta.format())
    assert back == meta
    assert "/" not in meta.format()
    assert "\0" not in meta.format()


def test_json_values_and_empty_names_round_trip() -> None:
    props = {"": "empty name", "l": [1, {"a": None}], "n": None, "big": 2**70, "o": {"k": "v"}}
    name = MessageName(id=ID, properties=props).format()
    assert "jJ=" not in name  # no property is named "j"
    assert parse_name(name).properties == props
    assert parse_name(f"4.{ID}.T.....S=x").properties == {"": "x"}


def test_a_priority_past_32_bits_is_no_name() -> None:
    with pytest.raises(MessageError, match="32 bits"):
        MessageName(priority=2**31, id=ID).format()


def test_too_long_metadata_drops_whole_fields_by_a_fixed_rule() -> None:
    props = {"a": "x" * 60, "b": "y" * 100, "c": "z" * 60, "d": 1}
    meta = MessageName(id=ID, correlation="c" * 40, reply_to="Q" + "r" * 40, type="t" * 30,
                       expiration=1_900_000_000_000, properties=props)  # fmt: skip
    name, dropped = fit_name(meta)
    assert len(name.encode()) <= 255
    # The longest property first, then of equal length the last by name: b, then c.
    assert dropped == ["property 'b'", "property 'c'"]
    back = parse_name(name)
    assert back.properties == {"a": "x" * 60, "d": 1}  # whole values, never cut
    assert (back.correlation, back.type, back.expiration) == ("c" * 40, "t" * 30, 1_900_000_000_000)
    huge = MessageName(id=ID, correlation="c" * 200, reply_to="Q" + "r" * 200, type="t" * 200)
    name, dropped = fit_name(huge)
    assert dropped == ["type", "reply-to"]
    assert parse_name(name).correlation == "c" * 200
    assert fit_name(MessageName(id=ID, properties={"a": 1})) == (f"4.{ID}.T.....aI=1", [])


_json = st.recursive(st.none() | _scalar, lambda inner: st.lists(inner, max_size=2)
                     | st.dictionaries(_text, inner, max_size=2), max_leaves=4)  # fmt: skip


@given(properties=st.dictionaries(_text, _json | st.integers(), max_size=4))
def test_every_json_property_round_trips(properties: dict[str, object]) -> None:
    assert parse_name(MessageName(id=ID, properties=properties).format()).properties == properties
