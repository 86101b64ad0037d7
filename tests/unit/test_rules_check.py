"""Applying rules statements onto an application, and the checks that need no message:
unknown names, misused properties, echo queues, drops of what is still used, and
every expression checked in its rule's scope, each reported at its line."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.errors import ExpressionError, RuleDefinitionError
from sluice.expr.check import Relations, Scope, parse
from sluice.rules.check import (
    apply_statements,
    check_application,
    queues_of_slicing,
    rules_of,
    same_definition,
)
from sluice.rules.language import parse_statements
from sluice.rules.model import Application, Branch, Enqueue, Expr, PropertyDef, RuleDef

# Demaq's procurement process (CIDR 2007, Figs. 5-10) with what the expression checker
# takes today: props.p for a property, text for the XML it builds, no relations.
PROCUREMENT_TODAY = """
SET ERRORQUEUE crmErrors;

CREATE QUEUE offerRequests PRIORITY 2 RETENTION 7 days;
CREATE QUEUE finance;
CREATE QUEUE legal;
CREATE QUEUE supplier;
CREATE QUEUE results;
CREATE QUEUE customer MODE persistent RETENTION 30d;
CREATE QUEUE invoices RETENTION forever;
CREATE QUEUE payments;
CREATE QUEUE reminders KIND echo;
CREATE QUEUE overdue;
CREATE QUEUE crmErrors ERRORQUEUE adminErrors;
CREATE QUEUE adminErrors;

CREATE PROPERTY requestID AS text FIXED
    QUEUE offerRequests VALUE xpath(body, '/offerRequest/@id')
    QUEUE finance, legal, supplier, results VALUE xpath(body, '/*/@requestID');
CREATE PROPERTY invoiceID AS text
    QUEUE invoices VALUE xpath(body, '/invoice/@id')
    QUEUE payments VALUE xpath(body, '/payment/@invoice')
    QUEUE reminders, overdue;
CREATE PROPERTY echo_target AS text QUEUE reminders;
CREATE PROPERTY echo_after AS real QUEUE reminders;
CREATE PROPERTY verdict AS boolean QUEUE results;

CREATE SLICING requestMsgs ON requestID;
CREATE SLICING invoiceRetention ON invoiceID;

CREATE RULE forkRequest FOR offerRequests
    ENQUEUE body INTO finance,
    ENQUEUE body INTO legal,
    ENQUEUE body INTO supplier;

CREATE RULE creditCheck FOR finance ERRORQUEUE crmErrors
    IF xpath_number(body, '/offerRequest/amount') > 10000 THEN
        ENQUEUE '<check requestID="' || props.requestID || '" by="finance"/>' INTO results
            WITH verdict = false
    ELSE
        ENQUEUE '<check by="finance"/>' INTO results WITH verdict = true;

CREATE RULE legalCheck FOR legal
    IF CASE WHEN xpath(body, '/offerRequest/country') IN ('XX', 'YY') THEN false
            ELSE true END
    THEN ENQUEUE '<check by="legal"/>' INTO results WITH verdict = true
    ELSE ENQUEUE '<check by="legal"/>' INTO results WITH verdict = false;

CREATE RULE joinChecks FOR requestMsgs
    IF props.verdict = false THEN
        ENQUEUE 'refused' INTO customer, RESET
    ELSE IF props.rule = 'supplierCheck' THEN
        ENQUEUE 'offer' INTO customer;

CREATE RULE remindUnpaid FOR invoices
    ENQUEUE body INTO reminders
        WITH echo_target = 'overdue', echo_after = 30 * 86400,
             invoiceID = coalesce(xpath(body, '/invoice/@id'), 'none');

CREATE RULE remindCustomer FOR overdue
    IF props.invoiceID IS NOT NULL THEN ENQUEUE body INTO customer;

CREATE RULE resetPaidInvoices FOR payments
    RESET invoiceRetention;

CREATE RULE deadLink FOR crmErrors
    ENQUEUE body INTO adminErrors;
"""

# The same process as Demaq writes it: property(), relations and XML constructors.
PROCUREMENT = """
SET ERRORQUEUE crmErrors;

