"""Content-aware queuing on every backend: typed messages, priority functions,
selective and ordering dequeue, declared properties."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import sluice

JPMQ = """
DEFINE MESSAGETYPE OrderMessage;
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

TOTAL = "sum(body.lines, l -> l.price * l.amout)"
ITEMS = "sum(body.lines, l -> count(l.item))"


def order(number: int, customer: str, lines: int, price: float = 10.0) -> dict[str, Any]:
    item = {"id": 7, "name": "bolt", "ean": 4006381333931}
    return {
        "id": number,
        "date": "2024-05-01",
        "customer": {"name": customer},
        "lines": [
            {"line_no": k, "amout": 1, "price": price, "item": [item] * (k + 1)}
            for k in range(lines)
        ],
    }


@pytest.fixture
def orders(db: sluice.Database) -> sluice.Queue:
    db.create_type(jpmq=JPMQ)
    queue = db.create_queue("orders", types=["OrderMessage"], priority={"OrderMessage": TOTAL})
    db.create_property("customer", "body.customer.name", queues=["orders"])
    return queue


def ids(messages: list[sluice.Message]) -> list[int]:
    return [m.body["id"] for m in messages]


# --- typed messages -----------------------------------------------------------------
def test_jpmq_type_accepts_conforming_orders_and_names_the_violation(
    db: sluice.Database, orders: sluice.Queue
) -> None:
    orders.put(order(1, "Smith", 2))
    bad = order(2, "Smith", 1)
    bad["lines"][0]["price"] = "ten"
    with pytest.raises(sluice.TypeViolation, match=r"OrderMessage.*\['lines'\]\[0\]\['price'\]"):
        orders.put(bad)
    with pytest.raises(sluice.TypeViolation, match="'date' is a required property"):
        orders.put({"id": 3, "lines": []})
    assert ids(orders.browse()) == [1]
    assert orders.browse()[0].type == "OrderMessage"


def test_a_refused_body_in_a_batch_stores_none_of_it(orders: sluice.Queue) -> None:
    with pytest.raises(sluice.TypeViolation):
        orders.put_many([order(1, "a", 1), {"id": 2}])
    assert orders.stats()["ready"] == 0


