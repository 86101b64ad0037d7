"""An expression's mistake in a rules definition is shown where it is in the file: the
file's line and column, the file's own line and a caret under the mistake, whatever
blanks, comments and line breaks the expression has; when applying, when an engine
compiles a stored application, and for the XML extra's message too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import sluice
from sluice.backends.sqlite import SQLiteBackend
from sluice.errors import ConfigurationError, ExpressionError, MissingDependency
from sluice.expr import parse
from sluice.expr import xml as expr_xml
from sluice.rules import codec
from sluice.rules.check import same_definition
from sluice.rules.language import parse_statements
from sluice.rules.model import Application, Enqueue, Expr, QueueDef, RuleDef
from sluice.rules.placed import RuleExpressionError, expression_error
from sluice.rules.plan import compile_application

_QUEUES = "CREATE QUEUE orders;\nCREATE QUEUE big;\n"


def refused(text: str) -> RuleExpressionError:
    with sluice.connect("memory://") as db, pytest.raises(sluice.RuleDefinitionError) as caught:
        db.apply(text)
    assert isinstance(caught.value, RuleExpressionError)
    return caught.value


def test_the_issue_example_at_the_files_line_and_column() -> None:
    error = refused(
        _QUEUES + "CREATE RULE r FOR orders\n      IF body.total >== 1000\n"
        "      THEN ENQUEUE body INTO big;"
    )
    assert str(error) == (
        "line 4, column 21: rule 'r' IF condition: '>==' is not an operator: "
        "did you mean '>='?\n"
        "  IF body.total >== 1000\n"
        "                ^^^"
    )
    assert (error.line, error.column, error.expected) == (4, 21, (">=",))
    assert error.reason == "'>==' is not an operator: did you mean '>='?"
    assert isinstance(error.__cause__, ExpressionError)  # the expression's own fields


def test_a_mistake_on_a_later_line_of_the_expression_is_on_that_line() -> None:
    error = refused(
        _QUEUES + "CREATE RULE r FOR orders\n"
        "  IF body.total > 1000   -- a big order\n"
        "     /* and a long one */ AND json_array_lenght(body.lines) > 2\n"
        "  THEN ENQUEUE body INTO big;"
    )
    assert (error.line, error.column) == (5, 31)
    assert str(error).splitlines()[1:] == [
        "  /* and a long one */ AND json_array_lenght(body.lines) > 2",
        "                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ]
    assert error.expected[0] == "json_array_length"


def test_a_mistake_in_the_whole_expression_underlines_it() -> None:
    error = refused(
        _QUEUES + "CREATE RULE r FOR orders IF body.total + 1\nTHEN ENQUEUE body INTO big;"
    )
    assert str(error) == (
        "line 3, column 29: rule 'r' IF condition: 'body.total + 1' is a number, where a "
        "boolean is expected\n"
        "  CREATE RULE r FOR orders IF body.total + 1\n"
        "                              ^^^^^^^^^^^^^^"
    )


def test_a_missing_value_at_the_end_points_after_the_last_token() -> None:
    error = refused(
        _QUEUES + "CREATE RULE r FOR orders\n  IF body.total >   /* c */\n"
        "  THEN ENQUEUE body INTO big;"
    )
    assert (error.line, error.column) == (4, 18)
    assert str(error).endswith("  IF body.total >   /* c */\n                 ^")


@pytest.mark.parametrize(
    ("statement", "line", "column", "where"),
    [
        ("CREATE PROPERTY total AS real QUEUE big\n  VALUE body.total **", 4, 21,
         "property 'total' VALUE"),
        ("CREATE RULE r FOR orders ENQUEUE\n\tjson_object('a',, 1) INTO big", 4, 18,
         "rule 'r' ENQUEUE body"),
        ("CREATE PROPERTY n AS integer QUEUE big;\nCREATE RULE r FOR orders ENQUEUE body "
         "INTO big\n  WITH n = body.n +", 5, 20, "rule 'r' WITH n"),
    ],
)  # fmt: skip
def test_every_kind_of_expression_is_placed(
    statement: str, line: int, column: int, where: str
) -> None:
    error = refused(_QUEUES + statement)
    assert (error.line, error.column) == (line, column), str(error)
    assert str(error).startswith(f"line {line}, column {column}: {where}: "), str(error)


def test_a_long_line_is_shown_around_the_mistake() -> None:
    condition = " AND ".join(f"body.a{n} = {n}" for n in range(40)) + " AND body.b >== 1"
    error = refused(_QUEUES + f"CREATE RULE r FOR orders IF {condition} THEN ENQUEUE body INTO big")
    assert error.column == len("CREATE RULE r FOR orders IF ") + condition.index(">==") + 1
    shown, caret = str(error).splitlines()[1:]
    assert "body.b >== 1" in shown
    assert len(shown) < 100
    assert shown[caret.index("^") :].startswith(">==")


def test_the_engines_compiler_places_a_mistake_in_a_stored_application(tmp_path: Path) -> None:
    text = (
        _QUEUES
        + "CREATE RULE r FOR orders\n  IF body.total\n     >== 1000 THEN ENQUEUE body INTO big;"
    )
    statements = parse_statements(text)  # not checked: as an older sluice might have let it by
    queues = {s.name: s for s in statements if isinstance(s, QueueDef)}
    rules = {s.name: s for s in statements if isinstance(s, RuleDef)}
    stored = codec.decode(codec.encode(Application(queues=queues, rules=rules)))
    backend = SQLiteBackend(str(tmp_path / "plan.db"))
    try:
        with pytest.raises(ConfigurationError) as caught:
            compile_application(stored, backend, {"orders": 1, "big": 2})
    finally:
        backend.close()
    error = caught.value
    assert isinstance(error, RuleExpressionError)
    assert str(error) == (
        "line 5, column 6: rule 'r' IF condition: '>==' is not an operator: did you mean '>='?\n"
        "  >== 1000 THEN ENQUEUE body INTO big;\n"
        "  ^^^"
    )


def test_an_application_stored_without_places_still_reads() -> None:
    stored = codec.encode(Application(rules={"r": RuleDef("r", "orders", 3, ())}))
    old = stored.replace('"branches":[]', '"branches":[{"if":["body.a >== 1",4],"then":[]}]')
    (branch,) = codec.decode(old).rules["r"].branches
    assert branch.condition == Expr("body.a >== 1", 4)
    assert branch.condition.runs == ()


def test_an_expression_parsed_inside_sluices_own_text_is_placed_in_its_own() -> None:
    (statement,) = parse_statements("CREATE RULE r FOR q ENQUEUE\n  body.a >== 1 INTO out")
    assert isinstance(statement, RuleDef)
    (action,) = statement.branches[0].actions
    assert isinstance(action, Enqueue)
    body = action.body
    with pytest.raises(ExpressionError) as caught:
        parse(f"json_array({body.text})")
    error = expression_error(body, caught.value, "rule 'r' ENQUEUE body", offset=len("json_array("))
    assert (error.line, getattr(error, "column", None)) == (2, 10)
    assert str(error).endswith("  body.a >== 1 INTO out\n         ^^^")


def test_an_expression_not_from_a_file_keeps_the_expressions_column() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse("body.a >== 1")
    error = expression_error(Expr("body.a >== 1", 7), caught.value, "rule 'r' IF condition")
    assert str(error).startswith(
        "line 7: rule 'r' IF condition: expression error at column 8: '>==' is not an operator"
    )


def test_moved_or_reindented_definitions_are_the_same() -> None:
    (one,) = parse_statements("CREATE PROPERTY p AS text QUEUE q VALUE upper(body.a)")
    (other,) = parse_statements(
        "\n\n  CREATE PROPERTY p AS text\n    QUEUE q\n\tVALUE upper(body.a)"
    )
    assert same_definition(one, other)  # applying the moved one changes nothing


def test_without_lxml_the_xml_extra_is_named_as_every_extra_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "lxml", None)  # as an installation without it
    expr_xml._lxml.cache_clear()
    try:
        with pytest.raises(MissingDependency) as caught:
            expr_xml.parse_xml("<a/>")
    finally:
        expr_xml._lxml.cache_clear()
    assert str(caught.value) == (
        "XML (bodies, XML Schemas, XPath) needs the 'xml' extra, which is not installed "
        "(no module 'lxml'): pip install 'sluice-queue[xml]'"
    )