CREATE QUEUE offerRequests PRIORITY 2 RETENTION 7 days;
CREATE QUEUE finance;
CREATE QUEUE legal;
CREATE QUEUE supplier;
CREATE QUEUE results;
CREATE QUEUE customer RETENTION 30d;
CREATE QUEUE invoices RETENTION forever;
CREATE QUEUE payments;
CREATE QUEUE reminders KIND echo;
CREATE QUEUE overdue;
CREATE QUEUE crmErrors ERRORQUEUE adminErrors;
CREATE QUEUE adminErrors;

CREATE PROPERTY requestID AS text FIXED
    QUEUE offerRequests VALUE xpath(body, '/offerRequest/@id')
    QUEUE finance, legal, supplier, results VALUE xpath(body, '/*/@requestID');
CREATE PROPERTY customerID AS text
    QUEUE offerRequests VALUE xpath(body, '/offerRequest/customer/@id')
    QUEUE invoices VALUE xpath(body, '/invoice/customer/@id')
    QUEUE finance;
CREATE PROPERTY invoiceID AS text
    QUEUE invoices VALUE xpath(body, '/invoice/@id')
    QUEUE payments VALUE xpath(body, '/payment/@invoice')
    QUEUE reminders, overdue;
CREATE PROPERTY paid AS boolean QUEUE invoices;
CREATE PROPERTY echo_target AS text QUEUE reminders;
CREATE PROPERTY echo_after AS real QUEUE reminders;
CREATE PROPERTY verdict AS boolean QUEUE results;

CREATE SLICING requestMsgs ON requestID;
CREATE SLICING invoiceRetention ON invoiceID;

CREATE RULE forkRequest FOR offerRequests
    ENQUEUE xmlelement(name creditCheck, xmlattributes(property('requestID') AS requestID),
                       xpath_nodes(body, '/offerRequest/customer')) INTO finance
        WITH customerID = property('customerID'),
    ENQUEUE xmlelement(name legalCheck, xmlattributes(property('requestID') AS requestID),
                       xpath_nodes(body, '/offerRequest/items')) INTO legal,
    ENQUEUE xmlelement(name availabilityCheck,
                       xmlattributes(property('requestID') AS requestID),
                       xpath_nodes(body, '/offerRequest/items')) INTO supplier;

CREATE RULE creditCheck FOR finance ERRORQUEUE crmErrors
    IF EXISTS (SELECT 1 FROM queue('invoices') AS i
               WHERE i.props.customerID = property('customerID') AND i.props.paid = false)
    THEN ENQUEUE xmlelement(name creditResult, xmlattributes(property('requestID') AS requestID,
                                                     'finance' AS checker)) INTO results
            WITH verdict = false
    ELSE ENQUEUE xmlelement(name creditResult, xmlattributes(property('requestID') AS requestID,
                                                      'finance' AS checker)) INTO results
            WITH verdict = true;

CREATE RULE joinChecks FOR requestMsgs
    IF (SELECT count(*) FROM slice() AS m WHERE m.props.verdict = true) = 3
    THEN ENQUEUE xmlelement(name offer, xmlattributes(slicekey() AS requestID)) INTO customer,
         RESET
    ELSE IF EXISTS (SELECT 1 FROM slice() AS m WHERE m.props.verdict = false)
    THEN ENQUEUE json_object('requestID', slicekey(), 'refused', true) INTO customer;

CREATE RULE remindUnpaid FOR invoices
    ENQUEUE xmlelement(name reminder, xpath_nodes(body, '/invoice')) INTO reminders
        WITH echo_target = 'overdue', echo_after = 30 * 86400,
             invoiceID = property('invoiceID');

CREATE RULE remindCustomer FOR overdue
    IF NOT EXISTS (SELECT 1 FROM queue('payments') AS p
                   WHERE p.props.invoiceID = property('invoiceID'))
    THEN ENQUEUE xmlelement(name reminder, xpath_nodes(body, '/reminder/invoice')) INTO customer;

CREATE RULE resetPaidInvoices FOR payments
    RESET invoiceRetention;

CREATE RULE deadLink FOR crmErrors
    ENQUEUE json_object('lost', CAST(body.rule AS TEXT), 'at', now()) INTO adminErrors;