def test_json_schema_types_and_a_queue_of_several_types(db: sluice.Database) -> None:
    db.create_type("Ping", schema={"type": "object", "required": ["at"]})
    db.create_type("Pong", schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    q = db.create_queue("mixed", types=["Ping", "Pong"])
    with pytest.raises(sluice.TypeViolation, match="pass type="):
        q.put({"at": 1})
    q.put({"at": 1}, type="Ping")
    with pytest.raises(sluice.TypeViolation, match="not one of type 'Nope'"):
        q.put({"at": 1}, type="Nope")
    with pytest.raises(sluice.TypeViolation, match="is not of type 'integer'"):
        q.put({"n": "x"}, type="Pong")
    assert [m.type for m in q.browse()] == ["Ping"]


def test_untyped_queues_take_typed_messages_and_check_them(db: sluice.Database) -> None:
    db.create_type("Ping", schema={"type": "object", "required": ["at"]})
    q = db.create_queue("any")
    q.put("plain text")
    q.put({"at": 2}, type="Ping")
    with pytest.raises(sluice.TypeViolation):
        q.put({}, type="Ping")
    with pytest.raises(sluice.TypeViolation, match="not defined"):
        q.put({}, type="Unknown")
    assert [m.type for m in q.browse()] == [None, "Ping"]


class Invoice(pydantic.BaseModel):
    number: int
    customer: str
    amount: float


def test_pydantic_models_define_types_and_come_back_as_instances(db: sluice.Database) -> None:
    assert db.create_type(model=Invoice) == "Invoice"
    q = db.create_queue("invoices", types=["Invoice"])
    q.put(Invoice(number=1, customer="Smith", amount=9.5))
    q.put({"number": 2, "customer": "Jones", "amount": 1})
    with pytest.raises(sluice.TypeViolation, match="number"):
        q.put({"number": "two", "customer": "Jones", "amount": 1})
    first = q.get()
    assert first is not None
    assert first.body == Invoice(number=1, customer="Smith", amount=9.5)
    first.ack()
    assert q.get(where="body.customer = 'Jones'").body.number == 2  # type: ignore[union-attr]


def test_a_consumer_without_the_model_gets_plain_dicts(
    db: sluice.Database, backend_url: str
) -> None:
    db.create_type(model=Invoice)
    q = db.create_queue("invoices", types=["Invoice"])
    q.put(Invoice(number=1, customer="Smith", amount=9.5))
    if backend_url.startswith("memory"):
        return  # another Database cannot reach an in-memory one
    with sluice.connect(backend_url) as other:
        message = other.queue("invoices").get()
        assert message is not None
        assert message.body == {"number": 1, "customer": "Smith", "amount": 9.5}
        other.bind_model(Invoice)
        message.release()
        again = other.queue("invoices").get()
        assert again is not None
        assert isinstance(again.body, Invoice)
        again.ack()


class Payment(pydantic.BaseModel):
    number: int
    amount: float

    @pydantic.field_validator("amount")
    @classmethod
    def positive(cls, amount: float) -> float:
        if amount <= 0:
            raise ValueError("amount must be positive")
        return amount


def test_a_body_its_bound_model_refuses_is_rejected_with_why_and_the_next_taken(
    db: sluice.Database,
) -> None:
    """Stored where the model was not bound (only the type's JSON Schema checked, which
    knows nothing of the validator): a reader that binds it cannot hand the body out as
    the model, so it rejects it into the error queue, in its transaction, and takes the
    next message in its place."""
    db.create_type("Payment", schema=Payment.model_json_schema())
    db.create_queue("refused")
    q = db.create_queue("payments", types=["Payment"], error_queue="refused")
    q.put_many([{"number": 1, "amount": -5}, {"number": 2, "amount": 5}])
    db.bind_model(Payment)
    with db.transaction() as tx:
        (taken,) = tx.dequeue("payments")
        assert taken.body == Payment(number=2, amount=5)
        tx.abort()  # the rejection too: both are back
    assert q.stats()["ready"] == 2
    assert db.queue("refused").stats()["ready"] == 0
    # Browsing shows what is stored: the refused body as stored.
    shown = [m.body for m in q.browse()]
    assert shown == [{"number": 1, "amount": -5}, Payment(number=2, amount=5)]
    got = q.get()
    assert got is not None
    assert got.body == Payment(number=2, amount=5)
    got.ack()
    (refused,) = db.queue("refused").browse()
    assert refused.body == {"number": 1, "amount": -5}
    assert refused.error is not None
    assert "bound model Payment" in refused.error
    assert "amount must be positive" in refused.error
    assert q.get() is None


XSD = """<?xml version="1.0"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="invoice">
    <xs:complexType><xs:sequence>
      <xs:element name="customer" type="xs:string"/>
      <xs:element name="amount" type="xs:decimal"/>
    </xs:sequence></xs:complexType>
  </xs:element>
</xs:schema>"""


def test_xml_types_are_checked_with_their_schema(db: sluice.Database) -> None:
    db.create_type("XmlInvoice", xml_schema=XSD)
    q = db.create_queue("xml", types=["XmlInvoice"])
    q.put("<invoice><customer>Smith</customer><amount>12.50</amount></invoice>")
    with pytest.raises(sluice.TypeViolation, match="amount"):
        q.put("<invoice><customer>Smith</customer><amount>lots</amount></invoice>")
    with pytest.raises(sluice.InvalidBody, match="not well-formed XML"):
        q.put("<invoice><customer>Smith</invoice>")
    with pytest.raises(sluice.TypeViolation, match="is XML"):
        q.put({"customer": "Smith"})
    m = q.get(
        where="xpath(body, '/invoice/customer') = 'Smith' AND xpath_number(body, '//amount') > 12"
    )
    assert m is not None
    assert m.content_type == "application/xml"
    m.ack()


def test_xml_external_entities_are_not_read(db: sluice.Database, tmp_path: Any) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret")
    q = db.create_queue("xml")
    q.put(
        f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file://{secret}">]><x>&e;</x>',
        content_type="application/xml",
    )
    assert q.browse(where="xpath(body, '/x') LIKE '%top-secret%'") == []
    assert len(q.browse(where="xpath_boolean(body, '/x')")) == 1


def test_bad_type_definitions_are_refused(db: sluice.Database) -> None:
    with pytest.raises(sluice.TypeDefinitionError, match="exactly one of"):
        db.create_type("T")
    with pytest.raises(sluice.TypeDefinitionError, match="not a valid JSON Schema"):
        db.create_type("T", schema={"type": "no-such-type"})
    with pytest.raises(sluice.TypeDefinitionError, match="line"):
        db.create_type(jpmq="DEFINE MESSAGETYPE X; NODE a; b: NOPE; END; ROOT a; END;")
    with pytest.raises(sluice.TypeDefinitionError, match="XML Schema"):
        db.create_type("T", xml_schema="<not-a-schema/>")
    with pytest.raises(sluice.ConfigurationError, match="not defined"):
        db.create_queue("q", types=["Missing"])
    db.create_type("T", schema={"type": "object"})
    with pytest.raises(sluice.ConfigurationError, match="exists already"):
        db.create_type("T", schema={"type": "object"})


# --- priority functions ---------------------------------------------------------------
def test_priority_function_orders_by_content_unless_the_producer_says(
    orders: sluice.Queue,
) -> None:
    orders.put(order(1, "a", 1))  # total 10
    orders.put(order(2, "b", 3))  # total 30
    orders.put(order(3, "c", 2), priority=1000)
    assert [(m.body["id"], m.priority) for m in orders.browse()] == [(3, 1000), (2, 30), (1, 10)]


def test_priority_function_for_any_type_and_null_results(db: sluice.Database) -> None:
    q = db.create_queue("jobs", priority={"*": "CASE WHEN body.urgent THEN 10 END"})
    q.put({"urgent": True, "n": 1})
    q.put({"n": 2})
    assert [(m.body["n"], m.priority) for m in q.browse()] == [(1, 10), (2, 0)]
    with pytest.raises(sluice.ExpressionError):
        db.create_queue("bad", priority={"*": "body.x ="})
    with pytest.raises(sluice.ExpressionError, match="text"):
        db.create_queue("bad", priority={"*": "'high'"})


# --- selective and ordering dequeue ---------------------------------------------------
def test_selective_ordering_dequeue_takes_smiths_orders_most_items_first(
    db: sluice.Database, orders: sluice.Queue
) -> None:
    for n, (customer, lines) in enumerate([("Smith", 1), ("Jones", 3), ("Smith", 3), ("Smith", 2)]):
        orders.put(order(n, customer, lines))
    with db.transaction() as tx:
        taken = tx.dequeue(
            "orders", where="customer = 'Smith'", order_by=[f"{ITEMS} DESC"], limit=10
        )
        assert ids(taken) == [2, 3, 0]
    assert ids(orders.browse()) == [1]


def test_selection_is_undone_by_abort_and_leaves_others_in_place(
    db: sluice.Database, orders: sluice.Queue
) -> None:
    for n, customer in enumerate(["Smith", "Jones", "Smith"]):
        orders.put(order(n, customer, 1))
    tx = db.begin()
    assert ids(tx.dequeue("orders", where="body.customer.name = 'Jones'")) == [1]
    assert ids(orders.browse()) == [0, 2]
    tx.abort()
    assert ids(orders.browse()) == [0, 1, 2]


def test_get_and_browse_take_the_same_options(orders: sluice.Queue) -> None:
    for n, lines in enumerate([2, 1, 3]):
        orders.put(order(n, "Smith", lines), priority=0)
    assert ids(orders.browse(order_by=["body.id DESC"])) == [2, 1, 0]
    assert ids(orders.browse(where="count(body.lines) >= 2", order_by=["count(body.lines)"])) == [
        0,
        2,
    ]
    m = orders.get(order_by=[f"{TOTAL} DESC"])
    assert m is not None
    assert m.body["id"] == 2
    m.ack()
    assert orders.get(where="customer = 'Nobody'") is None


def test_ordering_by_a_json_value_puts_numbers_before_text_and_nulls_last(
    db: sluice.Database,
) -> None:
    q = db.create_queue("mixed")
    for value in ["b", 10, None, 2, "a", 2.5]:
        q.put({"k": value})
    assert [m.body["k"] for m in q.browse(order_by=["body.k"])] == [2, 2.5, 10, "a", "b", None]
    assert [m.body["k"] for m in q.browse(order_by=["body.k DESC"])] == [
        10, 2.5, 2, "b", "a", None,
    ]  # fmt: skip


def test_selection_waits_for_a_matching_message(db: sluice.Database) -> None:
    q = db.create_queue("w")
    q.put({"kind": "other"})
    assert q.get(where="body.kind = 'mine'", wait=0.05) is None
    q.put({"kind": "mine"})
    m = q.get(where="body.kind = 'mine'", wait=1.0)
    assert m is not None
    assert m.body == {"kind": "mine"}


def test_own_enqueues_are_selectable_in_the_same_transaction(db: sluice.Database) -> None:
    db.create_queue("w")
    with db.transaction() as tx:
        tx.enqueue("w", {"n": 1})
        tx.enqueue("w", {"n": 2})
        assert [m.body for m in tx.dequeue("w", where="body.n = 2")] == [{"n": 2}]
        assert [m.body for m in tx.browse("w", where="body.n > 0")] == [{"n": 1}]


def test_expressions_are_checked_before_anything_happens(db: sluice.Database) -> None:
    q = db.create_queue("w")
    q.put({"n": 1})
    cases = {
        "body.n = 1; DELETE FROM messages": "';' ends a statement",
        "(SELECT count(*) FROM messages) > 0": "subqueries",
        "sqlite_version() = '3'": "no function 'sqlite_version'",
        "queues.name = 'w'": "reaches outside the message",
        "body.n = 'x' + 1": "number",
    }
    for where, fragment in cases.items():
        with pytest.raises(sluice.ExpressionError, match=fragment):
            q.get(where=where)
    with pytest.raises(sluice.ExpressionError):
        q.browse(order_by=["body.n; DROP TABLE queues"])
    with pytest.raises(sluice.ExpressionError, match="list of keys"):
        q.browse(order_by="body.n")
    assert q.stats()["ready"] == 1


def test_a_selection_on_a_queue_that_does_not_exist(db: sluice.Database) -> None:
    with pytest.raises(sluice.QueueNotFound):
        db.queue("nope")
    with db.transaction() as tx, pytest.raises(sluice.QueueNotFound):
        tx.dequeue("nope", where="body.n = 1")


# --- declared properties --------------------------------------------------------------
def test_declared_properties_are_filled_for_messages_already_queued(db: sluice.Database) -> None:
    q = db.create_queue("late")
    q.put({"region": "north", "total": 5})
    q.put({"region": "south", "total": 50})
    db.create_property("region", "body.region", queues=["late"])
    db.create_property("big", "body.total > 10", queues=["late"])
    db.create_property("total", "body.total", queues=["late"], type="number")
    q.put({"region": "north", "total": 500})
    assert [m.body["total"] for m in q.browse(where="region = 'north'")] == [5, 500]
    assert [m.body["total"] for m in q.browse(where="big")] == [50, 500]
    assert [m.body["total"] for m in q.browse(order_by=["total DESC"])] == [500, 50, 5]


def test_property_declarations_are_checked(db: sluice.Database) -> None:
    db.create_queue("a")
    with pytest.raises(sluice.ExpressionError):
        db.create_property("p", "body.x +", queues=["a"])
    with pytest.raises(sluice.QueueNotFound):
        db.create_property("p", "body.x", queues=["missing"])
    with pytest.raises(sluice.ConfigurationError, match="list of queue names"):
        db.create_property("p", "body.x", queues="a")
    for n in range(4):
        db.create_property(f"p{n}", f"body.x{n}", queues=["a"])
    with pytest.raises(sluice.ConfigurationError, match="4 declared text properties"):
        db.create_property("p4", "body.x4", queues=["a"])
    db.create_property("n0", "body.y", queues=["a"], type="number")
    with pytest.raises(sluice.ConfigurationError, match="exists already"):
        db.create_property("n0", "body.y", queues=["a"], type="number")


def test_declared_property_selection_is_an_index_lookup(
    db: sluice.Database, orders: sluice.Queue
) -> None:
    orders.put(order(1, "Smith", 1))
    backend: Any = db.backend
    select = db.context.content("orders").selection("customer = 'Smith'", None)
    if db.backend.dialect == "sqlite":
        query, params = backend._selected("claim_one", select)
        plan = backend._conn.execute(
            "EXPLAIN QUERY PLAN " + query,
            params | {"session": 0, "tx": 0, "queue": "orders", "limit": 1, "now": 0},
        ).fetchall()
        assert any("messages_t1" in row[-1] for row in plan), plan
    else:
        name, params = backend.selected("claim", select)
        with backend._conn() as conn:
            plan = conn.execute(
                "EXPLAIN " + backend._q[name],
                params | {"session": 0, "tx": 0, "queue": "orders", "limit": 1, "now": 0},
            ).fetchall()
        assert any("messages_" in row[0] and "_t1" in row[0] for row in plan), plan
