"""The rules definition language: statements from text, expressions cut out of them
without being read, and every mistake reported with its line, for any input."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.errors import RuleDefinitionError
from sluice.expr.check import MAX_LENGTH
from sluice.rules.language import parse_statements
from sluice.rules.model import (
    Branch,
    Drop,
    Enqueue,
    ErrorQueueDef,
    Expr,
    PropertyDef,
    QueueDef,
    Reset,
    RuleDef,
    SlicingDef,
)

from .test_rules_check import PROCUREMENT, PROCUREMENT_TODAY


def one(text: str) -> object:
    (statement,) = parse_statements(text)
    return statement


def rule(text: str) -> RuleDef:
    statement = one(text)
    assert isinstance(statement, RuleDef)
    return statement


def refused(text: str) -> RuleDefinitionError:
    with pytest.raises(RuleDefinitionError) as caught:
        parse_statements(text)
    return caught.value


# --- the statements ---------------------------------------------------------------------
def test_the_procurement_files_parse() -> None:
    for text in (PROCUREMENT, PROCUREMENT_TODAY):
        statements = parse_statements(text)
        kinds = [type(s).__name__ for s in statements]
        assert kinds.count("QueueDef") == 12
        assert kinds.count("SlicingDef") == 2
        assert kinds[0] == "ErrorQueueDef"


def test_procurement_details() -> None:
    statements = {getattr(s, "name", None): s for s in parse_statements(PROCUREMENT)}
    request_id = statements["requestID"]
    assert isinstance(request_id, PropertyDef)
    assert request_id.fixed
    assert not request_id.inherited
    assert list(request_id.values) == ["offerRequests", "finance", "legal", "supplier", "results"]
    assert request_id.values["offerRequests"] == Expr("xpath(body, '/offerRequest/@id')", 18)
    assert request_id.values["finance"] is request_id.values["results"]
    join = statements["joinChecks"]
    assert isinstance(join, RuleDef)
    assert join.target == "requestMsgs"
    assert [b.condition is None for b in join.branches] == [False, False]
    first = join.branches[0].actions
    assert isinstance(first[0], Enqueue)
    assert first[0].queue == "customer"
    assert first[1] == Reset(None, None, 59)
    remind = statements["remindUnpaid"]
    assert isinstance(remind, RuleDef)
    (action,) = remind.branches[0].actions
    assert isinstance(action, Enqueue)
    assert [name for name, _ in action.properties] == ["echo_target", "echo_after", "invoiceID"]


def test_every_statement_and_option() -> None:
    text = """
        create queue q kind Echo MODE transient priority -3 type order, "order.v2"
            errorqueue errs retention 90 min;
        CREATE QUEUE errs;
        CREATE PROPERTY p AS integer INHERITED QUEUE q, errs;
        CREATE PROPERTY c AS timestamp FIXED QUEUE q VALUE now() QUEUE errs VALUE 0;
        CREATE SLICING s ON p;
        CREATE RULE r FOR s ERRORQUEUE errs IF true THEN RESET;
        DROP RULE r; drop slicing if exists s; DROP PROPERTY p; DROP QUEUE "errs";
        SET ERRORQUEUE q
    """
    assert parse_statements(text) == [
        QueueDef("q", 2, "echo", "transient", -3, ("order", "order.v2"), "errs", 5400.0),
        QueueDef("errs", 4),
        PropertyDef("p", "integer", 5, {"q": None, "errs": None}, inherited=True),
        PropertyDef("c", "timestamp", 6, {"q": Expr("now()", 6), "errs": Expr("0", 6)}, True),
        SlicingDef("s", "p", 7),
        RuleDef("r", "s", 8, (Branch(Expr("true", 8), (Reset(line=8),)),), "errs"),
        Drop("rule", "r", 9),
        Drop("slicing", "s", 9, if_exists=True),
        Drop("property", "p", 9),
        Drop("queue", "errs", 9),
        ErrorQueueDef("q", 10),
    ]


def test_keywords_are_case_insensitive_and_names_are_not() -> None:
    upper = parse_statements("CREATE QUEUE Q KIND ECHO; CREATE RULE R FOR Q IF TRUE THEN RESET")
    lower = parse_statements("create queue Q kind echo; create rule R for Q if TRUE then reset")
    mixed = parse_statements("CrEaTe QuEuE Q KiNd EcHo; cReAtE rUlE R fOr Q iF TRUE tHeN rEsEt")
    assert upper == lower == mixed
    assert [s.name for s in parse_statements("CREATE QUEUE q; CREATE QUEUE Q")] == ["q", "Q"]  # type: ignore[union-attr]


def test_quoted_names() -> None:
    assert one('CREATE QUEUE "a ""quoted"" name"') == QueueDef('a "quoted" name', 1)
    assert one('CREATE QUEUE "QUEUE"') == QueueDef("QUEUE", 1)
    assert "is empty" in str(refused('CREATE QUEUE ""'))


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("30", 30),
        ("30s", 30),
        ("2.5 sec", 2.5),
        ("5 minutes", 300),
        ("5m", 300),
        ("2 h", 7200),
        ("1.5hours", 5400),
        ("7 days", 604800),
        ("1d", 86400),
        ("2 weeks", 1209600),
        ("0", 0),
        ("forever", math.inf),
        ("FOREVER", math.inf),
    ],
)
def test_durations(written: str, seconds: float) -> None:
    assert one(f"CREATE QUEUE q RETENTION {written} PRIORITY 1") == QueueDef(
        "q", 1, priority=1, retention=seconds
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE QUEUE q RETENTION 5 fortnights", "expected a duration unit"),
        ("CREATE QUEUE q RETENTION", "expected a duration after RETENTION"),
        ("CREATE QUEUE q RETENTION -5", "expected a duration after RETENTION"),
        ("CREATE QUEUE q RETENTION 1e400", "too long"),
        ("CREATE QUEUE q PRIORITY 1.5", "expected a whole number after PRIORITY"),
        ("CREATE QUEUE q PRIORITY 99999999999", "PRIORITY must lie within"),
        ("CREATE QUEUE q KIND fast", "expected basic or echo or gateway after KIND, found 'fast'"),
        ("CREATE QUEUE q MODE durable", "expected persistent or transient after MODE"),
        ("CREATE QUEUE q KIND echo KIND basic", "KIND is given twice"),
        ("CREATE QUEUE q SIZE 5", "expected ';' at the end of the statement, found 'SIZE'"),
    ],
)
def test_queue_mistakes(text: str, message: str) -> None:
    error = refused(text)
    assert message in str(error)
    assert str(error).startswith("line 1: ")
    assert error.line == 1


def test_statement_ends() -> None:
    assert len(parse_statements("CREATE QUEUE a; CREATE QUEUE b")) == 2
    assert len(parse_statements(";;CREATE QUEUE a;;; CREATE QUEUE b;;")) == 2
    assert parse_statements("") == parse_statements("  -- nothing\n /* at all */ ") == []
    assert parse_statements("\ufeffCREATE QUEUE a") == [QueueDef("a", 1)]


# --- expressions ------------------------------------------------------------------------
def test_case_inside_a_condition_keeps_its_then_and_else() -> None:
    r = rule("""
        CREATE RULE r FOR q
        IF CASE WHEN body.a = 1 THEN true ELSE CASE body.b WHEN 2 THEN true END END
        THEN ENQUEUE CASE WHEN body.c THEN 'x' ELSE 'y' END INTO out
        ELSE ENQUEUE (CASE WHEN body.c THEN 1 END) INTO out""")
    first, last = r.branches
    assert first.condition == Expr(
        "CASE WHEN body.a = 1 THEN true ELSE CASE body.b WHEN 2 THEN true END END", 3
    )
    assert first.actions == (Enqueue(Expr("CASE WHEN body.c THEN 'x' ELSE 'y' END", 4), "out"),)
    assert last == Branch(None, (Enqueue(Expr("(CASE WHEN body.c THEN 1 END)", 5), "out"),))


def test_commas_inside_calls_and_strings_do_not_end_a_with_value() -> None:
    r = rule("""CREATE RULE r FOR q ENQUEUE body INTO out
        WITH a = coalesce(body.x, substr(body.y, 1, 2), 'a, b'), b = 'c;d THEN e',
             c = body."INTO", reset = 1,
        ENQUEUE json_array(1, 2) INTO out, RESET s KEY coalesce(body.k, 'x'), RESET""")
    enqueue, second, reset, bare = r.branches[0].actions
    assert isinstance(enqueue, Enqueue)
    assert enqueue.properties == (
        ("a", Expr("coalesce(body.x, substr(body.y, 1, 2), 'a, b')", 2)),
        ("b", Expr("'c;d THEN e'", 2)),
        ("c", Expr('body."INTO"', 3)),
        ("reset", Expr("1", 3)),
    )
    assert second == Enqueue(Expr("json_array(1, 2)", 4), "out")
    assert reset == Reset("s", Expr("coalesce(body.k, 'x')", 4), 4)
    assert bare == Reset(None, None, 4)


def test_keywords_as_path_steps_and_function_names_do_not_end_an_expression() -> None:
    r = rule("CREATE RULE r FOR q IF body.then = body.end AND body.into.else THEN ENQUEUE 1 INTO o")
    assert r.branches[0].condition == Expr("body.then = body.end AND body.into.else", 1)
    prop = one("CREATE PROPERTY p AS integer QUEUE a VALUE count(queue('a')) QUEUE b VALUE 2")
    assert isinstance(prop, PropertyDef)
    assert prop.values == {"a": Expr("count(queue('a'))", 1), "b": Expr("2", 1)}


def test_subqueries_inside_conditions() -> None:
    r = rule("""CREATE RULE r FOR s
        IF (SELECT count(*) FROM slice() AS m WHERE m.props.ok = true) = 3
           AND NOT EXISTS (SELECT 1 FROM queue('q') AS a WHERE a.props.x IN (1, 2))
        THEN ENQUEUE xmlelement('offer', xmlattributes(slicekey() AS id)) INTO out, RESET""")
    condition = r.branches[0].condition
    assert condition is not None
    assert condition.line == 2
    assert condition.text.endswith("WHERE a.props.x IN (1, 2))")


def test_comments_are_blanks_even_inside_expressions() -> None:
    r = rule("""-- a rule
        /* several
           lines; CREATE RULE x */
        CREATE RULE r FOR q -- the queue
        IF body.a = 1 -- one THEN
           /* ; */ AND body.b = '--not a comment'
        THEN ENQUEUE body INTO out""")
    assert r.line == 4
    assert r.branches[0].condition == Expr("body.a = 1 AND body.b = '--not a comment'", 5)


def test_expressions_keep_the_line_they_start_on() -> None:
    text = "CREATE RULE r FOR q\nIF\n\n  body.a = 'x\ny'\nTHEN ENQUEUE\n'z' INTO out"
    condition = rule(text).branches[0].condition
    assert condition == Expr("body.a = 'x\ny'", 4)
    (action,) = rule(text).branches[0].actions
    assert isinstance(action, Enqueue)
    assert action.body.line == 7


def test_a_rule_without_if_and_else_if_chains() -> None:
    always = rule("CREATE RULE r FOR q ENQUEUE body INTO a, ENQUEUE body INTO b")
    assert [len(b.actions) for b in always.branches] == [2]
    assert always.branches[0].condition is None
    chain = rule("""CREATE RULE r FOR q IF body.n = 1 THEN ENQUEUE 1 INTO a
        ELSE IF body.n = 2 THEN ENQUEUE 2 INTO a ELSE IF body.n = 3 THEN RESET s
        ELSE ENQUEUE 0 INTO a, RESET""")
    assert [b.condition.text if b.condition else None for b in chain.branches] == [
        "body.n = 1",
        "body.n = 2",
        "body.n = 3",
        None,
    ]


# --- mistakes, with their lines ---------------------------------------------------------
_PREFIX = "CREATE QUEUE a;\n-- line 2\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE TABLE t", "expected QUEUE, PROPERTY, SLICING or RULE after CREATE, found 'TABLE'"),
        ("SELECT 1", "expected CREATE, DROP or SET at the start of a statement, found 'SELECT'"),
        ("CREATE RULE r FOR q IF a THEN ENQUEUE body", "expected INTO after the ENQUEUE body"),
        ("CREATE RULE r FOR q IF a ENQUEUE b INTO c", "expected THEN after the IF condition"),
        ("CREATE RULE r FOR q IF THEN RESET", "expected the IF condition, found 'THEN'"),
        ("CREATE RULE r FOR q IF a THEN", "expected an action: ENQUEUE ... INTO ... or RESET"),
        ("CREATE RULE r FOR q IF a THEN DELETE", "expected an action"),
        ("CREATE RULE r FOR q ENQUEUE INTO c", "expected the ENQUEUE body, found 'INTO'"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO", "expected the queue's name after INTO"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO c WITH", "expected a property name after WITH"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO c WITH p 1", "expected '=' after the property"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO c WITH p =", "expected the value of 'p'"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO c WITH p = 1, p = 2", "'p' is set twice"),
        ("CREATE RULE r FOR q RESET KEY 1", "expected the slicing's name before KEY"),
        ("CREATE RULE r FOR q RESET s KEY", "expected the RESET key"),
        ("CREATE RULE r q", "expected FOR and a queue or slicing after the rule name 'r'"),
        ("CREATE RULE r FOR q ERRORQUEUE", "expected the error queue's name"),
        ("CREATE RULE r FOR q IF f(a THEN RESET", "the IF condition has a '(' or '['"),
        ("CREATE RULE r FOR q IF a[1 THEN RESET", "the IF condition has a '(' or '['"),
        ("CREATE RULE r FOR q IF CASE WHEN a THEN b THEN RESET", "a CASE without END"),
        ("CREATE PROPERTY p text QUEUE a", "expected AS and a type after the property name"),
        ("CREATE PROPERTY p AS string QUEUE a", "expected text or integer or real or boolean"),
        ("CREATE PROPERTY p AS text", "expected QUEUE and the queues that have property 'p'"),
        ("CREATE PROPERTY p AS text QUEUE", "expected a queue name after QUEUE"),
        ("CREATE PROPERTY p AS text QUEUE a VALUE", "expected the VALUE expression"),
        ("CREATE PROPERTY p AS text QUEUE a, b QUEUE a", "property 'p' names queue 'a' twice"),
        ("CREATE SLICING s p", "expected ON and a property after the slicing name 's'"),
        ("DROP TABLE t", "expected RULE, SLICING, PROPERTY or QUEUE after DROP"),
        ("DROP QUEUE IF q", "expected EXISTS after DROP ... IF"),
        ("DROP QUEUE", "expected the name of the queue to drop, found the end of the text"),
        ("SET QUEUE q", "expected ERRORQUEUE after SET"),
        ("CREATE QUEUE b CREATE QUEUE c", "expected ';' at the end of the statement (is a"),
        ("CREATE QUEUE b RETENTION 5\nCREATE QUEUE c", "(is a ';' missing?), found 'CREATE'"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO c WITH p = 1\nCREATE QUEUE c", "(is a ';' missing"),
        ("CREATE QUEUE b TYPE 'x", "unterminated string"),
        ('CREATE QUEUE "b', "unterminated quoted name"),
        ("CREATE QUEUE b /* no end", "unterminated comment"),
        ("CREATE QUEUE ?", "expected the queue's name after CREATE QUEUE, found '?'"),
    ],
)
def test_mistakes_name_their_line_and_what_was_expected(text: str, message: str) -> None:
    error = refused(_PREFIX + text)
    assert message in str(error), str(error)
    assert error.line in (3, 4)  # the mistake's line, not the statement's first or the file's
    assert str(error).startswith(f"line {error.line}: ")


def test_the_line_is_where_the_mistake_is() -> None:
    assert refused("CREATE RULE r\nFOR q\nIF a\n\nENQUEUE b INTO c").line == 5
    assert refused("CREATE QUEUE a;\n\n'x\n\n").line == 3
    assert refused("CREATE RULE r FOR q IF a = '\n\n\n' THEN ENQUEUE b").line == 4
    assert refused("/*\n\n*/ CREATE QUEUE a KIND\n\nx").line == 5


def test_quoted_string_in_a_name_position_is_refused() -> None:
    error = refused("CREATE QUEUE 'b';")
    assert "expected the queue's name" in str(error)


# --- hostile input ----------------------------------------------------------------------
def test_a_megabyte_of_garbage() -> None:
    rng = random.Random(20)
    garbage = "".join(chr(rng.randrange(1, 0x3000)) for _ in range(1_000_000))
    refused(garbage)
    refused("CREATE RULE r FOR q IF " + garbage)
    refused("CREATE RULE r FOR q IF " + "(" * 1_000_000)
    refused("CREATE RULE r FOR q IF a THEN ENQUEUE '" + "x" * 1_000_000)


def test_an_expression_longer_than_the_expression_limit() -> None:
    error = refused("CREATE RULE r FOR q IF " + "a AND " * (MAX_LENGTH // 6 + 1) + "b THEN RESET")
    assert f"longer than {MAX_LENGTH} characters" in str(error)


def test_deep_parentheses_are_text_for_the_checker() -> None:
    depth = MAX_LENGTH // 2 - 10
    r = rule(f"CREATE RULE r FOR q IF {'(' * depth}true{')' * depth} THEN RESET")
    condition = r.branches[0].condition
    assert condition is not None
    assert len(condition.text) == 2 * depth + 4


def test_a_megabyte_of_statements() -> None:
    text = "".join(f"CREATE QUEUE q{n} RETENTION {n} s;\n" for n in range(30_000))
    assert len(text) > 900_000
    statements = parse_statements(text)
    assert statements[-1] == QueueDef("q29999", 30_000, retention=29999.0)


@pytest.mark.parametrize("value", [None, b"CREATE QUEUE q", 1, ["CREATE QUEUE q"]])
def test_text_only(value: object) -> None:
    with pytest.raises(RuleDefinitionError, match="a rules definition is text"):
        parse_statements(value)  # type: ignore[arg-type]


_WORDS = [
    "CREATE", "QUEUE", "PROPERTY", "SLICING", "RULE", "DROP", "SET", "ERRORQUEUE", "KIND",
    "echo", "basic", "MODE", "PRIORITY", "TYPE", "RETENTION", "AS", "text", "FIXED", "INHERITED",
    "VALUE", "ON", "FOR", "IF", "THEN", "ELSE", "ENQUEUE", "INTO", "WITH", "RESET", "KEY",
    "EXISTS", "CASE", "WHEN", "END", "forever", "days", "q", "p", "s", "body.a", "'x'", "'",
    '"q"', '"', "1", "-1", "2.5", "(", ")", "[", "]", ",", ";", "=", ".", "--", "/*", "*/",
    "\n", "queue('q')", "é", "\x00",
]  # fmt: skip
_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _answer(text: str) -> None:
    """Statements, or a RuleDefinitionError at a line of the text; nothing else."""
    error: RuleDefinitionError | None = None
    try:
        statements = parse_statements(text)
    except RuleDefinitionError as exc:
        error = exc
    if error is None:
        assert all(statement.line >= 1 for statement in statements)
        return
    assert error.line is not None
    assert 1 <= error.line <= text.count("\n") + 1
    assert str(error).startswith(f"line {error.line}: ")


@_FUZZ
@given(st.text(max_size=200))
def test_fuzz_random_text(text: str) -> None:
    _answer(text)


@_FUZZ
@given(st.lists(st.sampled_from(_WORDS), max_size=40), st.sampled_from([" ", "", "\n"]))
def test_fuzz_token_soup(words: list[str], sep: str) -> None:
    _answer(sep.join(words))


@_FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "CREATE QUEUE q",
                "CREATE RULE r FOR q IF",
                "THEN ENQUEUE",
                "INTO q WITH p =",
                "ELSE",
                "RESET s KEY",
                "CASE WHEN a THEN 1 ELSE 2 END",
                "f(a, b)",
                ", ",
                ";",
            ]
        ),
        max_size=20,
    )
)
def test_fuzz_statement_fragments(parts: list[str]) -> None:
    _answer(" ".join(parts))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(["body.a", "1", "'x, y'", "f(a, b)", "CASE WHEN a THEN b ELSE c END"]),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([" = ", " AND ", " || ", ", "]),
)
def test_fuzz_expressions_come_back_as_written(parts: list[str], joiner: str) -> None:
    value = "coalesce(" + joiner.join(parts) + ")"
    condition = joiner.join(parts) if joiner != ", " else value
    r = rule(f"CREATE RULE r FOR q IF {condition} THEN ENQUEUE 1 INTO o WITH p = {value}, b = 1")
    assert r.branches[0].condition == Expr(condition, 1)
    (action,) = r.branches[0].actions
    assert isinstance(action, Enqueue)
    assert action.properties == (("p", Expr(value, 1)), ("b", Expr("1", 1)))