"""


def _has_rule_forms() -> bool:
    try:
        parse("property('p') = 'x'", Scope(relations=Relations(properties={"p": "text"})))
    except ExpressionError:
        return False
    return True


NEEDS_RULE_FORMS = pytest.mark.skipif(
    not _has_rule_forms(),
    reason="needs the rules forms of the expression checker (property(), queue(), slice(), "
    "slicekey(), the JSON and XML constructors): they come with the rules-expr branch",
)


def applied(text: str, current: Application | None = None) -> Application:
    return apply_statements(current or Application(), parse_statements(text))


def refused(text: str, current: Application | None = None) -> RuleDefinitionError:
    with pytest.raises(RuleDefinitionError) as caught:
        applied(text, current)
    return caught.value


# --- the procurement process ------------------------------------------------------------
def test_procurement_applies() -> None:
    app = applied(PROCUREMENT_TODAY)
    assert app.error_queue == "crmErrors"
    assert len(app.queues) == 12
    assert list(app.rules) == [
        "forkRequest",
        "creditCheck",
        "legalCheck",
        "joinChecks",
        "remindUnpaid",
        "remindCustomer",
        "resetPaidInvoices",
        "deadLink",
    ]
    assert queues_of_slicing(app, "requestMsgs") == [
        "offerRequests",
        "finance",
        "legal",
        "supplier",
        "results",
    ]
    assert [r.name for r in rules_of(app, "finance")] == ["creditCheck", "joinChecks"]
    assert [r.name for r in rules_of(app, "results")] == ["joinChecks"]
    assert [r.name for r in rules_of(app, "customer")] == []
    assert rules_of(app, "reminders") == []  # an echo queue: the engine forwards it
    assert rules_of(app, "nowhere") == []
    with pytest.raises(RuleDefinitionError, match="no slicing 'nowhere'"):
        queues_of_slicing(app, "nowhere")


@NEEDS_RULE_FORMS
def test_procurement_as_demaq_writes_it_applies() -> None:
    app = applied(PROCUREMENT)
    assert [r.name for r in rules_of(app, "finance")] == ["creditCheck", "joinChecks"]


def test_applying_again_changes_nothing() -> None:
    app = applied(PROCUREMENT_TODAY)
    assert applied(PROCUREMENT_TODAY, app) == app
    check_application(app)
    # Lines moved (a comment on top): the same definitions, at their new lines.
    moved = applied("-- v2\n\n" + PROCUREMENT_TODAY, app)
    assert moved != app
    for name, queue in app.queues.items():
        assert same_definition(queue, moved.queues[name])
        assert moved.queues[name].line == queue.line + 2
    for name, rule in app.rules.items():
        assert same_definition(rule, moved.rules[name])


def test_a_changed_definition_replaces_the_old_one() -> None:
    app = applied(PROCUREMENT_TODAY)
    changed = applied(
        "CREATE QUEUE customer RETENTION 1 d; CREATE RULE deadLink FOR crmErrors RESET "
        "invoiceRetention KEY 'x'",
        app,
    )
    assert changed.queues["customer"].retention == 86400
    assert not same_definition(app.queues["customer"], changed.queues["customer"])
    assert list(changed.rules) == list(app.rules)  # a replaced rule keeps its place
    assert app.queues["customer"].retention == 30 * 86400  # the current one is unchanged


def test_creating_a_name_twice_in_one_apply() -> None:
    error = refused("CREATE QUEUE a;\nCREATE QUEUE a;")
    assert error.line == 2
    assert "queue 'a' is created twice, at lines 1 and 2" in str(error)
    assert applied("CREATE QUEUE a; DROP QUEUE a; CREATE QUEUE a KIND basic").queues["a"]


# --- drops ------------------------------------------------------------------------------
def test_drops() -> None:
    app = applied(PROCUREMENT_TODAY)
    smaller = applied("DROP RULE deadLink; DROP RULE IF EXISTS nothing", app)
    assert "deadLink" not in smaller.rules
    assert "deadLink" in app.rules
    error = refused("\nDROP RULE nothing", app)
    assert (error.line, str(error)) == (
        2,
        "line 2: DROP RULE nothing: there is no rule 'nothing' (DROP ... IF EXISTS drops only "
        "what is there)",
    )
    # Dropping users and used in one apply, in either order.
    for text in (
        "DROP QUEUE adminErrors; CREATE QUEUE crmErrors",
        "CREATE QUEUE crmErrors; DROP QUEUE adminErrors",
    ):
        gone = applied(text, smaller)
        assert "adminErrors" not in gone.queues
        assert gone.queues["crmErrors"].error_queue is None


@pytest.mark.parametrize(
    ("drop", "users"),
    [
        ("DROP QUEUE adminErrors", ["queue 'crmErrors' has it as ERRORQUEUE", "rule 'deadLink'"]),
        ("DROP QUEUE results", ["property 'requestID' is declared on it", "rule 'creditCheck'"]),
        ("DROP QUEUE crmErrors", ["the file's error queue", "rule 'deadLink' is for it"]),
        ("DROP QUEUE legal", ["rule 'forkRequest' enqueues into it", "rule 'legalCheck' is for"]),
        ("DROP PROPERTY requestID", ["slicing 'requestMsgs' is on it"]),
        ("DROP PROPERTY verdict", ["rule 'creditCheck' sets it", "rule 'legalCheck' sets it"]),
        ("DROP SLICING requestMsgs", ["rule 'joinChecks' is for it"]),
        ("DROP SLICING invoiceRetention", ["rule 'resetPaidInvoices' resets it"]),
    ],
)
def test_dropping_what_is_used_names_the_users(drop: str, users: list[str]) -> None:
    app = applied(PROCUREMENT_TODAY)
    error = refused(f"CREATE QUEUE extra;\n{drop}", app)
    assert error.line == 2
    assert str(error).startswith(f"line 2: cannot drop {drop.split()[1].lower()} ")
    for user in users:
        assert user in str(error)


# --- names ------------------------------------------------------------------------------
_BASE = """CREATE QUEUE q; CREATE QUEUE out; CREATE QUEUE errs;
CREATE PROPERTY k AS text FIXED QUEUE q, out VALUE body.k;
CREATE PROPERTY n AS integer QUEUE out;
CREATE SLICING s ON k;
"""
"""Four lines of definitions the statements below build on, from line 5."""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "CREATE PROPERTY p AS text QUEUE nowhere",
            "property 'p' QUEUE: there is no queue 'nowhere'",
        ),
        (
            "CREATE RULE r FOR nowhere RESET s",
            "rule 'r' is FOR 'nowhere', which is neither a queue",
        ),
        (
            "CREATE RULE r FOR q ENQUEUE 1 INTO nowhere",
            "ENQUEUE ... INTO: there is no queue 'nowhere'",
        ),
        (
            "CREATE RULE r FOR q ERRORQUEUE nowhere RESET s",
            "rule 'r' ERRORQUEUE: there is no queue",
        ),
        ("CREATE QUEUE x ERRORQUEUE nowhere", "queue 'x' ERRORQUEUE: there is no queue 'nowhere'"),
        ("SET ERRORQUEUE nowhere", "SET ERRORQUEUE nowhere: there is no queue 'nowhere'"),
        ("CREATE SLICING t ON nowhere", "slicing 't' is ON 'nowhere', which is not a property"),
        ("CREATE RULE r FOR q RESET nowhere", "RESET nowhere: there is no slicing 'nowhere'"),
        ("CREATE SLICING q ON k", "slicing 'q' has a queue's name"),
        ('CREATE QUEUE "a b"', "invalid queue name 'a b'"),
        ('CREATE RULE "a/b" FOR q RESET s', "invalid rule name 'a/b'"),
        ('CREATE SLICING "-x" ON k', "invalid slicing name '-x'"),
        ('CREATE QUEUE x TYPE "a b"', "invalid message type name 'a b'"),
        ("CREATE QUEUE x ERRORQUEUE x", "queue 'x' is its own ERRORQUEUE"),
        ("CREATE RULE r FOR q ERRORQUEUE q RESET s", "ERRORQUEUE 'q', a queue it processes"),
        ("CREATE RULE r FOR s ERRORQUEUE out RESET", "ERRORQUEUE 'out', a queue it processes"),
    ],
)
def test_unknown_and_bad_names(text: str, message: str) -> None:
    error = refused(_BASE + text)
    assert message in str(error), str(error)
    assert error.line == 5


# --- properties -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE PROPERTY rule AS text QUEUE q", "property 'rule' is a system property"),
        ("CREATE PROPERTY trigger_id AS integer QUEUE q", "'trigger_id' is a system property"),
        ('CREATE PROPERTY "my prop" AS text QUEUE q', "a property's name is an identifier"),
        (
            "CREATE PROPERTY p AS text FIXED QUEUE q VALUE 'a' QUEUE out",
            "FIXED but has no VALUE on queue 'out'",
        ),
        ("CREATE PROPERTY p AS text FIXED INHERITED QUEUE q VALUE 'a'", "FIXED and INHERITED"),
        ("CREATE PROPERTY p AS text INHERITED QUEUE q VALUE 'a'", "INHERITED (copied from"),
        (
            "CREATE PROPERTY p AS integer QUEUE q VALUE 'a'",
            """property 'p' VALUE: "'a'" is a text, where a number""",
        ),
        (
            "CREATE PROPERTY p AS boolean QUEUE q VALUE body.a + 1",
            "VALUE: 'body.a + 1' is a number",
        ),
        (
            "CREATE PROPERTY p AS text QUEUE q VALUE 1 +* 2",
            "line 6, column 44: property 'p' VALUE: '+' needs a value on its right",
        ),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO out WITH k = 'x'", "property 'k' is FIXED"),
        (
            "CREATE RULE r FOR q ENQUEUE 1 INTO q WITH n = 1",
            "property 'n' is not declared on queue 'q'",
        ),
        (
            "CREATE RULE r FOR q ENQUEUE 1 INTO out WITH zz = 1",
            "property 'zz' is not declared on queue 'out'",
        ),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO out WITH rule = 'x'", "'rule' is a system property"),
        (
            "CREATE RULE r FOR q ENQUEUE 1 INTO out WITH n = 'x'",
            """WITH n: "'x'" is a text, where a number""",
        ),
    ],
)
def test_property_mistakes(text: str, message: str) -> None:
    error = refused(_BASE + "\n" + text)
    assert message in str(error), str(error)
    assert error.line == 6


def test_with_sets_declared_properties_with_their_types() -> None:
    app = applied(_BASE + "CREATE RULE r FOR q ENQUEUE body INTO out WITH n = body.count + 1")
    rule = app.rules["r"]
    assert rule.branches == (
        Branch(None, (Enqueue(Expr("body", 5), "out", (("n", Expr("body.count + 1", 5)),)),)),
    )


# --- echo queues ------------------------------------------------------------------------
_ECHO = (
    _BASE
    + """CREATE QUEUE later KIND echo;
