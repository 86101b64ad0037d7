"""Expression errors for people: what is wrong in sluice's words, where (the column
and a caret under it), and what was expected, as structured fields too."""

from __future__ import annotations

import pytest
from sqlglot.errors import ParseError

from sluice.errors import ExpressionError
from sluice.expr import Relations, Scope, parse, parse_order

from .test_parser_fuzz import readable

_SCOPE = Scope(properties={"customer": "text"})


def _error(text: str, scope: Scope | None = _SCOPE) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        parse(text, scope)
    readable(caught.value)
    return caught.value


def test_the_issue_example() -> None:
    error = _error("body.total >== 1000")
    assert str(error) == (
        "expression error at column 12: '>==' is not an operator: did you mean '>='?\n"
        "  body.total >== 1000\n"
        "             ^^^"
    )
    assert (error.expression, error.position, error.line, error.column) == (
        "body.total >== 1000", 11, 1, 12)  # fmt: skip
    assert error.expected == (">=",)
    assert error.reason == "'>==' is not an operator: did you mean '>='?"
    assert isinstance(error.__cause__, ParseError)  # sqlglot's own, for debugging


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("body.total >", 13, "'>' needs a value on its right, found the end of the expression"),
        ("body.total > 1000 AND", 22, "'AND' needs a value on its right, found the end"),
        ("= 1", 1, "'=' needs a value on its left"),
        ("body.a = = 1", 10, "'=' needs a value on its right, found '='"),
        ("body.a =< 1", 8, "'=<' is not an operator: did you mean '<='?"),
        ("(body.total > 1", 1, "this '(' is not closed: expected ')'"),
        ("upper(body.a = 1", 6, "this '(' is not closed"),
        ("body.total > 1)", 15, "')' closes nothing"),
        ("body.lines[0) = 1", 13, "')' cannot close the '[' at column 11: expected ']'"),
        ("body.name = 'abc", 13, "the text starting here has no closing '"),
        ('body."na me = 1', 6, 'the quoted name starting here has no closing "'),
        ("body.a /* x", 8, "the comment starting here has no closing */"),
        ("body.a = 1 2", 12, "expected an operator (=, <>"),
        ("body.a IN (1 2)", 14, "expected ',' or ')', found '2'"),
        ("CASE WHEN body.a THEN 1", 24, "expected END to close the CASE"),
        ("body.a..b = 1", 8, "'.' needs a name after it"),
        ("body.a = 1; DROP TABLE x", 11, "';' ends a statement"),
        ("body.a = 1 ORDER BY 2", 12, "ORDER BY is not part of an expression"),
        ("body.a ~ 'x'", 8, "'~' is not part of the expression language"),
    ],
)
def test_syntax_mistakes_say_where_and_what_was_expected(
    text: str, column: int, reason: str
) -> None:
    error = _error(text)
    assert error.column == column, str(error)
    assert reason in error.reason, str(error)
    assert str(error).startswith(f"expression error at column {column}: ")


@pytest.mark.parametrize(
    ("text", "column", "reason", "expected"),
    [
        ("json_array_lenght(body.a) > 1", 1,
         "there is no function 'json_array_lenght' in the expression language: did you mean "
         "json_array_length?", ("json_array_length",)),
        ("uper(body.name) = 'A'", 1, "did you mean upper?", ("upper",)),
        ("priorty > 1", 1, "unknown name 'priorty': did you mean priority? A message has "
         "body.<path>, props.<name>, priority,", ("priority",)),
        ("body.a = 1 AND custmer = 'x'", 16, "did you mean customer?", ("customer",)),
        ("properties.region = 'EU'", 1, "did you mean props.region?", ("props.region",)),
        ("props.a = 1 AND bdy.x = 1", 17, "did you mean body.x?", ("body.x",)),
    ],
)  # fmt: skip
def test_unknown_names_suggest_the_nearest(
    text: str, column: int, reason: str, expected: tuple[str, ...]
) -> None:
    error = _error(text)
    assert error.column == column, str(error)
    assert reason in error.reason, str(error)
    assert error.expected == expected


def test_an_unknown_function_far_from_all_lists_them() -> None:
    error = _error("sleep(1)")
    assert "the functions are abs, avg," in error.reason
    assert "lower" in error.expected
    assert "sleep" not in error.expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("DROP TABLE x", "it is a statement; an expression is one condition or value"),
        ("body.a % 2 = 0", "'%' (modulo) is not part of the language"),
        ("body.a = ?", "parameters (?, :x, @x) are not part of the language"),
        ("body.a ILIKE 'x'", "ILIKE is not part of the language"),
        ("body.a -> 'x' = 1", "'->' does not read JSON here: write a path"),
        ("body.a = 'x' 'y'", "texts are joined with ||"),
    ],
)
def test_refused_forms_are_named_in_the_languages_words(text: str, reason: str) -> None:
    error = _error(text)
    assert reason in error.reason, str(error)


def test_a_check_error_underlines_the_part_it_is_about() -> None:
    error = _error("body.a > 1 AND upper(1) = 'A'")
    assert error.reason == "'1' is a number, where a text is expected"
    assert str(error).splitlines()[1:] == [
        "  body.a > 1 AND upper(1) = 'A'",
        "                       ^",
    ]
    whole = _error("body.a = 1 AND substr(body.b) = 'x'")
    assert str(whole).splitlines()[2] == "                 " + "^" * len("substr(body.b)")


def test_line_and_column_in_an_expression_of_several_lines() -> None:
    error = _error("body.a = 1\n  AND body.b >== 2")
    assert (error.line, error.column) == (2, 14)
    assert str(error).splitlines() == [
        "expression error at line 2, column 14: '>==' is not an operator: did you mean '>='?",
        "    AND body.b >== 2",
        "               ^^^",
    ]


def test_a_long_expression_is_shown_around_the_mistake() -> None:
    text = "body.a = 1 AND " * 20 + "body.b >== 2"
    lines = str(_error(text)).splitlines()
    assert len(lines[1]) < 90
    assert lines[1].startswith("  ...")
    assert lines[1][lines[2].index("^") : lines[2].index("^") + 3] == ">=="


def test_rules_only_forms_are_placed_in_rules_too() -> None:
    rules = Scope(relations=Relations(queues=frozenset({"q"})))
    error = _error("count(queue('q')) > 1 AND count(queue('nosuch')) > 0", rules)
    assert error.column == 27
    assert "queue 'nosuch' is not declared" in error.reason


def test_ordering_keys_and_errors_without_a_place() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_order("body.a >== 1 DESC")
    assert caught.value.column == 8
    with pytest.raises(ExpressionError) as none:
        parse(42)  # type: ignore[arg-type]
    assert (none.value.position, none.value.line, none.value.expression) == (None, None, None)
    assert str(none.value) == none.value.reason == "an expression must be a str, not int"


def test_the_default_message_is_the_docstring() -> None:
    error = ExpressionError()
    assert str(error) == error.reason == (ExpressionError.__doc__ or "").strip()
    assert (error.expression, error.position, error.expected) == (None, None, ())
