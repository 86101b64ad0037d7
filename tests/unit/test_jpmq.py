"""JPMQ message type definitions parse into JSON Schema that validates bodies as JPMQ would."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sluice.errors import ConfigurationError, TypeDefinitionError
from sluice.message_types.jpmq import JpmqType, parse_jpmq

ORDER = """DEFINE MESSAGETYPE OrderMessage;
NODE order;
id: IDENT; date: DATE; lines: REFERENCE TO order_line;
END;
NODE order_line;
line_no: INTEGER; amout: INTEGER; price: REAL; item: REFERENCE TO item;
END;
NODE item;
id: IDENT; name: STRING; ean: INTEGER;
END;
ROOT order;
END;
"""

HEADER = "DEFINE MESSAGETYPE T;\n"


def order_body() -> dict[str, Any]:
    return {
        "id": 1017,
        "date": "2024-05-01",
        "customer": {"name": "ACME", "vat": "DE123"},  # not in the type: content is open
        "lines": [
            {
                "line_no": 1,
                "amout": 3,
                "price": 9.5,
                "item": [{"id": "W-1", "name": "Widget", "ean": 4006381333931}],
            },
            {"line_no": 2, "amout": 1, "price": 20, "item": []},
        ],
    }


def validator(text: str) -> Draft202012Validator:
    schema = parse_jpmq(text).schema
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_the_order_example_parses_into_the_documented_schema() -> None:
    parsed = parse_jpmq(ORDER)
    assert isinstance(parsed, JpmqType)
    assert (parsed.name, parsed.root) == ("OrderMessage", "order")
    Draft202012Validator.check_schema(parsed.schema)
    assert parsed.schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert parsed.schema["title"] == "OrderMessage"
    assert parsed.schema["$ref"] == "#/$defs/order"
    assert list(parsed.schema["$defs"]) == ["order", "order_line", "item"]
    assert parsed.schema["$defs"]["order_line"] == {
        "type": "object",
        "properties": {
            "line_no": {"type": "integer"},
            "amout": {"type": "integer"},
            "price": {"type": "number"},
            "item": {"type": "array", "items": {"$ref": "#/$defs/item"}},
        },
        "required": ["line_no", "amout", "price", "item"],
    }
    assert parsed.schema["$defs"]["order"]["properties"]["id"] == {"type": ["string", "integer"]}


def test_a_conforming_order_validates() -> None:
    validator(ORDER).validate(order_body())


def test_bodies_that_do_not_conform_are_rejected() -> None:
    check = validator(ORDER)
    price_as_text = order_body()
    price_as_text["lines"][0]["price"] = "9.50"
    no_lines = order_body()
    del no_lines["lines"]
    bad_ean = order_body()
    bad_ean["lines"][0]["item"][0]["ean"] = "x"
    lines_not_array = order_body()
    lines_not_array["lines"] = lines_not_array["lines"][0]
    bad_date = order_body()
    bad_date["date"] = "1.5.2024"
    for body in [price_as_text, no_lines, bad_ean, lines_not_array, bad_date, [], "order"]:
        with pytest.raises(jsonschema.ValidationError):
            check.validate(body)


def test_scalar_types_map_onto_json_types_and_patterns() -> None:
    check = validator(
        HEADER + "NODE n; b: BOOLEAN; t: TIMESTAMP; r: REAL; s: STRING; END; ROOT n; END;"
    )
    good = {"b": True, "r": 1, "s": ""}
    for stamp in ["2024-05-01T12:30:00", "2024-05-01T12:30:00.25Z", "2024-05-01T12:30:00-02:00"]:
        check.validate({**good, "t": stamp})
    bad = [{**good, "t": "2024-05-01 12:30:00"}, {**good, "t": "2024-05-01"}]
    bad += [{**good, "t": "2024-05-01T12:30:00", "b": "true"}]
    for body in bad:
        assert not check.is_valid(body)


def test_keywords_are_case_insensitive_and_names_keep_their_case() -> None:
    parsed = parse_jpmq(
        "define MessageType T; node Order; Id: ident; Sub: reference to Order; End; "
        "root Order; end;"
    )
    assert parsed.root == "Order"
    assert list(parsed.schema["$defs"]["Order"]["properties"]) == ["Id", "Sub"]


def test_comments_and_free_layout_are_allowed() -> None:
    parsed = parse_jpmq(
        "-- orders as the shop sends them\n"
        "DEFINE MESSAGETYPE T;NODE a;x:INTEGER;-- y: INTEGER;\n"
        "\t\t  END ;   ROOT a ;END;  -- trailing comment\n\n"
    )
    assert parsed.schema["$defs"]["a"]["required"] == ["x"]


def test_recursive_empty_unreachable_and_keyword_named_parts_are_fine() -> None:
    text = HEADER + (
        "NODE tree; end: INTEGER; children: REFERENCE TO tree; END;\n"
        "NODE orphan; END;\n"
        "ROOT tree;\nEND;"
    )
    parsed = parse_jpmq(text)
    assert parsed.schema["$defs"]["orphan"] == {"type": "object", "properties": {}, "required": []}
    leaf = {"end": 2, "children": []}
    validator(text).validate({"end": 1, "children": [leaf, {"end": 3, "children": [leaf]}]})
    assert not validator(text).is_valid({"end": 1, "children": [{"end": 2}]})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("", "line 1, column 1: missing the DEFINE MESSAGETYPE header", id="empty"),
        pytest.param(
            "NODE a; END;\nROOT a;\nEND;",
            "line 1, column 1: missing the DEFINE MESSAGETYPE header, found 'NODE'",
            id="no-header",
        ),
        pytest.param(
            HEADER + "NODE a; x: INTEGER; END;\nNODE a; END;\nROOT a;\nEND;",
            "line 3, column 6: duplicate node 'a'",
            id="duplicate-node",
        ),
        pytest.param(
            HEADER + "NODE a;\nx: INTEGER;\nx: STRING;\nEND;\nROOT a;\nEND;",
            "line 4, column 1: duplicate attribute 'x' in node 'a'",
            id="duplicate-attribute",
        ),
        pytest.param(
            HEADER + "NODE a;\nbs: REFERENCE TO b;\nEND;\nROOT a;\nEND;",
            "line 3, column 18: undefined node 'b'; define it or use one of: a",
            id="undefined-reference",
        ),
        pytest.param(
            HEADER + "NODE a; END;\nEND;",
            "line 3, column 1: missing ROOT; add ROOT <node>;",
            id="missing-root",
        ),
        pytest.param(
            HEADER + "NODE a; END;\nROOT b;\nEND;",
            "line 3, column 6: undefined node 'b'",
            id="undefined-root",
        ),
        pytest.param(
            HEADER + "NODE a; END;\nROOT a;\nROOT a;\nEND;",
            "line 4, column 1: more than one ROOT",
            id="two-roots",
        ),
        pytest.param(
            HEADER + "NODE a;\n  qty:   INTGER;\nEND;\nROOT a;\nEND;",
            "line 3, column 10: unknown attribute type 'INTGER'; use one of IDENT, INTEGER, "
            "REAL, STRING, BOOLEAN, DATE, TIMESTAMP",
            id="unknown-type",
        ),
        pytest.param(
            HEADER + "NODE a;\n  qty: ;\nEND;\nROOT a;\nEND;",
            "line 3, column 8: missing attribute type, found ';'",
            id="missing-type",
        ),
        pytest.param(
            HEADER + "NODE a; END;\nROOT a;\nEND;\nNODE b; END;",
            "line 5, column 1: text after the final END;: 'NODE'",
            id="text-after-end",
        ),
        pytest.param(
            HEADER + "NODE 9a; END;\nROOT a;\nEND;",
            "line 2, column 6: invalid name '9a'; names match [A-Za-z_][A-Za-z0-9_]*",
            id="name-starts-with-digit",
        ),
        pytest.param(
            HEADER + "NODE a;\ngröße: INTEGER;\nEND;",
            "line 3, column 1: invalid name 'größe'",
            id="non-ascii-name",
        ),
        pytest.param(
            HEADER + "NODE a;\nunit-price: REAL;\nEND;",
            "line 3, column 5: unexpected character '-'",
            id="stray-character",
        ),
        pytest.param(
            HEADER + "NODE a;\nx: \N{LATIN SMALL LETTER DOTLESS I}nteger;\nEND;",
            "line 3, column 4: unknown attribute type '\N{LATIN SMALL LETTER DOTLESS I}nteger'",
            id="non-ascii-keyword",
        ),
        pytest.param(
            HEADER + "NODE a\nx: INTEGER;\nEND;",
            "line 3, column 1: found 'x'; expected ';' after the node name",
            id="missing-semicolon",
        ),
        pytest.param(
            HEADER + "NODE a; x: INTEGER;\nNODE b; END;\nROOT a;\nEND;",
            "line 3, column 1: found 'NODE'; expected END; to close node 'a'",
            id="unclosed-node",
        ),
        pytest.param(
            HEADER + "NODE a; END;\nROOT a;\n",
            "line 4, column 1: found end of input; expected NODE <name>;, ROOT <node>; or END;",
            id="no-final-end",
        ),
        pytest.param(
            "DEFINE TYPE T;",
            "line 1, column 8: missing the DEFINE MESSAGETYPE header, found 'TYPE'",
            id="wrong-header",
        ),
    ],
)
def test_bad_definitions_say_where_and_what_is_expected(text: str, fragment: str) -> None:
    with pytest.raises(TypeDefinitionError) as caught:
        parse_jpmq(text)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)


@pytest.mark.parametrize("value", [None, b"DEFINE MESSAGETYPE T;", 42, ["DEFINE"]])
def test_non_text_is_a_type_definition_error(value: Any) -> None:
    with pytest.raises(TypeDefinitionError, match="must be a str"):
        parse_jpmq(value)


WORDS = ["DEFINE", "MESSAGETYPE", "NODE", "END", "ROOT", "REFERENCE", "TO", "define", "end"]
WORDS += ["IDENT", "INTEGER", "REAL", "STRING", "BOOLEAN", "DATE", "TIMESTAMP", "integer"]
WORDS += ["a", "b", "order", "_x9", "9x", "é", "\u0131", ";", ":", "-", "--", "-- c\n", "\n"]


def assert_only_definition_errors(text: str) -> None:
    try:
        parsed = parse_jpmq(text)
    except TypeDefinitionError as exc:
        error = str(exc)
    else:
        # Whatever does parse is a usable schema whose references resolve.
        Draft202012Validator.check_schema(parsed.schema)
        list(Draft202012Validator(parsed.schema).iter_errors({}))
        return
    assert error.startswith("line "), error


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_random_text_raises_only_definition_errors(text: str) -> None:
    assert_only_definition_errors(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=40), st.sampled_from([" ", "", "\n"]))
def test_token_soup_raises_only_definition_errors(words: list[str], sep: str) -> None:
    assert_only_definition_errors(sep.join(words))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mangled_example_raises_only_definition_errors(data: st.DataObject) -> None:
    # Small edits to a valid definition reach the deeper checks that random text rarely does.
    words = ORDER.split()
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(words)))
        if data.draw(st.booleans()) and at < len(words):
            del words[at]
        else:
            words.insert(at, data.draw(st.sampled_from(WORDS)))
    assert_only_definition_errors(" ".join(words))