CREATE PROPERTY echo_target AS text QUEUE later;
CREATE PROPERTY echo_at AS timestamp QUEUE later;"""
)


def test_echo_queues() -> None:
    app = applied(
        _ECHO
        + "CREATE RULE r FOR q ENQUEUE body INTO later "
        + "WITH echo_target = 'out', echo_at = now() + 60"
    )
    assert rules_of(app, "later") == []


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("CREATE QUEUE e KIND echo", 8, "echo queue 'e' needs the properties echo_target (text)"),
        ("CREATE QUEUE e KIND echo; CREATE PROPERTY echo_after AS text QUEUE e", 8,
         "echo queue 'e' needs"),
        ("CREATE PROPERTY echo_after AS text QUEUE later", 5, "echo queue 'later' needs"),
        ("CREATE RULE r FOR later RESET s", 8, "rule 'r' is FOR echo queue 'later'"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO later", 8,
         "ENQUEUE INTO echo queue 'later' needs echo_target"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO later WITH echo_target = 'out'", 8,
         "needs echo_target and echo_after or echo_at"),
        ("CREATE RULE r FOR q ENQUEUE 1 INTO later WITH echo_target = 'nowhere', echo_at = 5",
         8, "echo_target: there is no queue 'nowhere'"),
    ],
)  # fmt: skip
def test_echo_mistakes(text: str, line: int, message: str) -> None:
    error = refused(_ECHO + "\n" + text)  # on line 8
    assert message in str(error), str(error)
    assert error.line == line


# --- expressions ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE RULE r FOR q IF body.a + 1 THEN RESET s",
         "IF condition: 'body.a + 1' is a number, where a boolean"),
        ("CREATE RULE r FOR q IF foo = 1 THEN RESET s",
         "line 6, column 24: rule 'r' IF condition: unknown name 'foo'"),
        ("CREATE RULE r FOR q IF (SELECT 1) = 1 THEN RESET s", "rule 'r' IF condition:"),
        ("CREATE RULE r FOR q ENQUEUE NULL INTO out", "ENQUEUE NULL: a message needs a body"),
        ("CREATE RULE r FOR q ENQUEUE 1 + INTO out",
         "line 6, column 32: rule 'r' ENQUEUE body: '+' needs a value"),
        ("CREATE RULE r FOR q RESET s KEY 1", "RESET KEY: '1' is a number, where a text"),
        ("CREATE RULE r FOR q RESET", "a bare RESET resets the current slice"),
        ("CREATE RULE r FOR q RESET t", "RESET t without KEY takes the triggering message's 'n'"),
    ],
)  # fmt: skip
def test_expression_mistakes(text: str, message: str) -> None:
    error = refused(_BASE + "CREATE SLICING t ON n;\n" + text)
    assert message in str(error), str(error)
    assert error.line == 6


def test_an_expression_error_is_at_the_expression_line() -> None:
    error = refused(
        _BASE
        + "CREATE RULE r FOR q\n  IF true\n  THEN ENQUEUE 1 INTO out\n"
        + "  ELSE IF\n\n body.a + 1 THEN RESET s"
    )
    assert error.line == 10
    assert isinstance(error.__cause__, ExpressionError)


def test_reset_forms() -> None:
    app = applied(
        _BASE
        + "CREATE RULE a FOR s RESET; CREATE RULE b FOR q RESET s; "
        + "CREATE RULE c FOR out RESET s KEY 'x' || CAST(body.n AS TEXT)"
    )
    assert sorted(app.rules) == ["a", "b", "c"]


def test_the_first_error_of_the_statements_given_is_reported() -> None:
    base = applied(_BASE)
    broken = Application(
        base.queues,
        base.properties,
        base.slicings,
        {"old": RuleDef("old", "nowhere", 1, (Branch(None, (Enqueue(Expr("1", 1), "out"),)),))},
    )
    with pytest.raises(RuleDefinitionError, match="line 1: rule 'old'"):
        check_application(broken)
    error = refused(
        "CREATE QUEUE x;\nCREATE QUEUE y ERRORQUEUE nowhere;\nCREATE QUEUE z ERRORQUEUE z", broken
    )
    assert error.line == 2
    assert refused("CREATE QUEUE ok", broken).line == 1  # the old mistake, now the only one


def test_property_definitions_are_checked_as_written() -> None:
    # Built by hand, not parsed: the model admits what the language cannot say.
    base = applied(_BASE)
    prop = PropertyDef("bare", "text", 9)
    with pytest.raises(
        RuleDefinitionError, match="line 9: property 'bare' is declared on no queue"
    ):
        apply_statements(base, [prop])
    branchless = RuleDef("r", "q", 3, ())
    with pytest.raises(RuleDefinitionError, match="only the last branch may go without"):
        apply_statements(base, [branchless])


# --- the forms the rules-expr branch adds -----------------------------------------------
@NEEDS_RULE_FORMS
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE RULE r FOR q IF property('n') = 1 THEN RESET s", "rule 'r' IF condition:"),
        ("CREATE RULE r FOR q IF EXISTS (SELECT 1 FROM slice() AS m) THEN RESET s",
         "rule 'r' IF condition:"),
        ("CREATE RULE r FOR q IF slicekey() = 'a' THEN RESET s", "rule 'r' IF condition:"),
        ("CREATE RULE r FOR q IF count(queue('nowhere')) > 1 THEN RESET s",
         "rule 'r' IF condition:"),
        ("CREATE PROPERTY p AS integer QUEUE out VALUE count(queue('q'))", "property 'p' VALUE:"),
        ("CREATE PROPERTY p AS text QUEUE out VALUE property('k')", "property 'p' VALUE:"),
        ("CREATE RULE r FOR s IF property('n') = 1 THEN RESET", "rule 'r' IF condition:"),
    ],
)  # fmt: skip
def test_rule_forms_out_of_their_scope(text: str, message: str) -> None:
    error = refused(_BASE + "\n" + text)
    assert message in str(error), str(error)
    assert error.line == 6


@NEEDS_RULE_FORMS
def test_rule_forms_in_their_scope() -> None:
    app = applied(
        _BASE
        + """CREATE RULE a FOR s IF slicekey() = property('k')
                AND (SELECT count(*) FROM slice() AS m WHERE m.props.n > 1) = 2
             THEN ENQUEUE json_object('k', slicekey(), 'at', now()) INTO out WITH n = 1;
           CREATE RULE b FOR out IF property('n') = 1 AND count(queue('q')) > 0
             THEN ENQUEUE xmlelement(name x, xmlattributes(property('k') AS k)) INTO q"""
    )
    assert sorted(app.rules) == ["a", "b"]


# --- hostile definitions ----------------------------------------------------------------
def test_deep_parentheses_in_an_expression() -> None:
    depth = 3000
    error = refused(_BASE + f"CREATE RULE r FOR q IF {'(' * depth}true{')' * depth} THEN RESET s")
    assert error.line == 5
    assert str(error).startswith("line 5, column 24: rule 'r' IF condition: ")
    assert all(len(line) < 100 for line in str(error).splitlines())  # shown cut, not 6000 long


_STATEMENTS = [
    "CREATE QUEUE q",
    "CREATE QUEUE out ERRORQUEUE q",
    "CREATE QUEUE e KIND echo",
    'CREATE QUEUE "x y"',
    "CREATE PROPERTY k AS text QUEUE q, out VALUE body.k",
    "CREATE PROPERTY k AS integer FIXED QUEUE q",
    "CREATE PROPERTY n AS integer INHERITED QUEUE out",
    "CREATE PROPERTY echo_target AS text QUEUE e",
    "CREATE PROPERTY echo_at AS timestamp QUEUE e",
    "CREATE PROPERTY rule AS text QUEUE q",
    "CREATE SLICING s ON k",
    "CREATE SLICING q ON n",
    "CREATE RULE r FOR q IF body.a = 1 THEN ENQUEUE body INTO out WITH n = 1 ELSE RESET s",
    "CREATE RULE r FOR s IF props.k = 'a' THEN RESET ELSE ENQUEUE NULL INTO out",
    "CREATE RULE t FOR out ENQUEUE 1 INTO e WITH echo_target = 'q', echo_at = now()",
    "CREATE RULE t FOR e RESET",
    "CREATE RULE u FOR q ERRORQUEUE out IF body.a + 1 THEN RESET s KEY 1",
    "DROP QUEUE q",
    "DROP QUEUE IF EXISTS out",
    "DROP PROPERTY k",
    "DROP SLICING s",
    "DROP RULE IF EXISTS r",
    "DROP RULE t",
    "SET ERRORQUEUE out",
    "SET ERRORQUEUE nowhere",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_STATEMENTS), max_size=12), st.booleans())
def test_fuzz_apply_raises_only_definition_errors(statements: list[str], on_base: bool) -> None:
    current = applied(_BASE) if on_base else Application()
    text = ";\n".join(statements)
    error: RuleDefinitionError | None = None
    try:
        app = applied(text, current)
    except RuleDefinitionError as exc:
        error = exc
    if error is not None:
        assert error.line is None or 1 <= error.line <= max(len(statements), 5)
        return
    check_application(app)  # what was accepted passes the checks on its own
    if not any(s.startswith("DROP") and "IF EXISTS" not in s for s in statements):
        assert applied(text, app) == app  # and applying it again changes nothing
